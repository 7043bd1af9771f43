"""Push→result latency of `cqlstream serve` over loopback, per input rate and subscriber count.

A `cqlstream serve` child on 127.0.0.1 (bench/server.py); a load generator in its own process
pushes NDJSON to stream S at a controlled rate (one push every `--period` s, rate × period rows
each); subscribers in another process stream the results of `select SEQ, SENT from S where
MARK = 1` (NDJSON or SSE) and timestamp every element on arrival. The first row of each push is
marked: its SENT column is the push's send time (µs on the machine's monotonic clock, shared by the
processes), so latency = arrival − SENT, one sample per push and subscriber.

Two ways an instant becomes final:
- `event`: application timestamps, one instant per push, `heartbeat=t+1` in the same request (the
  push itself makes its instant final: heartbeat-driven event time);
- `system`: a system-timestamped stream (`timestamp = system, unit = millisecond`): the server stamps
  arrival, and its clock tick (`--tick`) closes the instant.

Per case: p50/p99/p99.9 latency, the achieved input rate, samples and missing samples. Bounded: each
case runs `--seconds` and its subscribers wait at most a few seconds more; only 127.0.0.1.

    python -m bench.latency [--seconds 5] [--rates 1000 10000 100000] [--subscribers 1 50]
                            [--modes event system] [--format ndjson|sse] [--tick 0.001] [--quick] [--json F]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing as mp
import re
import socket
import sys
import time
from dataclasses import asdict, dataclass
from typing import Any

import httpx
import numpy as np

from bench import server

MARK = re.compile(rb'"row":\[(\d+),(\d+)\]')
TROUBLE = re.compile(rb'"event": ?"(lagged|end)"')
DDL = {
    "event": "register stream S (SEQ integer, SENT integer, MARK integer, PAD integer)",
    "system": "register stream S (SEQ integer, SENT integer, MARK integer, PAD integer) "
    "with (timestamp = system, unit = millisecond)",
}
QUERY = "select SEQ, SENT from S where MARK = 1"
WARMUP = 0.5  # s of pushes before the measured ones
NODELAY = [(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)]  # no Nagle wait between a request's head and body


@dataclass(frozen=True)
class Case:
    mode: str  # event | system
    rate: int  # tuples/s offered
    subscribers: int


def _now_us(epoch: float) -> int:
    return int((time.monotonic() - epoch) * 1e6)


def pusher(url: str, case: Case, period: float, seconds: float, epoch: float, go: Any, out: Any) -> None:
    """Push `rate × period` rows every `period` s for `seconds` after a warm-up of WARMUP s at the
    same rate (not measured: the first pushes pay one-time costs); late pushes go at once, so the
    achieved rate says whether the server kept up. The first row of each push is marked with its
    send time."""
    rows = max(round(case.rate * period), 1)
    event = case.mode == "event"
    pushes = sent_rows = errors = 0
    with httpx.Client(base_url=url, timeout=30, transport=httpx.HTTPTransport(socket_options=NODELAY)) as c:
        go.wait(60)
        t0 = time.monotonic()
        nxt = t0
        k = 0
        first = None
        t1 = t0
        # at least one measured push, however long the warm-up's took (a fresh server's first push
        # on a loaded machine took more than the whole --quick case once, leaving nothing measured)
        while time.monotonic() - t0 < seconds + WARMUP or first is None:
            k += 1
            if first is None and time.monotonic() - t0 >= WARMUP:
                first, pushes, sent_rows, errors, t1 = k, 0, 0, 0, time.monotonic()
            ts = f'"ts":{k},' if event else ""
            rest = (f'{{{ts}"SEQ":{k},"SENT":0,"MARK":0,"PAD":0}}\n' * (rows - 1)).encode()
            sent = _now_us(epoch)
            body = f'{{{ts}"SEQ":{k},"SENT":{sent},"MARK":1,"PAD":0}}\n'.encode() + rest
            params = {"heartbeat": str(k + 1)} if event else None
            try:
                r = c.post(
                    "/streams/S/tuples", content=body, params=params, headers={"content-type": "application/x-ndjson"}
                )
                if r.status_code == 200:
                    pushes += 1
                    sent_rows += rows
                else:
                    errors += 1
            except httpx.HTTPError:
                errors += 1
            nxt += period
            delay = nxt - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            elif delay < -period:
                nxt = time.monotonic()  # behind by more than a push: no burst to catch up
        elapsed = time.monotonic() - t1
    out.put({"pushes": pushes, "rows": sent_rows, "seconds": elapsed, "errors": errors, "first": first, "last": k})


class Reader(asyncio.Protocol):
    """One subscriber on a raw HTTP/1.1 connection (a light client, so the subscribers' own parsing
    adds little to what is measured): timestamps every marked element as its bytes arrive."""

    def __init__(self, request: bytes, epoch: float, state: dict[str, Any]) -> None:
        self.request = request
        self.epoch = epoch
        self.state = state
        self.transport: asyncio.Transport | None = None
        self.head = b""  # the response head, until complete
        self.body = False
        self.tail = b""  # bytes after the last complete line
        self.seq: list[int] = []
        self.latency: list[int] = []
        self.top = 0
        self.closed = asyncio.get_running_loop().create_future()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        transport.write(self.request)

    def data_received(self, data: bytes) -> None:
        now = _now_us(self.epoch)
        if not self.body:
            self.head += data
            end = self.head.find(b"\r\n\r\n")
            if end < 0:
                return
            if not self.head.startswith(b"HTTP/1.1 200"):
                self.state["errors"].append(self.head[:200].decode(errors="replace"))
            data, self.body = self.head[end + 4 :], True
            self.state["connected"] += 1
            if self.state["connected"] == self.state["want"]:
                self.state["ready"].set()
        data = self.tail + data
        cut = data.rfind(b"\n") + 1
        data, self.tail = data[:cut], data[cut:]
        if TROUBLE.search(data):
            self.state["errors"].append(data[-200:].decode(errors="replace"))
        for m in MARK.finditer(data):
            k = int(m.group(1))
            self.seq.append(k)
            self.latency.append(now - int(m.group(2)))
            self.top = max(self.top, k)

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.closed.done():
            self.closed.set_result(None)


async def _subscribers(url: str, qid: int, n: int, fmt: str, epoch: float, ready: Any, stop: Any) -> dict:
    state: dict[str, Any] = {"connected": 0, "want": n, "errors": [], "ready": asyncio.Event()}
    loop = asyncio.get_running_loop()
    hostport = url.split("//", 1)[1]
    host, port = hostport.rsplit(":", 1)
    request = f"GET /queries/{qid}/results?format={fmt} HTTP/1.1\r\nHost: {hostport}\r\n\r\n".encode()
    readers: list[Reader] = []
    for _ in range(n):
        _, r = await loop.create_connection(lambda: Reader(request, epoch, state), host, int(port))
        readers.append(r)
    await asyncio.wait_for(state["ready"].wait(), 30)
    await asyncio.sleep(0.2)  # every subscriber is attached (its response head came after it was)
    ready.set()
    first, last = await loop.run_in_executor(None, stop.get)  # the measured pushes' sequence numbers
    deadline = time.monotonic() + 5.0  # results still in flight: a few seconds at most
    while time.monotonic() < deadline and any(r.top < last for r in readers):
        await asyncio.sleep(0.01)
    for r in readers:
        if r.transport is not None:
            r.transport.close()
    kept = [[x for k, x in zip(r.seq, r.latency) if k >= first] for r in readers]
    return {
        "latency_us": [x for p in kept for x in p],
        "per_subscriber": [len(p) for p in kept],
        "errors": state["errors"],
    }


def subscribers(url: str, qid: int, n: int, fmt: str, epoch: float, ready: Any, stop: Any, out: Any) -> None:
    out.put(asyncio.run(_subscribers(url, qid, n, fmt, epoch, ready, stop)))


def run_case(case: Case, args: argparse.Namespace) -> dict[str, Any]:
    extra = ["--tick", str(args.tick)] if args.tick else []
    ctx = mp.get_context("spawn")
    with server.serving(*extra) as (_proc, url):
        with httpx.Client(base_url=url, timeout=30) as c:
            c.post(
                "/streams", content=DDL[case.mode].encode(), headers={"content-type": "text/plain"}
            ).raise_for_status()
            r = c.post("/queries", json={"cql": QUERY})
            r.raise_for_status()
            qid = r.json()["id"]
        epoch = time.monotonic()
        ready, go = ctx.Event(), ctx.Event()
        stop, sub_out, push_out = ctx.Queue(), ctx.Queue(), ctx.Queue()
        subs = ctx.Process(
            target=subscribers, args=(url, qid, case.subscribers, args.format, epoch, ready, stop, sub_out)
        )
        push = ctx.Process(target=pusher, args=(url, case, args.period, args.seconds, epoch, go, push_out))
        subs.start()
        push.start()
        try:
            if not ready.wait(60):
                raise RuntimeError("the subscribers did not connect")
            go.set()
            pushed = push_out.get(timeout=args.seconds + 60)
            stop.put((pushed["first"], pushed["last"]))
            got = sub_out.get(timeout=30)
        finally:
            for p in (push, subs):
                p.join(timeout=10)
                if p.is_alive():
                    p.kill()
                    p.join()
    lat = np.asarray(got["latency_us"], dtype=np.float64) / 1000.0
    expected = pushed["pushes"] * case.subscribers

    def pct(q: float) -> float | None:
        return round(float(np.percentile(lat, q)), 2) if lat.size else None

    return {
        **asdict(case),
        "format": args.format,
        "tick": args.tick or None,
        "achieved_rate": round(pushed["rows"] / pushed["seconds"]) if pushed["seconds"] else 0,
        "pushes": pushed["pushes"],
        "push_errors": pushed["errors"],
        "samples": int(lat.size),
        "missing": int(expected - lat.size),
        "p50_ms": pct(50),
        "p99_ms": pct(99),
        "p999_ms": pct(99.9),
        "max_ms": round(float(lat.max()), 2) if lat.size else None,
        "errors": got["errors"],
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.latency", description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=5.0, help="push phase of each case (default 5)")
    ap.add_argument("--rates", type=int, nargs="+", default=[1000, 10_000, 100_000], help="tuples/s offered")
    ap.add_argument("--subscribers", type=int, nargs="+", default=[1, 50])
    ap.add_argument("--modes", nargs="+", choices=["event", "system"], default=["event", "system"])
    ap.add_argument("--format", choices=["ndjson", "sse"], default="ndjson", help="the subscribers' result format")
    ap.add_argument("--period", type=float, default=0.01, help="s between pushes (default 0.01: 100 pushes/s)")
    ap.add_argument("--tick", type=float, default=0.001, help="the server's --tick (0: the server's default)")
    ap.add_argument("--quick", action="store_true", help="smoke size: 1 s per case, 1k tuples/s, 1 and 3 subscribers")
    ap.add_argument("--json", metavar="F", help="write the report here")
    args = ap.parse_args(argv)
    if args.quick:
        args.seconds, args.rates, args.subscribers = 1.0, [1000], [1, 3]
    results = []
    print(
        "| mode | tuples/s offered | achieved | subscribers | samples | missing | p50 ms | p99 ms | p99.9 ms | max ms |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for mode in args.modes:
        for rate in args.rates:
            for n in args.subscribers:
                res = run_case(Case(mode, rate, n), args)
                results.append(res)
                print(
                    f"| {mode} | {rate:,} | {res['achieved_rate']:,} | {n} | {res['samples']:,} | {res['missing']} "
                    f"| {res['p50_ms']} | {res['p99_ms']} | {res['p999_ms']} | {res['max_ms']} |",
                    flush=True,
                )
    report = {"nproc": mp.cpu_count(), "results": results}
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)
    bad = [r for r in results if r["errors"] or r["push_errors"] or not r["samples"]]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
