"""`cqlstream streams`, `queries`, `push` and `drop` against a real server on 127.0.0.1."""

from __future__ import annotations

import io
from collections.abc import Iterator
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import pytest

from cqlstream.catalog_commands import query_rates, table
from cqlstream.cli import main
from tests.server.conftest import ServerThread


@pytest.fixture
def srv() -> Iterator[ServerThread]:
    s = ServerThread().start()
    try:
        yield s
    finally:
        s.stop()


def cli(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = main(list(argv))
    return code, out.getvalue(), err.getvalue()


def test_streams_push_queries_drop(srv: ServerThread, tmp_path: Path) -> None:
    with srv.client() as c:
        c.post("/streams", content="register stream S (A integer, B float)", headers={"content-type": "text/plain"})
        q = c.post("/queries", json={"cql": "select A, count(*) as n from S [range 100] group by A", "name": "counts"})
        assert q.status_code == 201
    rows = tmp_path / "rows.csv"
    rows.write_text("ts,A,B\n1,1,0.5\n2,2,1.5\n3,1,2.5\n")
    assert cli("push", "S", str(rows), "--heartbeat", "4", "--url", srv.url) == (0, "pushed 3 rows to S\n", "")

    code, out, _ = cli("streams", "--url", srv.url)
    assert code == 0
    lines = out.splitlines()
    assert lines[0].split() == ["NAME", "KIND", "SCHEMA", "ACCEPTED", "TIME", "STAMPS"]
    s_line = next(line for line in lines if line.startswith("S "))
    assert s_line.split() == ["S", "stream", "A", "integer,", "B", "float", "3", "4", "second"]  # time: the heartbeat

    code, out, _ = cli("queries", "--interval", "0", "--url", srv.url)
    assert code == 0
    header, line = out.splitlines()
    assert header.split()[:6] == ["ID", "NAME", "KIND", "STATE", "WEIGHT", "OUT/S"]
    cols = line.split()
    assert cols[:6] == ["1", "counts", "relation", "active", "1.0", "–"]  # no rate without an interval
    assert line.endswith("select A, count(*) as n from S [range 100] group by A")

    code, out, err = cli("drop", "stream", "S", "--url", srv.url)  # read by the query: refused
    assert (code, out) == (1, "") and err.startswith("cqlstream drop:"), err
    assert cli("drop", "query", "1", "--url", srv.url) == (0, "dropped query 1\n", "")
    assert cli("drop", "stream", "S", "--url", srv.url) == (0, "dropped stream S\n", "")
    with srv.client() as c:
        assert c.get("/queries").json() == [] and [s["name"] for s in c.get("/streams").json()] == ["SysStream"]


def test_queries_rate_from_two_samples() -> None:
    before = {"query:1": {"kind": "query", "counters": {"results": 10}}, "src:S": {"kind": "source", "counters": {}}}
    after = {"query:1": {"kind": "query", "counters": {"results": 40}}, "query:2": {"kind": "query", "counters": {}}}
    assert query_rates(before, after, 2.0) == {1: 15.0}


def test_table_aligns_numbers_right() -> None:
    assert table(("ID", "NAME"), [(1, "a"), (10, "bb")]) == "ID  NAME\n 1  a\n10  bb"


def test_errors_are_messages(srv: ServerThread) -> None:
    code, out, err = cli("push", "Nope", "/nonexistent/rows.csv", "--format", "csv", "--url", srv.url)
    assert (code, out) == (2, "") and "cannot read /nonexistent/rows.csv" in err
    code, out, err = cli("drop", "query", "x", "--url", srv.url)
    assert code == 2 and "by its id" in err
    code, _, err = cli("drop", "view", "V", "--url", srv.url)
    assert code == 1 and err.startswith("cqlstream drop:")
    code, _, err = cli("streams", "--url", "http://127.0.0.1:9")
    assert code == 1 and "cannot reach" in err
