"""Limits over a real uvicorn server on 127.0.0.1: a runaway cross product is suspended (state,
reason, end message) while another query's results stay exact and /healthz keeps answering;
readiness and backpressure (429 + Retry-After); keys checked before a body is read; read key;
CORS preflight; idle, slow-header and slow-body connections closed after their timeouts."""

from __future__ import annotations

import socket
import statistics
import threading
import time

import httpx
import numpy as np
import pytest

from cqlstream.engine.dsms import Dsms
from cqlstream.engine.scheduler import RoundRobin
from cqlstream.server import runner
from cqlstream.server.app import create_app
from cqlstream.server.settings import Settings
from tests.server.conftest import free_socket
from tests.server.formats import PARSERS

DDL = ["register stream S (A integer, B integer)", "register stream T (C integer, D integer)"]
CROSS = "select * from S [Range Unbounded], T [Range Unbounded]"
OTHER = "select A, count(*), sum(B) from S [Range 5] group by A"


class LimitServer:
    """uvicorn serving create_app(settings) with the runner's configuration (connection limits)."""

    def __init__(self, settings: Settings) -> None:
        self.sock = free_socket()
        self.port = self.sock.getsockname()[1]
        self.app = create_app(settings)
        self.host = self.app.state.host
        self.url = f"http://127.0.0.1:{self.port}"
        cfg = runner.config(self.app, settings, log_level="warning", lifespan="on", timeout_graceful_shutdown=2)
        self.server = runner.Server(cfg, self.host)
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.sock]}, daemon=True)
        self.thread.start()
        deadline = time.monotonic() + 15
        while not self.server.started:
            assert self.thread.is_alive() and time.monotonic() < deadline, "uvicorn did not start"
            time.sleep(0.01)

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)
        self.sock.close()

    def client(self, **kw) -> httpx.Client:
        return httpx.Client(base_url=self.url, timeout=kw.pop("timeout", 20.0), **kw)

    def raw(self) -> socket.socket:
        s = socket.create_connection(("127.0.0.1", self.port), timeout=10)
        return s


@pytest.fixture
def limit_server():
    started: list[LimitServer] = []

    def make(**kw) -> LimitServer:
        s = LimitServer(Settings(**kw))
        started.append(s)
        return s

    yield make
    for s in started:
        s.stop()


def _reply(sock: socket.socket, wait: float = 5.0) -> bytes:
    """Everything the server sends until it closes or `wait` passes without data."""
    sock.settimeout(wait)
    out = b""
    try:
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                break
            out += chunk
            if b"\r\n\r\n" in out and out.split(b"\r\n\r\n", 1)[1].rstrip().endswith(b"}"):
                break
    except TimeoutError:
        pass
    return out


class _Reader(threading.Thread):
    """One NDJSON result stream read to its end."""

    def __init__(self, url: str, qid: int) -> None:
        super().__init__(daemon=True)
        self.url, self.qid = url, qid
        self.ready = threading.Event()
        self.text = ""

    def run(self) -> None:
        with httpx.Client(base_url=self.url, timeout=httpx.Timeout(5, read=40)) as c:
            with c.stream("GET", f"/queries/{self.qid}/results", params={"format": "ndjson"}) as r:
                self.ready.set()
                for chunk in r.iter_text():
                    self.text += chunk


class _Prober(threading.Thread):
    """/healthz latencies (seconds) until stopped."""

    def __init__(self, url: str) -> None:
        super().__init__(daemon=True)
        self.url = url
        self.stop = threading.Event()
        self.lat: list[float] = []
        self.codes: set[int] = set()

    def run(self) -> None:
        with httpx.Client(base_url=self.url, timeout=10) as c:
            while not self.stop.is_set():
                t = time.perf_counter()
                self.codes.add(c.get("/healthz").status_code)
                self.lat.append(time.perf_counter() - t)
                time.sleep(0.02)


