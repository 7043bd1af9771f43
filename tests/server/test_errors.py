"""Bad requests get the right status and problem document, and nothing accepted earlier is lost:
after every rejected push the stream continues exactly where the accepted data left it."""

from __future__ import annotations

import io
import json

import pyarrow as pa
import pytest

from tests.server.formats import ndjson
from tests.server.test_results import _Reader

PROBLEM = "application/problem+json"


def _problem(r, status, code=None):
    assert r.status_code == status, r.text
    assert r.headers["content-type"].startswith(PROBLEM)
    p = r.json()
    assert {"type", "title", "status", "detail", "code"} <= set(p) and p["status"] == status
    if code is not None:
        assert p["code"] == code, p
    return p


def _arrow(tbl: pa.Table) -> bytes:
    sink = io.BytesIO()
    with pa.ipc.new_stream(sink, tbl.schema) as w:
        w.write_table(tbl)
    return sink.getvalue()


BAD_PUSHES = [
    # (name, body, content type, status, code, row, field)
    ("malformed JSON", b'[{"ts": 5, "A": 1, "B": "x"', "application/json", 400, "malformed_body", None, None),
    ("not an array", b'{"ts": 5}', "application/json", 400, "malformed_body", None, None),
    (
        "malformed NDJSON line",
        b'{"ts": 5, "A": 1, "B": "x"}\n{"ts": 6, "A": 1,\n',
        "application/x-ndjson",
        400,
        "malformed_body",
        1,
        None,
    ),
    (
        "wrong type",
        b'[{"ts": 5, "A": 1, "B": "x"}, {"ts": 6, "A": "seven", "B": "y"}]',
        "application/json",
        422,
        "invalid_input",
        1,
        "A",
    ),
    (
        "wrong type NDJSON",
        b'{"ts": 5, "A": 1, "B": "x"}\n{"ts": 6, "A": 1, "B": 2}\n',
        "application/x-ndjson",
        422,
        "invalid_input",
        1,
        "B",
    ),
    ("float for integer", b'[{"ts": 5, "A": 1.5, "B": "x"}]', "application/json", 422, "invalid_input", 0, "A"),
    ("wrong column count", b'[[5, 1, "x"], [6, 2]]', "application/json", 422, "invalid_input", 1, None),
    (
        "missing field",
        b'[{"ts": 5, "A": 1, "B": "x"}, {"ts": 6, "A": 2}]',
        "application/json",
        422,
        "invalid_input",
        1,
        "B",
    ),
    ("unknown field", b'[{"ts": 5, "A": 1, "B": "x", "C": 3}]', "application/json", 422, "invalid_input", 0, "C"),
    ("missing timestamp", b'[{"A": 1, "B": "x"}]', "application/json", 422, "invalid_input", 0, "ts"),
    (
        "unsorted timestamps",
        b'[{"ts": 5, "A": 1, "B": "x"}, {"ts": 7, "A": 1, "B": "x"}, {"ts": 6, "A": 1, "B": "x"}]',
        "application/json",
        422,
        "invalid_input",
        2,
        "ts",
    ),
    (
        "timestamp before accepted data",
        b'[{"ts": 1, "A": 1, "B": "x"}]',
        "application/json",
        422,
        "invalid_input",
        0,
        "ts",
    ),
    ("CSV bad value", b"ts,A,B\n5,1,x\n6,zz,y\n", "text/csv", 422, "invalid_input", 1, "A"),
    ("CSV wrong width", b"ts,A,B\n5,1,x\n6,2\n", "text/csv", 422, "invalid_input", 1, None),
    ("CSV unknown header", b"ts,A,C\n5,1,x\n", "text/csv", 422, "invalid_input", None, "C"),
    ("Arrow garbage", b"\x00\x01not arrow", "application/vnd.apache.arrow.stream", 400, "malformed_body", None, None),
    (
        "Arrow wrong type",
        _arrow(pa.table({"ts": [5], "A": ["one"], "B": ["x"]})),
        "application/vnd.apache.arrow.stream",
        422,
        "invalid_input",
        None,
        "A",
    ),
    ("unsupported media type", b"<rows/>", "application/xml", 415, "unsupported_media_type", None, None),
]


