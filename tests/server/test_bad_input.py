"""Bad input against a real server: every class gets a clear 4xx problem naming what and where (or
a documented acceptance), and nothing it sends changes what was there before: the source's
counters, the query results in every format, peek, and the lists of streams, views and queries."""

from __future__ import annotations

import io
import json
from dataclasses import dataclass

import pyarrow as pa
import pytest

from tests.server.conftest import ServerThread
from tests.server.formats import PARSERS

DDL = "register stream S (A integer, B float, C char(4), D varchar)"
QUERY = "select * from S [range unbounded]"
GOOD = [{"ts": 1, "A": 1, "B": 0.5, "C": "ab", "D": "x"}, {"ts": 2, "A": -2, "B": 1.5, "C": "abcd", "D": "ünï"}]
JSON, NDJSON, CSV, ARROW = "application/json", "application/x-ndjson", "text/csv", "application/vnd.apache.arrow.stream"
LIMIT = 1 << 62


@pytest.fixture(scope="module")
def srv():
    s = ServerThread().start()
    with s.client() as c:
        assert c.post("/streams", content=DDL, headers={"content-type": "text/plain"}).status_code == 201
        assert c.post("/queries", json={"cql": QUERY}).status_code == 201
        assert c.post("/streams/S/tuples", json=GOOD).json()["accepted"] == 2
    yield s
    s.stop()


@pytest.fixture
def c(srv):
    with srv.client() as client:
        yield client


def results(c, qid: int = 1) -> dict[str, list]:
    """The query's current relation read in every result format (each must parse)."""
    out = {}
    for fmt, parse in PARSERS.items():
        r = c.get(f"/queries/{qid}/results", params={"format": fmt, "snapshot": "true", "follow": "false"})
        assert r.status_code == 200, (fmt, r.text)
        out[fmt] = sorted(parse(r.text)[0], key=repr)
    return out


def state(c) -> dict:
    """What a rejected request must leave as it was."""
    src = c.get("/streams/S").json()
    queue = next(n["queue"] for n in c.get("/plan").json()["nodes"] if n["id"] == "src:S")
    peek = c.get(f"/entities/{queue}/peek")
    assert peek.status_code == 200, peek.text
    listed = {p: c.get(p) for p in ("/streams", "/views", "/queries")}
    assert all(r.status_code == 200 for r in listed.values()), {p: r.text for p, r in listed.items()}
    return {
        "accepted": src["accepted"],
        "max_ts": src["max_ts"],
        "results": results(c),
        "peek": peek.json()["tuples"],
        **{p: sorted(str(x.get("name") or x.get("id")) for x in r.json()) for p, r in listed.items()},
    }


def arrow(**cols) -> bytes:
    sink = io.BytesIO()
    t = pa.table(cols)
    with pa.ipc.new_stream(sink, t.schema) as w:
        w.write(t)
    return sink.getvalue()


def row(**over) -> dict:
    return {"ts": 5, "A": 1, "B": 1.0, "C": "a", "D": "x", **over}


@dataclass(frozen=True)
class Bad:
    """A push that must be refused: the status and code of the problem, and the row and field it names."""

    body: bytes | str
    ctype: str
    status: int
    code: str
    field: str | None = None
    row: int | None = None
    detail: str = ""  # a word the detail must hold
    params: tuple[tuple[str, int], ...] = ()  # query parameters


