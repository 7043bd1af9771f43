"""A bounded soak of `cqlstream serve`: a few pushers and tens of subscribers for `--seconds`.

A server subprocess on a free 127.0.0.1 port; `--pushers` streams, each fed by one pusher (instants
1 .. seconds x rate, one push each paced at `--rate`, application timestamps, `heartbeat=t+1` in
the same request so instant t is final at once) and read by an aggregate and a filter query; `--subscribers` subscribers spread over the
queries and the four result formats (NDJSON, JSON, SSE, XML), all with `from=-1` (every result
from the start). Every `--reconnect-every` seconds the SSE subscribers drop their connection and
resume with `Last-Event-ID` (the elements after the last `id:` are discarded: an instant is only
complete at its id), so the resume path runs under load; at the end every subscriber of a query
must hold exactly the same number of elements (no duplicates, no gaps).

Reports the server's RSS (after setup, at a third, at the end, every tenth of the run; peak), push->result latency p50/p99
(a push's send time to a subscriber receiving the first element of that instant, one sample per
subscriber and instant), and errors (failed pushes, failed or ended subscriptions, count mismatches).

    python -m bench.soak [--seconds 60] [--subscribers 40] [--pushers 3] [--rate 20] [--rows 100]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import numpy as np

from bench import server

ROOT = Path(__file__).resolve().parent.parent
FORMATS = ("ndjson", "json", "sse", "xml")
# the instant of each result element, per format (the SSE `open` event names no `ts` column here)
TS = {
    "ndjson": re.compile(rb'"ts":(-?\d+)'),
    "json": re.compile(rb'"ts":(-?\d+)'),
    "sse": re.compile(rb'"ts":(-?\d+)'),
    "xml": re.compile(rb'<tuple ts="(-?\d+)"'),
}
TROUBLE = re.compile(rb'"event": ?"(lagged|end)"|<(lagged|end)\b')


@dataclass
class Sub:
    """One subscriber's tally."""

    qid: int
    fmt: str
    elements: int = 0
    seen: set[int] = field(default_factory=set)  # instants with a latency sample taken
    reconnects: int = 0
    errors: list[str] = field(default_factory=list)