@pytest.fixture
def stream(make_server):
    srv = make_server(max_body_bytes=64 * 1024)
    c = srv.client()
    assert (
        c.post(
            "/streams", content="register stream S (A integer, B varchar)", headers={"content-type": "text/plain"}
        ).status_code
        == 201
    )
    qid = c.post("/queries", json={"cql": "select * from S"}).json()["id"]
    yield srv, c, qid
    c.close()


def test_each_bad_push_is_rejected_whole_and_nothing_is_lost(stream):
    srv, c, qid = stream
    reader = _Reader(srv.url, qid, "ndjson", {"until": 1 + len(BAD_PUSHES)})
    reader.start()
    assert reader.ready.wait(10)
    accepted = []
    t = 2
    for i, (what, body, ctype, status, code, row, field) in enumerate(BAD_PUSHES):
        good = [{"ts": t, "A": i, "B": what}]
        assert (
            c.post("/streams/S/tuples", content=json.dumps(good), headers={"content-type": "application/json"}).json()[
                "accepted"
            ]
            == 1
        )
        accepted += [(t, 1, (i, what))]
        before = c.get("/streams/S").json()["accepted"]
        p = _problem(c.post("/streams/S/tuples", content=body, headers={"content-type": ctype}), status, code)
        assert p.get("row") == row, (what, p)
        assert p.get("field") == field, (what, p)
        assert p["detail"]
        assert c.get("/streams/S").json()["accepted"] == before, f"{what}: a rejected push changes nothing"
        t += 1
    c.post("/streams/S/heartbeat", json={"ts": t})
    reader.join(10)
    assert ndjson(reader.text)[0] == accepted, "every accepted row reached the subscriber, and only those"
    assert c.get("/streams/S").json()["accepted"] == len(accepted)
    m = c.get("/metrics").text
    assert 'cqlstream_tuples_accepted_total{source="S"} ' + str(len(accepted)) in m
    assert 'cqlstream_pushes_rejected_total{code="invalid_input"}' in m


def test_rejected_pushes_do_not_disturb_a_live_subscriber(stream):
    srv, c, qid = stream
    import threading

    import httpx

    out = {}

    def read():
        with httpx.Client(base_url=srv.url, timeout=httpx.Timeout(5, read=20)) as h:
            with h.stream("GET", f"/queries/{qid}/results", params={"until": 20}) as r:
                out["ready"] = True
                out["text"] = r.read().decode()

    th = threading.Thread(target=read, daemon=True)
    th.start()
    import time

    while "ready" not in out:
        time.sleep(0.01)
    want = []
    for t in range(1, 11):
        c.post("/streams/S/tuples", json=[{"ts": t, "A": t, "B": "ok"}])
        want.append((t, 1, (t, "ok")))
        _problem(c.post("/streams/S/tuples", json=[{"ts": t + 1, "A": "bad", "B": "no"}]), 422)
        _problem(c.post("/streams/S/tuples", json=[{"ts": t - 1, "A": 0, "B": "old"}]), 422)
    c.post("/streams/S/heartbeat", json={"ts": 21})
    th.join(10)
    assert ndjson(out["text"])[0] == want