DEEP = "[" * 100_000 + "]" * 100_000
BAD_PUSHES = {
    "deep-json": Bad(DEEP, JSON, 422, "too_deep", detail="nested"),
    "deep-ndjson": Bad(DEEP + "\n", NDJSON, 422, "too_deep", row=0, detail="nested"),
    "deep-json-value": Bad(json.dumps([row(D="x")]).replace('"x"', "[" * 50_000 + "]" * 50_000), JSON, 422, "too_deep"),
    "utf8-json": Bad(b'[{"ts":5,"A":1,"B":1,"C":"a","D":"\xff\xfe"}]', JSON, 400, "malformed_body", detail="UTF-8"),
    "utf8-ndjson": Bad(
        b'{"ts":5,"A":1,"B":1,"C":"a","D":"ok"}\n{"ts":5,"A":1,"B":1,"C":"a","D":"\xff"}\n',
        NDJSON,
        400,
        "malformed_body",
        field="D",
        row=1,
        detail="UTF-8",
    ),
    "utf8-csv": Bad(b"ts,A,B,C,D\n5,1,1,a,ok\n5,1,1,a,\xff\xfe\n", CSV, 400, "malformed_body", row=1, detail="UTF-8"),
    "utf8-arrow": Bad(
        arrow(
            ts=[5],
            A=[1],
            B=[1.0],
            C=["a"],
            D=pa.Array.from_buffers(
                pa.string(), 1, [None, pa.py_buffer(b"\0\0\0\0\2\0\0\0"), pa.py_buffer(b"\xff\xfe")]
            ),
        ),
        ARROW,
        400,
        "malformed_body",
        "D",
        0,
        "UTF-8",
    ),
    "null-row-ndjson": Bad(b"null\n", NDJSON, 422, "invalid_input", row=0, detail="object or array"),
    "null-rows-past-a-block-ndjson": Bad(
        (json.dumps(row()) + "\n").encode() * 40_000 + b"null\n" * 3, NDJSON, 422, "invalid_input", row=40_000
    ),
    "cr-in-csv-header": Bad(b"ts,A\rB,C,D\n5,1,1,a,x\n", CSV, 400, "malformed_body", detail="header"),
    "name-not-utf8-arrow": Bad(
        arrow(ts=[5], A=[1], B=[1.0], C=["a"], Dé=["x"]).replace("Dé".encode(), b"D\xc2A"),
        ARROW,
        400,
        "malformed_body",
        detail="UTF-8",
    ),
    "1e400-json": Bad('[{"ts":5,"A":1,"B":1e400,"C":"a","D":"x"}]', JSON, 422, "invalid_input", "B", 0, "finite"),
    "1e400-ndjson": Bad('{"ts":5,"A":1,"B":-1e400,"C":"a","D":"x"}\n', NDJSON, 422, "invalid_input", "B", 0, "finite"),
    "1e400-csv": Bad("ts,A,B,C,D\n5,1,1,a,x\n5,1,1e400,a,x\n", CSV, 422, "invalid_input", "B", 1, "finite"),
    "int64+1-json": Bad('[{"ts":5,"A":9223372036854775808,"B":1,"C":"a","D":"x"}]', JSON, 422, "invalid_input", "A", 0),
    "int64-1-ndjson": Bad(
        '{"ts":5,"A":-9223372036854775809,"B":1,"C":"a","D":"x"}\n', NDJSON, 422, "invalid_input", "A", 0
    ),
    "int64+1-csv": Bad("ts,A,B,C,D\n5,9223372036854775808,1,a,x\n", CSV, 422, "invalid_input", "A", 0),
    "uint64-arrow": Bad(
        arrow(ts=[5], A=pa.array([1 << 63], pa.uint64()), B=[1.0], C=["a"], D=["x"]),
        ARROW,
        422,
        "invalid_input",
        field="A",
    ),
    "nan-json": Bad('[{"ts":5,"A":1,"B":NaN,"C":"a","D":"x"}]', JSON, 422, "invalid_input", "B", 0, "NaN"),
    "inf-json": Bad('[[5,1,1.0,"a","x"],[5,1,-Infinity,"a","x"]]', JSON, 422, "invalid_input", "B", 1, "Infinity"),
    "nan-ndjson": Bad('{"ts":5,"A":1,"B":NaN,"C":"a","D":"x"}\n', NDJSON, 422, "invalid_input", "B", 0),
    "nan-csv": Bad("ts,A,B,C,D\n5,1,nan,a,x\n", CSV, 422, "invalid_input", "B", 0),
    "inf-csv": Bad("ts,A,B,C,D\n5,1,inf,a,x\n", CSV, 422, "invalid_input", "B", 0),
    "nan-arrow": Bad(
        arrow(ts=[5, 5], A=[1, 1], B=[1.0, float("nan")], C=["a", "a"], D=["x", "x"]),
        ARROW,
        422,
        "invalid_input",
        "B",
        1,
    ),
    "char4-json": Bad(json.dumps([row(C="abcd"), row(C="abcde")]), JSON, 422, "invalid_input", "C", 1, "longer"),
    "char4-csv": Bad("ts,A,B,C,D\n5,1,1,abcdef,x\n", CSV, 422, "invalid_input", "C", 0, "longer"),
    "char4-ndjson": Bad(json.dumps(row(C="ünïcø")) + "\n", NDJSON, 422, "invalid_input", "C", 0, "5 characters"),
    "char4-arrow": Bad(arrow(ts=[5], A=[1], B=[1.0], C=["abcde"], D=["x"]), ARROW, 422, "invalid_input", "C", 0),
    "nul-json": Bad(json.dumps([row(D="a\u0000b")]), JSON, 422, "invalid_input", "D", 0, "NUL"),
    "nul-ndjson": Bad(json.dumps(row(C="\u0000")) + "\n", NDJSON, 422, "invalid_input", "C", 0, "NUL"),
    "nul-csv": Bad(b"ts,A,B,C,D\n5,1,1,a,x\x00y\n", CSV, 422, "invalid_input", "D", 0, "NUL"),
    "nul-arrow": Bad(arrow(ts=[5], A=[1], B=[1.0], C=["a"], D=["\x00"]), ARROW, 422, "invalid_input", "D", 0),
    "surrogate-json": Bad(
        '[{"ts":5,"A":1,"B":1,"C":"a","D":"\\ud800"}]', JSON, 422, "invalid_input", "D", 0, "surrogate"
    ),
    "surrogate-ndjson": Bad(
        '{"ts":5,"A":1,"B":1,"C":"a","D":"ok"}\n{"ts":5,"A":1,"B":1,"C":"\\udfff","D":"x"}\n',
        NDJSON,
        422,
        "invalid_input",
        "C",
        1,
        "surrogate",
    ),
    "ts-beyond-json": Bad(json.dumps([row(ts=LIMIT + 1)]), JSON, 422, "invalid_input", "ts", 0, "2^62"),
    "ts-int64-max-csv": Bad(f"ts,A,B,C,D\n5,1,1,a,x\n{(1 << 63) - 1},1,1,a,x\n", CSV, 422, "invalid_input", "ts", 1),
    "ts-int64-min-arrow": Bad(
        arrow(ts=[-(1 << 63)], A=[1], B=[1.0], C=["a"], D=["x"]), ARROW, 422, "invalid_input", "ts", 0
    ),
    "heartbeat-param-beyond": Bad(
        json.dumps([row()]), JSON, 422, "invalid_request", "query.heartbeat", params=(("heartbeat", LIMIT + 1),)
    ),
}