class Soak:
    def __init__(self, url: str, args: argparse.Namespace) -> None:
        self.url = url
        self.args = args
        self.sent: dict[tuple[int, int], float] = {}  # (stream index, instant) -> push send time
        self.latency: list[float] = []
        self.push_errors: list[str] = []
        self.pushes = 0
        self.last = max(int(args.seconds * args.rate), 1)  # instants pushed per stream

    async def push(self, c: httpx.AsyncClient, i: int) -> None:
        """Instants 1..last, one push each, paced at `--rate` (a slow server makes the run longer)."""
        a = self.args
        rng = np.random.default_rng(i)
        period = 1.0 / a.rate
        nxt = time.monotonic()
        for t in range(1, self.last + 1):
            k, v = rng.integers(0, 50, a.rows), rng.integers(0, 1000, a.rows)
            body = "\n".join(f'{{"ts":{t},"K":{x},"V":{y}}}' for x, y in zip(k.tolist(), v.tolist())).encode()
            self.sent[(i, t)] = time.monotonic()
            try:
                r = await c.post(
                    f"/streams/S{i}/tuples",
                    content=body,
                    params={"heartbeat": str(t + 1)},
                    headers={"content-type": "application/x-ndjson"},
                )
                if r.status_code >= 300:
                    self.push_errors.append(f"S{i} t={t}: {r.status_code} {r.text[:200]}")
                else:
                    self.pushes += 1
            except httpx.HTTPError as e:
                self.push_errors.append(f"S{i} t={t}: {type(e).__name__}: {e}")
            nxt += period
            await asyncio.sleep(max(0.0, nxt - time.monotonic()))

    async def subscribe(self, c: httpx.AsyncClient, s: Sub, stream: int) -> None:
        """Read through the last instant; SSE subscribers reconnect every so often with Last-Event-ID."""
        pat = TS[s.fmt]
        sep = b"\n\n" if s.fmt == "sse" else b"\n"
        resume: str | None = None
        while True:
            params = {"format": s.fmt, "until": str(self.last)}
            headers = {}
            if resume is None:
                params["from"] = "-1"
            else:
                headers["Last-Event-ID"] = resume
            since = time.monotonic()  # latency is sampled for instants pushed while connected
            cutoff = since + self.args.reconnect_every if s.fmt == "sse" else float("inf")
            pending = 0  # SSE: elements after the last id (of an instant not complete yet)
            tail = b""
            try:
                async with c.stream("GET", f"/queries/{s.qid}/results", params=params, headers=headers) as r:
                    if r.status_code != 200:
                        s.errors.append(f"subscribe: {r.status_code} {(await r.aread())[:200]!r}")
                        return
                    async for chunk in r.aiter_bytes():
                        now = time.monotonic()
                        data = tail + chunk
                        cut = data.rfind(sep) + len(sep) if sep in data else 0
                        data, tail = data[:cut], data[cut:]
                        if TROUBLE.search(data):
                            s.errors.append(f"stream ended: {data[-300:]!r}")
                            return
                        if s.fmt == "sse":
                            for block in data.split(b"\n\n"):
                                m = pat.search(block)
                                if m is None:
                                    continue
                                self._got(s, stream, int(m.group(1)), now, since)
                                pending += 1
                                if block.startswith(b"id: ") or b"\nid: " in block:
                                    s.elements += pending
                                    pending = 0
                                    resume = m.group(1).decode()
                        else:
                            ts = [int(x) for x in pat.findall(data)]
                            s.elements += len(ts)
                            for t in set(ts):
                                self._got(s, stream, t, now, since)
                        if now > cutoff:
                            break  # drop the connection mid-stream, then resume
                    else:
                        if pending:
                            s.errors.append(f"{pending} SSE elements after the last id")
                        return  # the stream ended: results are final through the last instant
            except httpx.HTTPError as e:
                s.errors.append(f"{type(e).__name__}: {e}")
                return
            s.reconnects += 1

    def _got(self, s: Sub, stream: int, t: int, now: float, since: float) -> None:
        if t not in s.seen:
            s.seen.add(t)
            sent = self.sent.get((stream, t))
            if sent is not None and sent >= since:
                self.latency.append(now - sent)