def _rows(k: int, n: int) -> list[dict]:
    rng = np.random.default_rng(k)
    return [{"ts": k, "A": int(a), "B": int(b)} for a, b in zip(rng.integers(0, 5, n), rng.integers(0, 100, n))]


@pytest.mark.time_limit(120)
@pytest.mark.parametrize("engine_threads", [1, 2])
def test_cross_product_is_suspended_and_the_rest_stays_exact(limit_server, engine_threads):
    """At 2 engine threads the checks run between the levels of the parallel pass."""
    srv = limit_server(
        query_memory_limit=24 << 20, query_cpu_limit=None, work_budget=2000, engine_threads=engine_threads
    )
    assert srv.host.d.scheduler.name == ("parallel" if engine_threads == 2 else "round-robin")
    with srv.client() as c:
        for ddl in DDL:
            assert c.post("/streams", content=ddl, headers={"content-type": "text/plain"}).status_code == 201
        cross = c.post("/queries", json={"cql": CROSS}).json()
        other = c.post("/queries", json={"cql": OTHER}).json()
        assert cross["state"] == "active" and cross["memory_limit"] == 24 << 20
        readers = {q["id"]: _Reader(srv.url, q["id"]) for q in (cross, other)}
        for r in readers.values():
            r.start()
            assert r.ready.wait(10)
        ref = Dsms()
        for ddl in DDL:
            ref.execute(ddl)
        ref_q = ref.register_query(OTHER)
        ref_sub = ref.subscribe(ref_q.id)
        prober = _Prober(srv.url)
        prober.start()
        pushes, suspended_at = 40, None
        for k in range(1, pushes + 1):
            s_rows, t_rows = _rows(k, 400), [{"ts": k, "C": i, "D": -i} for i in range(400)]
            for name, rows in (("S", s_rows), ("T", t_rows)):
                r = c.post(f"/streams/{name}/tuples", json=rows)
                assert r.status_code == 200, r.text
            ref.push("S", [(x["A"], x["B"]) for x in s_rows], [k] * len(s_rows))
            if suspended_at is None and c.get(f"/queries/{cross['id']}").json()["state"] == "suspended":
                suspended_at = k
        for name in ("S", "T"):
            assert c.post(f"/streams/{name}/heartbeat", json={"ts": pushes + 10}).status_code == 200
        ref.heartbeat("S", pushes + 10)
        ref.run()
        prober.stop.set()
        prober.join(10)

        # the runaway query is suspended, with its reason everywhere, and its stream ended with it
        assert suspended_at is not None and suspended_at < pushes
        q = c.get(f"/queries/{cross['id']}").json()
        assert q["state"] == "suspended" and not q["active"]
        assert q["suspended"].startswith("memory: ") and "over its memory_limit of 24.0 MiB" in q["suspended"]
        table = c.get(f"/entities/query:{cross['id']}").json()
        assert table["counters"]["state"] == "suspended" and table["counters"]["suspended"] == q["suspended"]
        readers[cross["id"]].join(15)
        _, events = PARSERS["ndjson"](readers[cross["id"]].text)
        assert events[-1]["event"] == "end" and events[-1]["detail"] == "suspended: " + q["suspended"]
        assert c.get("/readyz").json()["suspended_queries"] == 1
        # the engine released its state: what is left is far below the limit
        attributed = c.get(f"/entities/query:{other['id']}").json()["counters"]["memory_bytes"]
        assert attributed < 1 << 20

        # the other query's results equal an engine run of it alone
        assert c.delete(f"/queries/{other['id']}").status_code == 204
        readers[other["id"]].join(15)
        got, _ = PARSERS["ndjson"](readers[other["id"]].text)
        want = ref_sub.poll().elements()
        assert sorted(got) == sorted((t, s, tuple(r)) for t, s, r in want) and len(want) > 0

        # /healthz kept answering while the cross product grew
        assert prober.codes == {200} and len(prober.lat) > 5
        assert max(prober.lat) < 2.0, sorted(prober.lat)[-5:]
        print(
            f"healthz during load: p50 {statistics.median(prober.lat) * 1e3:.1f} ms max {max(prober.lat) * 1e3:.1f} ms"
        )

        # activated again with a larger limit: active (from now on), and suspended again if it grows again
        r = c.patch(f"/queries/{cross['id']}", json={"memory_limit": 1 << 32, "active": True})
        assert r.status_code == 200 and r.json()["state"] == "active" and r.json()["suspended"] is None
        assert r.json()["memory_limit"] == 1 << 32


