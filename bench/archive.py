"""Seeding a query from the log archive (`POST /queries` with `seed_from`): how long the seeding
takes, and how long it holds the engine: while it runs, a pusher pushes one row at a time and its
push latencies are compared with the same pusher's without a seeding.

    python -m bench.archive [--pushes 2000] [--rows 100] [--json F]

A host with `--retain-log` (fsync off) gets `pushes` pushes of `rows` rows on stream
`S (A integer, B float, C varchar(8))`, one instant per push; then
`select C, count(*), sum(B) from S [Range 100] group by C` is seeded from the middle instant.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import threading
import time

import numpy as np

from cqlstream.server.host import EngineHost
from cqlstream.server.settings import Settings

DDL = "register stream S (A integer, B float, C varchar(8))"
QUERY = "select C, count(*), sum(B) from S [Range 100] group by C"


def _body(t: int, rows: int, rng: np.random.Generator) -> bytes:
    lines = [
        json.dumps({"ts": t, "A": int(a), "B": float(b), "C": f"c{int(c)}"})
        for a, b, c in zip(rng.integers(0, 1000, rows), rng.random(rows), rng.integers(0, 50, rows))
    ]
    return ("\n".join(lines) + "\n").encode()


def _pusher(host: EngineHost, t0: int, stop: threading.Event, out: list[float]) -> None:
    t = t0
    while not stop.is_set():
        body = json.dumps([{"ts": t, "A": 1, "B": 1.0, "C": "p"}]).encode()
        began = time.perf_counter()
        host.push("S", body, "application/json")
        out.append(time.perf_counter() - began)
        t += 1
        time.sleep(0.001)


def _pcts(xs: list[float]) -> dict[str, float]:
    a = np.asarray(xs) * 1000
    return {"n": len(a), "p50_ms": float(np.percentile(a, 50)), "max_ms": float(a.max())} if len(a) else {"n": 0}


def run(pushes: int, rows: int) -> dict[str, object]:
    d = tempfile.mkdtemp(prefix="cqlstream-archive-")
    try:
        host = EngineHost(Settings(data_dir=d, retain_log=True, fsync="off", checkpoint_records=500))
        host.register_source(DDL)
        rng = np.random.default_rng(1)
        for t in range(1, pushes + 1):
            host.push("S", _body(t, rows, rng), "application/x-ndjson")
            host.journal.maybe_checkpoint()
        log_mb = host.journal.wal.bytes() / 2**20 if host.journal.wal else 0.0
        # a pusher alone (baseline), then a pusher while a query is seeded from the middle
        lat_alone: list[float] = []
        stop = threading.Event()
        th = threading.Thread(target=_pusher, args=(host, pushes + 1, stop, lat_alone))
        th.start()
        time.sleep(1.0)
        stop.set()
        th.join()
        t_next = pushes + 1 + len(lat_alone)
        lat_seed: list[float] = []
        stop = threading.Event()
        th = threading.Thread(target=_pusher, args=(host, t_next, stop, lat_seed))
        th.start()
        began = time.perf_counter()
        q = host.register_query(QUERY, seed_from=pushes // 2)
        seconds = time.perf_counter() - began
        stop.set()
        th.join()
        pub = host.fanout.pubs[q["id"]]
        host.stop()
        return {
            "archived_rows": pushes * rows,
            "replayed_into_query_rows": (pushes - pushes // 2 + 1) * rows,
            "log_mb": round(log_mb, 1),
            "seed_seconds": round(seconds, 3),
            "results_published": pub.emitted,
            "push_latency_alone": _pcts(lat_alone),
            "push_latency_while_seeding": _pcts(lat_seed),
        }
    finally:
        shutil.rmtree(d, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.archive", description=__doc__.split("\n")[0])
    ap.add_argument("--pushes", type=int, default=2000)
    ap.add_argument("--rows", type=int, default=100)
    ap.add_argument("--json", help="write the figures here too")
    args = ap.parse_args(argv)
    out = run(args.pushes, args.rows)
    text = json.dumps(out, indent=2)
    print(text)
    if args.json:
        with open(args.json, "w") as f:
            f.write(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
