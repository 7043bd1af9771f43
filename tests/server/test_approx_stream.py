"""A query's result stream says when the overload controller approximates it: an `approximation`
control message, in order with the results, when the sampling rate changes and when it is exact
again; a subscriber arriving while the query is approximated hears it before any result."""

from __future__ import annotations

import json
import threading
import time

from cqlstream.server.publication import ControlChunk, approximation_message
from tests.server.hand_overload import HandOverload


def _reader(server, qid: int, out: list[dict], stop: threading.Event) -> threading.Thread:
    """Collect the NDJSON lines of the query's live result stream until `stop`."""

    def run() -> None:
        with server.client(timeout=30.0) as c:
            with c.stream("GET", f"/queries/{qid}/results", params={"format": "ndjson"}) as r:
                assert r.status_code == 200
                for line in r.iter_lines():
                    if line:
                        out.append(json.loads(line))
                    if stop.is_set():
                        return

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


def _wait(cond, what: str, limit: float = 20.0) -> None:
    deadline = time.monotonic() + limit
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


def test_result_stream_tells_the_approximation(make_server):
    server = make_server(overload_control=True)
    host = server.host
    hand = HandOverload(host)
    with server.client() as http:
        assert (
            http.post(
                "/streams", content="register stream S (a int)", headers={"content-type": "text/plain"}
            ).status_code
            == 201
        )
        qid = http.post("/queries", json={"cql": "select a from S"}).json()["id"]
        first: list[dict] = []
        stop = threading.Event()
        _reader(server, qid, first, stop)
        _wait(lambda: host.fanout.pubs[qid].live() == 1, "the first subscriber")

        def push(t0: int) -> None:
            rows = [{"ts": t, "a": t} for t in range(t0, t0 + 20)]
            assert http.post("/streams/S/tuples", json=rows).status_code == 200

        push(1)  # exact: no control message before these rows
        _wait(lambda: len(first) >= 19, "the exact rows")
        assert all("event" not in m for m in first)

        hand.press(400, turns=2)  # four times the default queue limit
        push(100)
        _wait(lambda: any(m.get("event") == "approximation" for m in first), "the approximation message")
        msg = next(m for m in first if m.get("event") == "approximation")
        assert 0 < msg["sampling_rate"] < 1.0 and msg["since"] is not None and "queue memory" in msg["reason"]
        assert msg == {"event": "approximation", **approximation_message(host.get_query(qid)["approximation"])} or (
            msg["sampling_rate"] >= host.get_query(qid)["approximation"]["sampling_rate"]  # stepped down again since
        )

        # a subscriber arriving now hears the approximation before any result
        second: list[dict] = []
        _reader(server, qid, second, stop)
        _wait(lambda: host.fanout.pubs[qid].live() == 2, "the second subscriber")
        push(200)
        _wait(lambda: len(second) >= 1, "the second subscriber's first line")
        assert second[0]["event"] == "approximation" and second[0]["sampling_rate"] < 1.0

        # load falls: precision comes back, and the stream says it is exact again
        hand.release(qid)
        push(300)
        _wait(
            lambda: any(m.get("event") == "approximation" and m["sampling_rate"] == 1.0 for m in first),
            "the exact-again message",
        )
        last = [m for m in first if m.get("event") == "approximation"][-1]
        assert last == {"event": "approximation", "sampling_rate": 1.0, "since": None, "reason": "exact"}
        rates = [m["sampling_rate"] for m in first if m.get("event") == "approximation"]
        assert rates[-1] == 1.0 and min(rates) < 1.0
        stop.set()


def test_control_chunks_are_never_merged_away():
    """A stalled reader's buffer keeps only the latest progress-only chunk, but never drops a
    control message (it carries information, not progress)."""
    import asyncio

    from cqlstream.cql.types import INT
    from cqlstream.engine.batch import Batch
    from cqlstream.server.publication import ResultChunk, Subscriber

    loop = asyncio.new_event_loop()
    try:
        s = Subscriber(None, 1, "ndjson", loop, 100, 1.0)  # type: ignore[arg-type]
        s.offer(ResultChunk(Batch.empty([INT]), 1))
        s.offer(ControlChunk("approximation", {"sampling_rate": 0.5, "since": 1.0, "reason": "r"}, [INT]))
        s.offer(ResultChunk(Batch.empty([INT]), 2))
        s.offer(ResultChunk(Batch.empty([INT]), 3))
        kinds = [type(c).__name__ for c in s.buf]
        assert kinds == ["ResultChunk", "ControlChunk", "ResultChunk"]
        assert s.buf[-1].through == 3
        assert (
            s.buf[1].encoded("ndjson")
            == b'{"event": "approximation", "sampling_rate": 0.5, "since": 1.0, "reason": "r"}\n'
        )
        assert b"event: approximation" in s.buf[1].encoded("sse")
    finally:
        loop.close()