@pytest.mark.parametrize("case", BAD_PUSHES.values(), ids=BAD_PUSHES.keys())
def test_a_bad_push_is_a_clear_4xx_and_changes_nothing(c, case: Bad):
    before = state(c)
    r = c.post("/streams/S/tuples", content=case.body, headers={"content-type": case.ctype}, params=dict(case.params))
    p = r.json()
    assert r.status_code == case.status and p["code"] == case.code, p
    assert r.headers["content-type"] == "application/problem+json"
    assert p.get("field") == case.field and p.get("row") == case.row, p
    assert case.detail in p["detail"], p
    assert c.get("/healthz").status_code == 200
    assert state(c) == before


def test_far_heartbeats_are_refused_and_one_at_the_bound_leaves_the_stream_usable(c):
    c.post("/streams", content="register stream H (A integer)", headers={"content-type": "text/plain"})
    for ts in (LIMIT + 1, -LIMIT - 1, (1 << 63) - 1):
        r = c.post("/streams/H/heartbeat", json={"ts": ts})
        assert r.status_code == 422 and r.json()["field"] == "body.ts", r.text
    assert c.get("/streams/H").json()["max_ts"] is None
    assert c.post("/streams/H/heartbeat", json={"ts": LIMIT}).status_code == 200
    r = c.post("/streams/H/tuples", json=[{"ts": LIMIT, "A": 1}, {"ts": LIMIT, "A": 2}])
    assert r.status_code == 200 and r.json()["accepted"] == 2, r.text
    before = c.get("/streams/S").json()["accepted"]
    assert c.post("/streams/S/tuples", json=[row(ts=3)]).status_code == 200  # other streams unaffected
    assert c.get("/healthz").status_code == 200 and c.get("/streams/S").json()["accepted"] == before + 1