def test_engine_suspends_within_one_run():
    """Engine level: the check runs after each operator call (each bounded by the work budget), so
    one run with many pushes queued stops the cross product before it finishes; the other query's
    results are those of a run without it."""
    d = Dsms(query_memory_limit=8 << 20, scheduler=RoundRobin(600))
    solo = Dsms()
    for e in (d, solo):
        e.execute(";".join(DDL))
    cross = d.register_query(CROSS)
    other, other_solo = d.register_query(OTHER), solo.register_query(OTHER)
    subs = [d.subscribe(cross.id), d.subscribe(other.id), solo.subscribe(other_solo.id)]
    for k in range(1, 30):
        for e in (d, solo):
            e.push("S", [(k % 5, i) for i in range(300)], [k] * 300)
            e.push("T", [(i, k) for i in range(300)], [k] * 300)
    d.run()
    solo.run()
    assert cross.state == "suspended" and subs[0].closed and subs[0].reason.startswith("suspended: memory: ")
    assert d.suspensions == 1 and d.notices[-1].startswith(f"query {cross.id} suspended: memory")
    assert d.guard.held(cross.id) == 0
    got, want = subs[1].poll().elements(), subs[2].poll().elements()
    assert sorted(got) == sorted(want) and len(want) > 0
    # a query's own knob overrides the engine's default; null goes back to it
    d.set_knob(f"query:{other.id}", "memory_limit", 10)
    d.push("S", [(1, 1)], [40])
    d.heartbeat("S", 41)
    d.run()
    assert other.state == "suspended"
    d.set_knob(f"query:{other.id}", "memory_limit", None)
    d.set_active(other.id, True)
    assert other.state == "active" and other.suspended is None and d.guard.limit_of(other) == 8 << 20


def test_engine_suspends_a_query_over_its_cpu_limit():
    """The cross product's engine time in one run passes its cpu_limit: suspended with a `cpu:`
    reason; the other query (its own, generous cpu_limit) runs on with exact results."""
    d = Dsms(query_cpu_limit=0.05, scheduler=RoundRobin(300))
    solo = Dsms()
    for e in (d, solo):
        e.execute(";".join(DDL))
    cross = d.register_query(CROSS)
    other, other_solo = d.register_query(OTHER), solo.register_query(OTHER)
    d.set_knob(f"query:{other.id}", "cpu_limit", 60)
    subs = [d.subscribe(other.id), solo.subscribe(other_solo.id)]
    for k in range(1, 40):
        for e in (d, solo):
            e.push("S", [(k % 5, i) for i in range(300)], [k] * 300)
            e.push("T", [(i, k) for i in range(300)], [k] * 300)
    d.run()
    solo.run()
    assert cross.state == "suspended" and cross.suspended.startswith(f"cpu: query {cross.id} took ")
    assert "over its cpu_limit of 0.05 s" in cross.suspended
    assert other.state == "active" and d.control_table(f"query:{other.id}")["counters"]["cpu_limit"] == 60
    got, want = subs[0].poll().elements(), subs[1].poll().elements()
    assert sorted(got) == sorted(want) and len(want) > 0
    with pytest.raises(Exception, match="cpu_limit must be a positive number"):
        d.set_knob(f"query:{other.id}", "cpu_limit", 0)


def test_no_limit_no_check():
    d = Dsms()
    d.execute(";".join(DDL))
    d.register_query(CROSS)
    d.push("S", [(1, 1)], [1])
    d.run()
    assert not d.guard.armed() and d.guard.checks == 0


