"""A slow subscriber never blocks ingestion or other subscribers: its bounded buffer overflows, it
gets a final `lagged` message and is disconnected (if it does not even read that within the grace
period, its connection is cut off), and both are counted in /metrics."""

from __future__ import annotations

import json
import socket
import threading
import time

import pytest

from cqlstream.client import Client, Lagged
from tests.server.formats import ndjson

ROWS_PER_PUSH = 5000
PUSHES = 60
PAD = "x" * 60


def _setup(make_server, **settings):
    srv = make_server(subscriber_buffer=500, **settings)
    c = srv.client()
    c.post("/streams", content="register stream S (A integer, B varchar)", headers={"content-type": "text/plain"})
    qid = c.post("/queries", json={"cql": "select * from S"}).json()["id"]
    return srv, c, qid


def _wait_subscribers(c, n):
    deadline = time.monotonic() + 10
    while c.get("/healthz").json()["subscribers"] < n:
        assert time.monotonic() < deadline, "subscribers did not connect"
        time.sleep(0.01)


def _ingest(c) -> float:
    """Push PUSHES × ROWS_PER_PUSH rows (about 25 MB of results per subscriber); seconds taken."""
    t0 = time.monotonic()
    for p in range(PUSHES):
        rows = "".join(
            json.dumps({"ts": p * 10 + 1, "A": p * ROWS_PER_PUSH + i, "B": PAD}) + "\n" for i in range(ROWS_PER_PUSH)
        )
        r = c.post("/streams/S/tuples", content=rows.encode(), headers={"content-type": "application/x-ndjson"})
        assert r.status_code == 200 and r.json()["accepted"] == ROWS_PER_PUSH
    c.post("/streams/S/heartbeat", json={"ts": PUSHES * 10 + 1})
    return time.monotonic() - t0


@pytest.mark.time_limit(60)
def test_slow_subscriber_is_told_it_lagged_and_the_fast_one_gets_everything(make_server):
    srv, c, qid = _setup(make_server, lag_grace_seconds=20)
    fast = {}

    def read_fast():
        import httpx

        with httpx.Client(base_url=srv.url, timeout=httpx.Timeout(5, read=40)) as h:
            with h.stream("GET", f"/queries/{qid}/results", params={"until": PUSHES * 10, "buffer": 10**8}) as r:
                fast["text"] = r.read().decode()

    th = threading.Thread(target=read_fast, daemon=True)
    th.start()
    slow_client = Client(srv.url)
    slow = slow_client.subscribe(qid)  # opened on the first next(); then it stops reading
    first = {}
    th2 = threading.Thread(target=lambda: first.setdefault("elem", next(slow)), daemon=True)
    th2.start()
    _wait_subscribers(c, 2)

    assert _ingest(c) < 30, "ingestion was held back"
    th.join(30)
    got, events = ndjson(fast["text"])
    assert [e[2][0] for e in got] == list(range(PUSHES * ROWS_PER_PUSH)), "the fast subscriber lost nothing"
    assert events == []

    th2.join(10)
    assert first["elem"].row == (0, PAD)
    n = 1
    with pytest.raises(Lagged):
        for _ in slow:  # what the socket buffers held, then the lagged message
            n += 1
    assert n < PUSHES * ROWS_PER_PUSH
    slow_client.close()
    m = c.get("/metrics").text
    assert "cqlstream_subscriber_lag_disconnects_total 1" in m
    assert "cqlstream_subscriber_cutoffs_total 0" in m
    assert c.get("/healthz").json()["subscribers"] == 0
    c.close()


@pytest.mark.time_limit(60)
def test_a_subscriber_that_stops_reading_is_let_go(make_server):
    srv, c, qid = _setup(make_server, lag_grace_seconds=0.3)
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    s.connect(("127.0.0.1", srv.port))
    s.sendall(f"GET /queries/{qid}/results HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode())
    s.settimeout(10)
    head = b""
    while b"\r\n\r\n" not in head:
        head += s.recv(1)
    assert head.startswith(b"HTTP/1.1 200")
    _wait_subscribers(c, 1)

    assert _ingest(c) < 30, "ingestion was held back"
    # it lags, and the server lets go of it: cut off when even the `lagged` message cannot be
    # sent within the grace period (its socket is full), or ended right after that message when
    # the socket still had room at that moment (which happens when the machine is busy)
    deadline = time.monotonic() + 10
    while c.get("/healthz").json()["subscribers"] != 0:
        assert time.monotonic() < deadline, "the stalled subscriber was not let go"
        time.sleep(0.05)
    m = c.get("/metrics").text
    assert "cqlstream_subscriber_lag_disconnects_total 1" in m
    assert "cqlstream_subscriber_cutoffs_total 1" in m or "cqlstream_subscriber_cutoffs_total 0" in m
    data = b""
    while True:  # what was already in flight, then EOF
        chunk = s.recv(1 << 20)
        if not chunk:
            break
        data += chunk
    s.close()
    assert len(data) < PUSHES * ROWS_PER_PUSH * 40
    c.close()