@pytest.mark.parametrize("ctype", [JSON, NDJSON, CSV])
def test_a_byte_order_mark_is_accepted(c, ctype):
    """Spreadsheets write a UTF-8 byte-order mark before CSV: it is stripped (from JSON and NDJSON too)."""
    name = "Bom" + ctype.split("/")[1].replace("-", "")
    c.post("/streams", content=f"register stream {name} (A integer, D varchar)", headers={"content-type": "text/plain"})
    body = {JSON: '[{"ts":1,"A":1,"D":"x"}]', NDJSON: '{"ts":1,"A":1,"D":"x"}\n', CSV: "ts,A,D\n1,1,x\n"}[ctype]
    r = c.post(f"/streams/{name}/tuples", content=b"\xef\xbb\xbf" + body.encode(), headers={"content-type": ctype})
    assert r.status_code == 200 and r.json()["accepted"] == 1, r.text


BAD_NAMES = ["`a/b`", "`a b`", "`a\nb`", "`a\x01b`", "`a?b`", "`1a`", "`ä`"]


@pytest.mark.parametrize("name", BAD_NAMES)
def test_a_name_no_endpoint_could_use_is_refused_at_registration(c, name):
    before = state(c)
    ddls = [
        f"register stream {name} (A integer)",
        f"register stream N (A integer, {name} float)",
        f"register view {name} as select A from S",
        f"register view V ({name}) as select A from S",
    ]
    for ddl in ddls:
        path = "/views" if "view" in ddl else "/streams"
        r = c.post(path, json={"cql": ddl}) if path == "/views" else c.post(path, json={"ddl": ddl})
        assert r.status_code == 422 and r.json()["code"] == "bad_name", (ddl, r.text)
        assert repr(name.strip("`"))[1:-1] in r.json()["detail"]
    assert state(c) == before


def test_a_quoted_alias_xml_cannot_carry_is_refused(c):
    """Query aliases are not registered, but they name result columns (an XML schema attribute):
    a line break is fine there (escaped), a control character such as U+0001 cannot be written."""
    before = state(c)
    r = c.post("/queries", json={"cql": "select A as `a\x01b` from S"})
    assert r.status_code == 422 and r.json()["code"] == "bad_name" and r.json()["column"] == 13, r.text
    assert state(c) == before


def test_backticks_may_quote_a_keyword_as_a_name(c):
    assert c.post("/streams", json={"ddl": "register stream `select` (`from` integer)"}).status_code == 201
    assert c.get("/streams/select").json()["attrs"] == [{"name": "from", "type": "INTEGER"}]


def nested_subqueries(n: int) -> str:
    q = "select A from S"
    for i in range(n):
        q = f"select A from ({q}) as x{i}"
    return q


DEEP_QUERIES = {
    "subqueries-150": nested_subqueries(150),
    "subqueries-30": nested_subqueries(30),
    "parens-150-ops": "select " + "(" * 150 + "A + " * 150 + "A" + ")" * 150 + " from S",
    "nots-300": "select A from S where " + "not " * 300 + "A > 1",
    "cases-200": "select case " + "when A > 1 then case " * 200 + " when 1=1 then 1 end" + " end" * 200 + " from S",
    "unions-100": " union ".join(["select A from S [now]"] * 100),
    "calls-200": "select " + "abs(" * 200 + "A" + ")" * 200 + " from S",
    "and-chain-500": "select * from S where " + " and ".join(f"A <> {i}" for i in range(500)),
}


@pytest.mark.parametrize("cql", DEEP_QUERIES.values(), ids=DEEP_QUERIES.keys())
def test_deep_nesting_is_a_clean_422_and_registers_nothing(c, cql):
    before = state(c)
    r = c.post("/queries", json={"cql": cql})
    assert r.status_code == 422 and r.json()["code"] == "too_deep", r.text[:300]
    r = c.post("/views", json={"name": "Deep", "query": cql})
    assert r.status_code == 422 and r.json()["code"] == "too_deep", r.text[:300]
    assert state(c) == before


