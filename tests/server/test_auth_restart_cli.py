"""API-key authentication; restart recovery of a `cqlstream serve --data-dir` process; the Python
client and the `cqlstream query` command against a real server."""

from __future__ import annotations

import subprocess
import sys
import threading
import time

import pytest

from cqlstream.client import Client, Conflict, InvalidInput, NotFound, QueryInactive, SnapshotUnavailable, Unauthorized
from tests.server.conftest import ROOT


def test_api_key_guards_every_mutating_endpoint(make_server):
    srv = make_server(api_key="s3cret")
    with srv.client() as c:
        ddl = {"content": "register stream S (A integer)", "headers": {"content-type": "text/plain"}}
        for headers in ({}, {"X-API-Key": "wrong"}):
            r = c.post("/streams", content=ddl["content"], headers={**ddl["headers"], **headers})
            assert r.status_code == 401 and r.json()["code"] == "unauthorized"
            assert r.headers["content-type"].startswith("application/problem+json")
            assert "www-authenticate" in r.headers
        key = {"X-API-Key": "s3cret"}
        assert c.post("/streams", content=ddl["content"], headers={**ddl["headers"], **key}).status_code == 201
        # reads stay open
        assert c.get("/streams").status_code == 200 and c.get("/queries").status_code == 200
        assert c.get("/metrics").status_code == 200 and c.get("/healthz").status_code == 200
        assert c.get("/openapi.json").status_code == 200
        mutations = [
            ("POST", "/queries", {"json": {"cql": "select * from S"}}),
            ("POST", "/streams/S/tuples", {"json": [{"ts": 1, "A": 1}]}),
            ("POST", "/streams/S/heartbeat", {"json": {"ts": 2}}),
            ("POST", "/views", {"json": {"name": "V", "query": "select * from S"}}),
            ("PATCH", "/queries/1", {"json": {"weight": 2}}),
            ("PATCH", "/entities/query:1", {"json": {"knobs": {"weight": 3}}}),
            ("DELETE", "/queries/1", {}),
            ("DELETE", "/views/V", {}),
            ("DELETE", "/streams/S", {}),
        ]
        for method, path, kw in mutations:
            r = c.request(method, path, **kw)
            assert r.status_code == 401, (method, path)
            r = c.request(method, path, headers=key, **kw)
            assert r.status_code < 300, (method, path, r.text)
        assert c.get("/streams").json() == [s for s in c.get("/streams").json() if s["name"] == "SysStream"]
    with Client(srv.url) as cl, pytest.raises(Unauthorized):
        cl.register_stream("register stream T (A integer)")
    with Client(srv.url, api_key="s3cret") as cl:
        assert cl.register_stream("register stream T (A integer)")["name"] == "T"


@pytest.mark.time_limit(90)
def test_restart_restores_streams_views_and_queries_with_their_ids(spawn_server, tmp_path):
    data = tmp_path / "data"
    srv = spawn_server("--data-dir", str(data))
    with Client(srv.url) as c:
        c.register_stream("register stream S (A integer, B varchar) with (slack = 2)")
        c.register_stream({"name": "R", "kind": "relation", "attrs": [{"name": "A", "type": "integer"}]})
        c.register_view("register view V as select A from S [Range 5]")
        q1 = c.register_query("select * from S where A > 1", name="big")
        q2 = c.register_query("select count(*) from V")
        q3 = c.register_query("select S.A from S [Now], R where S.A = R.A")
        c.deregister(q1["id"])
        q4 = c.register_query("select B from S")
        c.push("S", [{"ts": 1, "A": 5, "B": "x"}])
        before = {"streams": c.streams(), "views": c.views(), "queries": c.queries()}
    assert srv.stop() in (0, -15), "SIGTERM stops the server (uvicorn re-raises the signal after a clean shutdown)"
    log = srv.proc.stdout.read().decode(errors="replace")
    assert "Traceback" not in log, log

    srv2 = spawn_server("--data-dir", str(data))
    with Client(srv2.url) as c:
        assert c.health()["persistence"] is True
        after_q = {q["id"]: q for q in c.queries()}
        assert sorted(after_q) == [q2["id"], q3["id"], q4["id"]]
        for q in (q2, q3, q4):
            assert after_q[q["id"]]["cql"] == q["cql"] and after_q[q["id"]]["kind"] == q["kind"]
            assert after_q[q["id"]]["schema"] == q["schema"]
        assert [v["name"] for v in c.views()] == [v["name"] for v in before["views"]]
        streams = {s["name"]: s for s in c.streams()}
        assert streams["S"]["slack"] == 2 and streams["R"]["kind"] == "relation"
        assert {s["name"] for s in before["streams"]} == set(streams)
        # the restored query runs: results flow for new input
        c.push("S", [{"ts": 10, "A": 7, "B": "after"}])
        c.heartbeat("S", 12)
        got = list(c.subscribe(q2["id"], snapshot=True, follow=False))
        assert [(e.ts, e.row) for e in got] == [(11, (1,))], "count(*) over V = S [Range 5] at instant 11"
        new = c.register_query("select A from S")
        assert new["id"] == q4["id"] + 1, "ids keep counting from where they were"


