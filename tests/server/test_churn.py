"""Queries come and go over HTTP while data is pushed and results are streamed: no 5xx, every
subscriber's stream ends cleanly, and once they are all gone the plan holds no operator."""

from __future__ import annotations

import random
import threading

import httpx

TEMPLATES = [
    "select * from S [Range {k}] where A = {c}",
    "select A, count(*) from S [Range {k}] group by A",
    "Istream(select S.A, S.B from S [Rows {k}] where B > {c})",
    "select distinct A from S [Range {k}]",
    "select * from S where A = {c}",
]


def _subscribe(url: str, qid: int, out: list) -> threading.Thread:
    """Open the result stream now (headers received), read it to its end in a thread."""
    c = httpx.Client(base_url=url, timeout=20)
    cm = c.stream("GET", f"/queries/{qid}/results", params={"format": "ndjson"})
    r = cm.__enter__()
    out.append(r.status_code)

    def drain():
        try:
            for _ in r.iter_lines():
                pass
        finally:
            cm.__exit__(None, None, None)
            c.close()

    th = threading.Thread(target=drain, daemon=True)
    th.start()
    return th


def test_register_push_subscribe_deregister_churn(server, http):
    rng = random.Random(3)
    assert (
        http.post(
            "/streams", content="register stream S (A integer, B integer)", headers={"content-type": "text/plain"}
        ).status_code
        == 201
    )
    live, readers, statuses = [], [], []
    for t in range(1, 121):
        if live and rng.random() < 0.4:
            qid = live.pop(rng.randrange(len(live)))
            assert http.delete(f"/queries/{qid}").status_code == 204
        else:
            cql = rng.choice(TEMPLATES).format(k=rng.randint(1, 5), c=rng.randint(0, 3))
            r = http.post("/queries", json={"cql": cql})
            assert r.status_code == 201, r.text
            live.append(r.json()["id"])
            if rng.random() < 0.3:
                readers.append(_subscribe(server.url, r.json()["id"], statuses))
        rows = [{"ts": t, "A": rng.randrange(4), "B": rng.randrange(4)} for _ in range(20)]
        assert http.post("/streams/S/tuples", json=rows).status_code == 200
    for qid in live:
        assert http.delete(f"/queries/{qid}").status_code == 204
    for th in readers:
        th.join(timeout=20)
        assert not th.is_alive(), "a result stream did not end when its query was deregistered"
    assert statuses and set(statuses) == {200}
    engine = http.get("/entities/engine").json()["counters"]
    assert engine["operators"] == 0 and engine["queries"] == 0 and engine["stores"] == 0
    assert http.get("/healthz").json()["status"] == "ok"