def test_liveness_readiness_and_backpressure(limit_server):
    srv = limit_server(max_engine_lag=0.2, max_pending_pushes=2, retry_after=3)
    host = srv.host
    with srv.client() as c:
        c.post("/streams", content=DDL[0], headers={"content-type": "text/plain"})
        assert c.get("/readyz").status_code == 200 and c.get("/readyz").json()["ready"] is True
        with host.lock:  # the engine busy on one long call
            time.sleep(0.3)
            t = time.perf_counter()
            h = c.get("/healthz")
            took = time.perf_counter() - t
            assert h.status_code == 200 and took < 1.0
            r = c.get("/readyz")
            assert r.status_code == 503 and r.json()["ready"] is False and "busy on one call" in r.json()["reason"]
            p = c.post("/streams/S/tuples", json=[{"ts": 1, "A": 1, "B": 1}])
            assert p.status_code == 429 and p.headers["retry-after"] == "3"
            assert p.json()["code"] == "engine_busy" and p.headers["content-type"] == "application/problem+json"
        assert c.post("/streams/S/tuples", json=[{"ts": 1, "A": 1, "B": 1}]).status_code == 200
        assert c.get("/readyz").json()["ready"] is True
    # pushes in flight: two uploads still sending their bodies hold both places
    held = []
    for _ in range(2):
        s = srv.raw()
        s.sendall(b"POST /streams/S/tuples HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n")
        s.sendall(b"Content-Length: 1000\r\n\r\n[")
        held.append(s)
    deadline = time.monotonic() + 5
    while host.pending_pushes < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert host.pending_pushes == 2
    with srv.client() as c:
        p = c.post("/streams/S/tuples", json=[{"ts": 2, "A": 1, "B": 1}])
        assert p.status_code == 429 and p.headers["retry-after"] == "3" and "in flight" in p.json()["detail"]
        assert c.get("/readyz").status_code == 503
        for s in held:
            s.close()
        deadline = time.monotonic() + 5
        while host.pending_pushes and time.monotonic() < deadline:
            time.sleep(0.01)
        assert c.post("/streams/S/tuples", json=[{"ts": 2, "A": 1, "B": 1}]).status_code == 200
        assert host.busy_replies == 2


def test_wrong_key_is_rejected_before_the_body_is_read(limit_server):
    srv = limit_server(api_key="sesame", max_body_bytes=256 << 20)
    with srv.client() as c:
        c.post("/streams", content=DDL[0], headers={"content-type": "text/plain", "X-API-Key": "sesame"})
    for key in (b"wrong", None):
        s = srv.raw()
        head = b"POST /streams/S/tuples HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        head += b"Content-Length: 104857600\r\n"  # 100 MiB announced, none of it sent
        if key:
            head += b"X-API-Key: " + key + b"\r\n"
        t = time.perf_counter()
        s.sendall(head + b"\r\n")
        reply = _reply(s)
        took = time.perf_counter() - t
        s.close()
        assert reply.startswith(b"HTTP/1.1 401"), reply[:200]
        assert b"unauthorized" in reply and b"www-authenticate" in reply.lower() and took < 2.0
    with srv.client() as c:  # the right key still works, and nothing was pushed
        r = c.post("/streams/S/tuples", json=[{"ts": 1, "A": 1, "B": 1}], headers={"X-API-Key": "sesame"})
        assert r.status_code == 200 and r.json()["accepted"] == 1
        assert c.get("/streams/S").json()["accepted"] == 1