def test_client_round_trip_and_errors(server):
    with Client(server.url) as c:
        c.register_stream("register stream S (A integer, B float)")
        q = c.register_query("select A, sum(B) from S [Range 10] group by A")
        assert q["kind"] == "relation" and [a["name"] for a in q["schema"]] == ["A", "sum_B"]
        assert c.push("S", [{"ts": 1, "A": 1, "B": 0.5}, {"ts": 2, "A": 1, "B": 1.5}]) == 2
        assert c.push("S", [[3, 2, 2.0]], format="json") == 1
        assert c.push("S", [{"ts": 4, "A": 2, "B": 1.0}], format="csv") == 1
        import pyarrow as pa

        assert c.push("S", pa.table({"ts": [5, 6], "A": [3, 3], "B": [1.0, 2.0]})) == 2
        c.heartbeat("S", 7)
        state = {e.row for e in c.subscribe(q["id"], snapshot=True, follow=False)}
        assert state == {(1, 2.0), (2, 3.0), (3, 3.0)}
        with pytest.raises(InvalidInput) as e:
            c.push("S", [{"ts": 8, "A": 1, "B": 1.0}, {"ts": 9, "A": "x", "B": 1.0}])
        assert (e.value.row, e.value.field, e.value.status) == (1, "A", 422)
        with pytest.raises(InvalidInput) as e:
            c.register_query("select nope from S")
        assert e.value.line == 1 and e.value.column == 8 and "^" in e.value.excerpt
        with pytest.raises(NotFound):
            c.push("Nope", [])
        with pytest.raises(Conflict):
            c.register_stream("register stream S (A integer)")
        with pytest.raises(Conflict):
            c.drop_stream("S")
        assert c.set_weight(q["id"], 2.5)["weight"] == 2.5
        assert c.set_active(q["id"], False)["active"] is False
        with pytest.raises(QueryInactive) as e:
            next(c.subscribe(q["id"]))
        assert e.value.status == 409 and isinstance(e.value, Conflict)
        assert c.set_active(q["id"], True)["active"] is True
        g = c.plan()
        assert any(n["id"] == f"query:{q['id']}" for n in g["nodes"]) and g["edges"]
        assert c.plan("text").startswith("Global plan: 1 queries")
        assert c.peek("src:S", 2)["tuples"][-1]["row"] == [3, 2.0]
        with pytest.raises(NotFound):
            c.peek("op:424242")
        ents = c.entities()
        assert any(e["id"] == f"query:{q['id']}" for e in ents)
        assert c.set_knobs(f"query:{q['id']}", weight=4)["knobs"]["weight"] == 4
        c.deregister(q["id"])
        with pytest.raises(NotFound):
            c.query(q["id"])


@pytest.mark.time_limit(60)
def test_cqlstream_query_command(server):
    with Client(server.url) as c:
        c.register_stream("register stream S (A integer, B varchar)")
    cmd = [
        sys.executable,
        "-m",
        "cqlstream",
        "query",
        "select A, count(*) from S [Range 100] group by A",
        "--url",
        server.url,
    ]
    # without --follow: register, print the current results, exit
    out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    assert "query 1: relation (A INTEGER, count INTEGER)" in out.stderr
    # --follow: new results as they become final, in STREAM's text form
    p = subprocess.Popen(
        [*cmd[:4], "--id", "1", "--follow", "--url", server.url],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 15
        while server.host.health()["subscribers"] < 1:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        with Client(server.url) as c:
            c.push("S", [{"ts": 1, "A": 1, "B": "a"}, {"ts": 2, "A": 1, "B": "b"}, {"ts": 3, "A": 2, "B": "c"}])
            c.heartbeat("S", 5)
        lines = []
        reader = threading.Thread(target=lambda: lines.extend(iter(p.stdout.readline, "")), daemon=True)
        reader.start()
        deadline = time.monotonic() + 15
        while "[3]:+:2, 1\n" not in lines:
            assert time.monotonic() < deadline and p.poll() is None, (lines, p.stderr.read() if p.poll() else "")
            time.sleep(0.05)
        assert lines == ["[1]:+:1, 1\n", "[2]:-:1, 1\n", "[2]:+:1, 2\n", "[3]:+:2, 1\n"], lines
    finally:
        p.terminate()
        p.wait(10)
    bad = subprocess.run(
        [*cmd[:4], "select nope from S", "--url", server.url], cwd=ROOT, capture_output=True, text=True, timeout=30
    )
    assert bad.returncode == 1 and "unknown column" in bad.stderr and "^" in bad.stderr
    down = subprocess.run(
        [*cmd[:4], "select A from S", "--url", "http://127.0.0.1:9"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert down.returncode == 2 and "cannot reach" in down.stderr


def test_client_maps_problem_codes_to_exceptions():
    import httpx

    from cqlstream.client import _raise_for

    r = httpx.Response(409, json={"code": "snapshot_unavailable", "detail": "no snapshot"})
    with pytest.raises(SnapshotUnavailable) as e:
        _raise_for(r)
    assert isinstance(e.value, Conflict) and e.value.detail == "no snapshot"
    with pytest.raises(Conflict) as e:
        _raise_for(httpx.Response(409, json={"code": "in_use", "detail": "used"}))
    assert type(e.value) is Conflict
