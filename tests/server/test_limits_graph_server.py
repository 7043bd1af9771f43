"""Query limits on a real uvicorn server on 127.0.0.1 at 1 engine thread (round robin, a check
after each call) and at 2 (the parallel pass as a graph, checked per call on its ledger:
engine/limits_ledger.py): with an engine-wide memory limit several queries sharing windows, joins
and aggregates are suspended for the same reasons (bytes included), and
every query's results are the same."""

from __future__ import annotations

from collections import Counter

import pytest

from cqlstream.engine import parallel_pass as PP
from tests.server.formats import ndjson
from tests.server.test_engine_threads import END, STREAM_QUERIES, _events


def _run(server, chunk: int | None) -> tuple[list[Counter | int], list[tuple]]:
    with server.client() as http:
        for name in ("S", "T"):
            ddl = f"register stream {name} (a int, b int)"
            assert http.post("/streams", content=ddl, headers={"content-type": "text/plain"}).status_code < 300
        qids = [http.post("/queries", json={"cql": q}).json()["id"] for q in STREAM_QUERIES]
        for name, rows in _events(chunk):
            assert http.post(f"/streams/{name}/tuples", json=rows).status_code == 200
        for name in ("S", "T"):
            assert http.post(f"/streams/{name}/heartbeat", json={"ts": END + 1}).status_code < 300
        out, states = [], []
        for qid in qids:
            r = http.get(f"/queries/{qid}/results", params={"format": "ndjson", "from": -1, "until": END})
            out.append(Counter(ndjson(r.text)[0]) if r.status_code == 200 else r.status_code)
            q = http.get(f"/queries/{qid}").json()
            states.append((q["state"], q["suspended"]))
    return out, states


@pytest.mark.parametrize("chunk", [7, None])
def test_several_queries_over_an_engine_limit_suspended_alike_at_one_and_two_threads(make_server, monkeypatch, chunk):
    monkeypatch.setattr(PP, "MIN_ROWS", 0)
    got = {}
    for n in (1, 2):
        server = make_server(engine_threads=n, query_cpu_limit=None, query_memory_limit=3 << 10)
        got[n] = _run(server, chunk)
        server.stop()
    states = got[1][1]
    suspended = [s for s in states if s[0] == "suspended"]
    assert len(suspended) >= 2 and all(r.startswith("memory: query ") for _, r in suspended), states
    assert any(s == ("active", None) for s in states), states
    assert got[2] == got[1]
