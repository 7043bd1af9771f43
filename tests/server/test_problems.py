"""Error codes -> HTTP statuses: every engine error code has a status, CQL and engine codes of the
same name map separately, and the app's one handler turns engine and CQL errors into problems."""

from __future__ import annotations

import pytest

from cqlstream.cql.errors import CqlError, Pos
from cqlstream.engine.dsms import Dsms
from cqlstream.engine.errors import CODES, EngineError, InputError, InUseError, KnobError, PlanFileError
from cqlstream.server.problems import PROBLEMS, STATUS, ProblemError, problem_of, status_of


def test_every_engine_code_has_a_status_and_every_row_a_code():
    engine_rows = {code for family, code in STATUS if family == "engine" and code is not None}
    assert engine_rows == set(CODES)
    assert all(100 <= s < 600 for s in STATUS.values())


def test_unlisted_codes_are_refused():
    with pytest.raises(ValueError, match="unlisted engine error code"):
        EngineError("no_such_code", "x")


def test_subclasses_carry_their_codes_and_details():
    assert InUseError("m", ["query 1"]).code == "in_use"
    assert KnobError("m").code == "bad_knob_value"
    assert PlanFileError("m").code == "bad_plan_file"
    e = InputError("bad row", 3, "A")
    assert (e.code, e.row, e.field, e.details) == ("invalid_input", 3, "A", {"row": 3, "field": "A"})
    assert all(issubclass(c, EngineError) for c in (InUseError, KnobError, InputError, PlanFileError))


def test_same_code_different_families():
    assert status_of("engine", "unknown_source") == 404  # a missing resource
    assert status_of("cql", "unknown_source") == 422  # query text naming nothing registered
    assert status_of("cql", "duplicate_name") == 409
    assert status_of("cql", "type_mismatch") == 422  # the family's default


def test_problem_documents():
    p = problem_of(InUseError("'S' is used by query 1", ["query 1"]))
    assert (p.status, p.to_dict()) == (
        409,
        {
            "type": "https://cqlstream.dev/problems/in_use",
            "title": "Conflict",
            "status": 409,
            "detail": "'S' is used by query 1",
            "code": "in_use",
            "users": ["query 1"],
        },
    )
    e = InputError("bad", 2, None)
    e.details["source"] = "S"
    assert problem_of(e).to_dict() == {
        "type": "https://cqlstream.dev/problems/invalid_input",
        "title": "Unprocessable Content",
        "status": 422,
        "detail": "bad",
        "code": "invalid_input",
        "row": 2,
        "source": "S",
    }
    c = CqlError("unknown_column", "unknown column 'Z'", Pos(1, 8, 1, 9), "select Z from S")
    assert problem_of(c).to_dict() == {
        "type": "https://cqlstream.dev/problems/unknown_column",
        "title": "Unprocessable Content",
        "status": 422,
        "detail": "unknown column 'Z'",
        "code": "unknown_column",
        "line": 1,
        "column": 8,
        "excerpt": "  select Z from S\n         ^",
    }
    assert problem_of(ProblemError(406, "not_acceptable", "x")).status == 406
    assert set(PROBLEMS) == {ProblemError, CqlError, EngineError}
    with pytest.raises(TypeError):
        problem_of(KeyError("x"))


def test_the_app_maps_engine_errors_and_treats_engine_bugs_as_crashes(make_server):
    d = Dsms()
    srv = make_server(dsms=d)
    with srv.client() as c:
        r = c.get("/entities/op:999")
        assert r.status_code == 404 and r.headers["content-type"].startswith("application/problem+json")
        assert r.json()["code"] == "unknown_entity" and r.json()["detail"] == "no entity 'op:999'"

        def broken(eid):
            raise EngineError("internal", "a broken invariant")

        d.control_table = broken
        r = c.get("/entities/engine")
        assert r.status_code == 500 and r.json()["code"] == "internal_error"
        assert "a broken invariant" not in r.text  # engine internals stay in the log
        assert srv.host.errors_5xx == 1
