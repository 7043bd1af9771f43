"""`serve --silence-timeout`: a source that stays silent is advanced to the others' time by the
server's clock, so results that wait on it become final (a real uvicorn on 127.0.0.1)."""

from __future__ import annotations

import time

from cqlstream.client import Client


def test_a_silent_stream_is_advanced_by_the_clock(make_server):
    srv = make_server(silence_timeout=0.3, tick_interval=0.05)
    with Client(srv.url, timeout=10) as c:
        c.register_stream("register stream S (a int)")
        c.register_stream("register stream T (a int)")
        qid = c.register_query("select S.a, T.a from S [Range 100], T [Range 100] where S.a = T.a")["id"]
        c.push("T", [{"ts": 1, "a": 7}])
        c.push("S", [{"ts": 2, "a": 7}, {"ts": 9, "a": 8}])
        # T is silent at 1: without the timeout the join is final only through 0
        deadline = time.monotonic() + 10
        while c.entity("src:T")["counters"]["max_ts"] < 9:
            assert time.monotonic() < deadline, c.entity("src:T")
            time.sleep(0.05)
        got = list(c.subscribe(qid, snapshot=True, follow=False))
        assert [(e.ts, e.row) for e in got] == [(8, (7, 7))]


def test_without_the_timeout_a_silent_stream_holds_results_back(make_server):
    srv = make_server(tick_interval=0.05)
    with Client(srv.url, timeout=10) as c:
        c.register_stream("register stream S (a int)")
        c.register_stream("register stream T (a int)")
        c.register_query("select S.a, T.a from S [Range 100], T [Range 100] where S.a = T.a")
        c.push("T", [{"ts": 1, "a": 7}])
        c.push("S", [{"ts": 2, "a": 7}, {"ts": 9, "a": 8}])
        time.sleep(0.6)
        assert c.entity("src:T")["counters"]["max_ts"] == 1