def test_read_key_protects_reads(limit_server):
    srv = limit_server(api_key="w", read_key="r")
    with srv.client() as c:
        assert c.post("/streams", content=DDL[0], headers={"content-type": "text/plain", "X-API-Key": "w"}).is_success
        qid = c.post("/queries", json={"cql": "select * from S"}, headers={"X-API-Key": "w"}).json()["id"]
        for path in ("/queries", f"/queries/{qid}", "/plan", "/entities", "/streams", f"/queries/{qid}/results"):
            assert c.get(path).status_code == 401, path
            assert c.get(path, headers={"X-API-Key": "nope"}).status_code == 401, path
        for path in ("/queries", f"/queries/{qid}", "/plan", "/entities", "/entities/src:S/peek"):
            assert c.get(path, headers={"X-API-Key": "r"}).status_code == 200, path
            assert c.get(path, headers={"X-API-Key": "w"}).status_code == 200, path  # write implies read
        assert c.post("/queries", json={"cql": "select * from S"}, headers={"X-API-Key": "r"}).status_code == 401
        for path in ("/healthz", "/readyz", "/metrics", "/openapi.json", "/", "/docs", "/console/console.css"):
            assert c.get(path).status_code == 200, path  # the console's and docs' files hold no data
    open_srv = limit_server(api_key="w")  # without --read-key reads stay open
    with open_srv.client() as c:
        assert c.get("/queries").status_code == 200 and c.post("/queries", json={"cql": "x"}).status_code == 401


def test_cors_preflight(limit_server):
    srv = limit_server(cors_origins=("http://ui.example",), api_key="w")
    pre = {"Access-Control-Request-Method": "POST", "Access-Control-Request-Headers": "x-api-key,content-type"}
    with srv.client() as c:
        ok = c.options("/queries", headers={"Origin": "http://ui.example", **pre})
        assert ok.status_code == 200 and ok.headers["access-control-allow-origin"] == "http://ui.example"
        assert "x-api-key" in ok.headers["access-control-allow-headers"].lower()
        bad = c.options("/queries", headers={"Origin": "http://evil.example", **pre})
        assert bad.status_code == 400 and "access-control-allow-origin" not in bad.headers
        got = c.get("/healthz", headers={"Origin": "http://ui.example"})
        assert got.headers["access-control-allow-origin"] == "http://ui.example"
    plain = limit_server()  # no --cors-origin: no CORS headers at all
    with plain.client() as c:
        r = c.options("/queries", headers={"Origin": "http://ui.example", **pre})
        assert "access-control-allow-origin" not in r.headers


def test_idle_slow_header_and_slow_body_connections_are_closed(limit_server):
    srv = limit_server(header_timeout=0.5, keep_alive_timeout=0.5, body_timeout=0.5)
    with srv.client() as c:
        c.post("/streams", content=DDL[0], headers={"content-type": "text/plain"})
    idle = srv.raw()
    t = time.perf_counter()
    assert _reply(idle, wait=5) == b"" and time.perf_counter() - t < 3  # closed without a word
    slow = srv.raw()
    slow.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")  # the head never completes
    t = time.perf_counter()
    assert _reply(slow, wait=5) == b"" and time.perf_counter() - t < 3
    body = srv.raw()
    body.sendall(b"POST /streams/S/tuples HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n")
    body.sendall(b"Content-Length: 1000\r\n\r\n[{")
    t = time.perf_counter()
    reply = _reply(body, wait=5)
    assert reply.startswith(b"HTTP/1.1 408") and b"body_timeout" in reply and time.perf_counter() - t < 3
    keep = srv.raw()  # after a complete exchange, an idle keep-alive connection is closed too
    keep.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
    assert _reply(keep, wait=5).startswith(b"HTTP/1.1 200")
    t = time.perf_counter()
    keep.settimeout(5)
    assert keep.recv(100) == b"" and time.perf_counter() - t < 3
    big = srv.raw()  # a request head still incomplete after max_header_bytes (64 KiB) is refused
    big.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Pad: " + b"a" * (80 << 10))
    assert _reply(big, wait=5).startswith(b"HTTP/1.1 400")
    for s in (idle, slow, body, keep, big):
        s.close()
    with srv.client() as c:  # a prompt client is served as before
        assert c.post("/streams/S/tuples", json=[{"ts": 1, "A": 1, "B": 1}]).status_code == 200