def test_deep_json_request_bodies_are_refused(c):
    deep = "{" + '"a":{' * 50_000 + "}" * 50_001
    for path in ("/streams", "/queries", "/views"):
        r = c.post(path, content=deep, headers={"content-type": JSON})
        assert 400 <= r.status_code < 500 and r.headers["content-type"] == "application/problem+json", (path, r.text)
    assert c.get("/healthz").status_code == 200


def test_a_registration_failing_after_the_engine_took_it_leaves_nothing(srv, c, monkeypatch):
    before = state(c)
    host = srv.host
    pubs = set(host.fanout.pubs)

    def fail(h):
        raise RecursionError("maximum recursion depth exceeded")

    monkeypatch.setattr(host, "_query_out", fail)
    r = c.post("/queries", json={"cql": "select A from S where A > 0", "name": "half"})
    assert r.status_code == 422 and r.json()["code"] == "too_deep", r.text
    monkeypatch.undo()
    assert state(c) == before and set(host.fanout.pubs) == pubs
    assert c.post("/queries", json={"cql": "select A from S where A > 0", "name": "half"}).status_code == 201


def test_a_view_registration_failing_late_leaves_nothing_and_keeps_what_was_there(srv, c, monkeypatch):
    before = state(c)

    def fail(v):
        raise RecursionError("maximum recursion depth exceeded")

    monkeypatch.setattr(srv.host, "_view_out", fail)
    r = c.post("/views", json={"name": "Half", "query": "select A from S"})
    assert r.status_code == 422 and r.json()["code"] == "too_deep", r.text
    r = c.post("/views", json={"name": "SysStream", "query": "select A from S"})  # a name taken: 409
    assert r.status_code == 409, r.text
    monkeypatch.undo()
    assert state(c) == before and c.get("/streams/SysStream").status_code == 200
    assert c.post("/views", json={"name": "Half", "query": "select A from S"}).status_code == 201


def test_accepted_counts_only_the_rows_that_entered(c):
    c.post("/streams", content="register stream L (A integer) with (slack = 2)", headers={"content-type": "text/plain"})
    c.post("/streams", content="register stream M (A integer)", headers={"content-type": "text/plain"})
    assert c.post("/streams/L/tuples", json=[{"ts": t, "A": t} for t in (10, 11)]).json()["accepted"] == 2
    r = c.post("/streams/L/tuples", json=[{"ts": t, "A": t} for t in (1, 9, 2)])  # 1 and 2 are beyond the slack
    assert r.json() == {"source": "L", "accepted": 1, "late": 2, "refused": 0, "replayed": False}
    assert c.post("/streams/M/tuples", json=[{"ts": 5, "A": 0}]).json()["accepted"] == 1
    r = c.post("/streams/M/tuples", json=[{"ts": t, "A": t} for t in (3, 5, 4, 6)], params={"late": "drop"})
    assert r.json() == {"source": "M", "accepted": 2, "late": 2, "refused": 0, "replayed": False}
    assert c.get("/streams/L").json()["accepted"] == 3 and c.get("/streams/M").json()["accepted"] == 3
    assert 'cqlstream_tuples_accepted_total{source="M"} 3' in c.get("/metrics").text


STRANGE = [
    "cr\r",
    "crlf\r\n",
    "\x01\x02\x1f",
    "\ufffe",
    "\uffff",
    "tab\tnl\n",
    "<&>\"'",
    "]]>",
    "😀",
    "\u2028\u2029\x85",
    "",
]


def test_every_string_is_carried_by_every_result_format(c):
    """XML stays well-formed for U+FFFE, U+FFFF, control characters and carriage returns, and every
    format gives back exactly the pushed strings."""
    c.post("/streams", content="register stream X (D varchar)", headers={"content-type": "text/plain"})
    qid = c.post("/queries", json={"cql": "select * from X [range unbounded]"}).json()["id"]
    r = c.post("/streams/X/tuples", json=[{"ts": 1, "D": s} for s in STRANGE])
    assert r.status_code == 200, r.text
    c.post("/streams/X/heartbeat", json={"ts": 2})
    for fmt, elems in results(c, qid).items():
        assert sorted(e[2][0] for e in elems) == sorted(STRANGE), fmt