async def _run(url: str, proc: subprocess.Popen, args: argparse.Namespace) -> dict:
    soak = Soak(url, args)
    limits = httpx.Limits(max_connections=args.subscribers + args.pushers + 8)
    timeout = httpx.Timeout(30.0, read=None)
    async with httpx.AsyncClient(base_url=url, timeout=timeout, limits=limits) as c:
        qids = []
        for i in range(args.pushers):
            ddl = f"register stream S{i} (K integer, V integer)"
            r = await c.post("/streams", content=ddl.encode(), headers={"content-type": "text/plain"})
            r.raise_for_status()
            for cql in (
                f"select K, count(*), sum(V) from S{i} [Range 10] group by K",
                f"select * from S{i} where V > 990",
            ):
                r = await c.post("/queries", json={"cql": cql})
                r.raise_for_status()
                qids.append((r.json()["id"], i))
        # subscriber n: query n mod Q, formats shifted per round so every query gets a mix of them
        nq, nf = len(qids), len(FORMATS)
        subs = [Sub(qids[n % nq][0], FORMATS[(n + n // nq) % nf]) for n in range(args.subscribers)]
        stream_of = dict(qids)
        readers = [asyncio.create_task(soak.subscribe(c, s, stream_of[s.qid])) for s in subs]
        await asyncio.sleep(0.5)
        rss = {"start": server.memory(proc.pid)}
        t0 = time.monotonic()
        pushers = [asyncio.create_task(soak.push(c, i)) for i in range(args.pushers)]
        series: list[float] = []  # RSS every tenth of the run, to tell a plateau from a drift

        async def sample() -> None:
            while True:
                series.append(round(server.memory(proc.pid) / (1 << 20), 1))
                await asyncio.sleep(args.seconds / 10)

        sampler = asyncio.create_task(sample())
        await asyncio.sleep(args.seconds / 3)
        rss["third"] = server.memory(proc.pid)
        await asyncio.gather(*pushers)
        elapsed = time.monotonic() - t0
        sampler.cancel()
        # every subscriber reads through the last instant (its `until`), bounded
        _, late = await asyncio.wait(readers, timeout=30)
        for task in late:
            task.cancel()
        rss["end"] = server.memory(proc.pid)
        rss["peak"] = server.memory(proc.pid, "VmHWM:")
        metrics = (await c.get("/metrics", headers={"accept": "application/json"})).text
    errors = list(soak.push_errors)
    for s in subs:
        errors += [f"query {s.qid} {s.fmt}: {e}" for e in s.errors]
    if late:
        errors.append(f"{len(late)} subscribers did not catch up within 30 s")
    by_query: dict[int, set[int]] = {}
    for s in subs:
        by_query.setdefault(s.qid, set()).add(s.elements)
    for qid, counts in by_query.items():
        if len(counts) != 1:
            errors.append(f"query {qid}: subscribers hold different element counts {sorted(counts)}")
    lat = np.array(soak.latency) * 1000
    mb = 1 << 20
    return {
        "seconds": round(elapsed, 1),
        "pushers": args.pushers,
        "subscribers": len(subs),
        "queries": len(qids),
        "pushes": soak.pushes,
        "pushed_rows": soak.pushes * args.rows,
        "elements_received": sum(s.elements for s in subs),
        "elements_per_query": {q: sorted(c)[0] for q, c in by_query.items()},
        "formats": {f: sum(s.fmt == f for s in subs) for f in FORMATS},
        "reconnects": sum(s.reconnects for s in subs),
        "latency_samples": int(lat.size),
        "latency_ms_p50": round(float(np.percentile(lat, 50)), 2) if lat.size else None,
        "latency_ms_p99": round(float(np.percentile(lat, 99)), 2) if lat.size else None,
        "latency_ms_max": round(float(lat.max()), 2) if lat.size else None,
        "rss_mb": {k: round(v / mb, 1) for k, v in rss.items()},
        "rss_mb_series": series,
        "rss_drift_mb": round((rss["end"] - rss["start"]) / mb, 1),
        "rss_drift_after_third_mb": round((rss["end"] - rss["third"]) / mb, 1),
        "metrics_bytes": len(metrics),
        "errors": errors,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.soak", description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--subscribers", type=int, default=40)
    ap.add_argument("--pushers", type=int, default=3)
    ap.add_argument("--rate", type=float, default=20.0, help="instants pushed per second per pusher")
    ap.add_argument("--rows", type=int, default=100, help="rows per push")
    ap.add_argument("--reconnect-every", type=float, default=5.0, help="s between SSE subscribers' resumes")
    ap.add_argument("--result-history", type=int, default=100_000)
    ap.add_argument("--quick", action="store_true", help="a few seconds, few subscribers (a smoke run)")
    ap.add_argument("--json", type=Path, help="write the report here too")
    args = ap.parse_args(argv)
    if args.quick:
        args.seconds, args.subscribers, args.pushers, args.rate, args.rows = 3.0, 8, 2, 10.0, 20
        args.reconnect_every = 1.0
    with server.serving("--result-history", str(args.result_history)) as (proc, url):
        report = asyncio.run(_run(url, proc, args))
    text = json.dumps(report, indent=2)
    print(text)
    if args.json:
        args.json.write_text(text)
    return 0 if not report["errors"] else 1


if __name__ == "__main__":
    sys.exit(main())