def test_unknown_names_and_ids(http):
    _problem(http.post("/streams/Nope/tuples", json=[]), 404, "unknown_source")
    _problem(http.post("/streams/Nope/heartbeat", json={"ts": 1}), 404, "unknown_source")
    _problem(http.get("/streams/Nope"), 404, "unknown_source")
    _problem(http.delete("/streams/Nope"), 404, "unknown_source")
    _problem(http.get("/queries/99"), 404, "unknown_query")
    _problem(http.get("/queries/99/results"), 404, "unknown_query")
    _problem(http.patch("/queries/99", json={"active": False}), 404, "unknown_query")
    _problem(http.delete("/queries/99"), 404, "unknown_query")
    _problem(http.get("/views/Nope"), 404, "unknown_view")
    _problem(http.get("/entities/op:999999"), 404, "unknown_entity")
    _problem(http.get("/no/such/path"), 404, "not_found")
    _problem(http.put("/streams"), 405, "method_not_allowed")


def test_oversized_bodies_get_413(stream):
    _srv, c, _qid = stream
    row = b'{"ts": 1, "A": 1, "B": "' + b"x" * 40 + b'"}'
    big = b"[" + b",".join(row for _ in range(4000)) + b"]"
    assert len(big) > 64 * 1024
    _problem(
        c.post("/streams/S/tuples", content=big, headers={"content-type": "application/json"}), 413, "body_too_large"
    )

    def chunks():  # no Content-Length: the limit applies while the body streams in
        for i in range(0, len(big), 8192):
            yield big[i : i + 8192]

    _problem(c.post("/streams/S/tuples", content=chunks(), headers={"content-type": "application/json"}), 413)
    _problem(
        c.post("/queries", content=b'{"cql": "' + b"x" * 70000 + b'"}', headers={"content-type": "application/json"}),
        413,
    )
    assert c.get("/streams/S").json()["accepted"] == 0
    assert c.post("/streams/S/tuples", json=[{"ts": 1, "A": 1, "B": "x"}]).json()["accepted"] == 1


def test_cql_errors_carry_position_and_caret(http):
    http.post("/streams", content="register stream S (A integer, B varchar)", headers={"content-type": "text/plain"})
    p = _problem(http.post("/queries", json={"cql": "select A from S\nwhere C < 10"}), 422, "unknown_column")
    assert (p["line"], p["column"]) == (2, 7)
    assert p["excerpt"].splitlines()[-1].strip() == "^"
    p = _problem(http.post("/queries", json={"cql": "select from where"}), 422)
    assert p["line"] == 1 and p["column"] >= 1
    p = _problem(
        http.post("/streams", content="register stream T (A nosuchtype)", headers={"content-type": "text/plain"}),
        422,
        "unknown_type",
    )
    assert p["excerpt"]
    _problem(
        http.post("/streams", content="register stream S (A integer)", headers={"content-type": "text/plain"}),
        409,
        "duplicate_name",
    )
    _problem(http.post("/queries", json={"cql": "register stream X (A integer)"}), 422, "not_a_query")
    _problem(http.post("/queries", json={"cql": ""}), 422, "invalid_request")
    _problem(http.post("/queries", content=b"{not json", headers={"content-type": "application/json"}), 400)
    _problem(http.post("/streams", content=b"{not json", headers={"content-type": "application/json"}), 400)
    _problem(http.post("/streams", json={"name": "bad name", "attrs": [{"name": "A", "type": "integer"}]}), 422)
    _problem(http.post("/streams", json={"name": "T", "attrs": []}), 422)
    _problem(http.patch("/queries/1", json={"weight": -1}), 422)


def test_drop_is_refused_while_in_use(http):
    http.post("/streams", content="register stream S (A integer)", headers={"content-type": "text/plain"})
    assert http.post("/views", json={"name": "V", "query": "select A from S [Range 5]"}).status_code == 201
    p = _problem(http.delete("/streams/S"), 409, "in_use")
    assert "V" in p["detail"]
    qid = http.post("/queries", json={"cql": "select * from V"}).json()["id"]
    p = _problem(http.delete("/views/V"), 409, "in_use")
    assert f"query {qid}" in p["detail"]
    assert http.delete(f"/queries/{qid}").status_code == 204
    assert http.delete("/views/V").status_code == 204
    assert http.delete("/streams/S").status_code == 204
    assert http.get("/streams/S").status_code == 404
