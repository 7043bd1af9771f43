"""A runaway query contained: `cqlstream serve` with a per-query memory limit, a cross product of two
unbounded windows fed steadily, and another query on its own stream.

Three runs of `--seconds` each, each on a fresh server (a subprocess on a free 127.0.0.1 port):
`baseline` (the other query only, both feeds running), `runaway` (plus the cross product
`select * from S [Range Unbounded], T [Range Unbounded]`) with the memory limit only, and
`runaway` with a per-run CPU limit too (`--query-cpu-limit`). Reports, per run: the other stream's
ingest (tuples/s, pushes/s), /healthz latency p50/p99/max (probed every 20 ms), /readyz 503s, 429s,
the server's peak RSS, and for the runaway run when the cross product was suspended and why.

    python -m bench.limits [--seconds 10] [--limit 64M] [--cpu-limit 0.5] [--batch 500]
"""

from __future__ import annotations

import argparse
import json
import os
import threading
import time
from pathlib import Path

import httpx
import numpy as np

from bench import server

ROOT = Path(__file__).resolve().parent.parent
DDL = [
    "register stream S (A integer, B integer)",
    "register stream T (C integer, D integer)",
    "register stream U (K integer, V integer)",
]
CROSS = "select * from S [Range Unbounded], T [Range Unbounded]"
OTHER = "select K, count(*), sum(V) from U [Range 100] group by K"


def _body(cols: tuple[str, str], batch: int, ts: int, seed: int) -> bytes:
    rng = np.random.default_rng(seed)
    a, b = rng.integers(0, 100, batch), rng.integers(0, 1000, batch)
    return "\n".join(f'{{"ts":{ts},"{cols[0]}":{x},"{cols[1]}":{y}}}' for x, y in zip(a, b)).encode()


def _pct(xs: list[float], p: float) -> float:
    return float(np.percentile(xs, p)) if xs else float("nan")


def run(runaway: bool, seconds: float, limit: str, batch: int, cpu: float = 0.0) -> dict:
    proc, url = server.start("--query-memory-limit", limit, "--query-cpu-limit", str(cpu))
    try:
        c = httpx.Client(base_url=url, timeout=30)
        for ddl in DDL:
            c.post("/streams", content=ddl, headers={"content-type": "text/plain"}).raise_for_status()
        other = c.post("/queries", json={"cql": OTHER}).json()["id"]
        cross = c.post("/queries", json={"cql": CROSS}).json()["id"] if runaway else None
        stop = threading.Event()
        stats: dict[str, list] = {"health": [], "ready503": [], "u": [], "busy": [], "st": []}
        suspended: dict[str, object] = {}
        t0 = time.monotonic()

        def probe() -> None:
            with httpx.Client(base_url=url, timeout=30) as h:
                while not stop.is_set():
                    t = time.perf_counter()
                    h.get("/healthz")
                    stats["health"].append((time.monotonic() - t0, time.perf_counter() - t))
                    if h.get("/readyz").status_code == 503:
                        stats["ready503"].append(1)
                    time.sleep(0.02)

        def feed(streams: list[tuple[str, tuple[str, str]]], out: str) -> None:
            with httpx.Client(base_url=url, timeout=30) as h:
                ts = 0
                while not stop.is_set():
                    ts += 1
                    for name, cols in streams:
                        r = h.post(
                            f"/streams/{name}/tuples",
                            content=_body(cols, batch, ts, ts),
                            headers={"content-type": "application/x-ndjson"},
                        )
                        if r.status_code == 429:
                            stats["busy"].append(1)
                            time.sleep(float(r.headers.get("retry-after", "1")))
                        elif r.status_code == 200:
                            stats[out].append(time.monotonic() - t0)

        def watch() -> None:
            with httpx.Client(base_url=url, timeout=30) as h:
                while cross is not None and not stop.is_set() and not suspended:
                    q = h.get(f"/queries/{cross}").json()
                    if q["state"] == "suspended":
                        suspended.update(after_s=round(time.monotonic() - t0, 2), reason=q["suspended"])
                    time.sleep(0.05)

        threads = [
            threading.Thread(target=probe),
            threading.Thread(target=feed, args=([("U", ("K", "V"))], "u")),
            threading.Thread(target=feed, args=([("S", ("A", "B")), ("T", ("C", "D"))], "st")),
            threading.Thread(target=watch),
        ]
        for t in threads:
            t.start()
        time.sleep(seconds)
        stop.set()
        for t in threads:
            t.join(60)
        took = time.monotonic() - t0
        cut = float(suspended["after_s"]) if suspended else took  # type: ignore[arg-type]
        name = (
            "baseline" if not runaway else f"runaway, memory limit {limit}" + (f", cpu limit {cpu:g} s" if cpu else "")
        )
        out = {"run": name, "seconds": round(took, 1)}
        for phase, lo, hi in (("", 0.0, took), ("before_", 0.0, cut), ("after_", cut, took)):
            if runaway is False and phase:
                continue
            span = max(hi - lo, 1e-9)
            u = [t for t in stats["u"] if lo <= t < hi]
            h = [x for t, x in stats["health"] if lo <= t < hi]
            out[f"{phase}other_tuples_per_s"] = round(len(u) * batch / span)
            out[f"{phase}healthz_ms_p50"] = round(_pct(h, 50) * 1e3, 1)
            out[f"{phase}healthz_ms_p99"] = round(_pct(h, 99) * 1e3, 1)
            out[f"{phase}healthz_ms_max"] = round(max(h) * 1e3, 1) if h else None
        out |= {
            "st_tuples_per_s": round(len(stats["st"]) * batch / took),
            "healthz_probes": len(stats["health"]),
            "readyz_503": len(stats["ready503"]),
            "push_429": len(stats["busy"]),
            "peak_rss_mib": round(server.memory(proc.pid, "VmHWM:") / (1 << 20)),
            "other_state": c.get(f"/queries/{other}").json()["state"],
        }
        if runaway:
            out["suspended"] = suspended or None
        c.close()
        return out
    finally:
        server.stop(proc)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=10.0, help="length of each run (default 10)")
    ap.add_argument("--limit", default="64M", help="--query-memory-limit of the server (default 64M)")
    ap.add_argument("--cpu-limit", type=float, default=0.5, help="--query-cpu-limit of the third run (default 0.5)")
    ap.add_argument("--batch", type=int, default=500, help="tuples per push (default 500)")
    ap.add_argument("--json", metavar="FILE", help="also write the report here")
    a = ap.parse_args(argv)
    report = {"nproc": os.cpu_count(), "limit": a.limit, "batch": a.batch, "runs": []}
    for runaway, cpu in ((False, 0.0), (True, 0.0), (True, a.cpu_limit)):
        r = run(runaway, a.seconds, a.limit, a.batch, cpu)
        report["runs"].append(r)
        print(json.dumps(r), flush=True)
    if a.json:
        Path(a.json).write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
