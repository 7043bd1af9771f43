"""The cost of durability: pushes through the engine host (the HTTP push path after the request is
read: decode, engine, log, run, publish) with the write-ahead log off and on under each fsync
policy, and the time a restart takes to recover versus the length of the log, with and without a
checkpoint.

    python -m bench.durability [--pushes 2000] [--lengths 1000,5000,20000] [--json F]

Ingest: stream `S (A integer, B float, C varchar(8))` and the query
`select C, count(*), sum(B) from S [Range 100] group by C`; pushes of 1 row (latency-bound) and of
1000 rows (throughput-bound) as NDJSON. Each push's latency is timed; tuples/s is over all pushes.
Recovery: a host with L logged pushes of 10 rows; a new host on the same data dir is timed.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time

import numpy as np

from cqlstream.server.host import EngineHost
from cqlstream.server.settings import Settings

DDL = "register stream S (A integer, B float, C varchar(8))"
QUERY = "select C, count(*), sum(B) from S [Range 100] group by C"
MODES = [
    ("no log", None),
    ("log, fsync off", "off"),
    ("log, fsync interval 100 ms", "interval"),
    ("log, fsync always", "always"),
]


def _bodies(pushes: int, rows: int, seed: int = 1) -> list[bytes]:
    rng = np.random.default_rng(seed)
    out = []
    i = 0
    for _ in range(pushes):
        lines = []
        for _k in range(rows):
            lines.append(
                json.dumps(
                    {"ts": i // 100, "A": i, "B": round(float(rng.random()), 4), "C": f"c{int(rng.integers(0, 50))}"}
                )
            )
            i += 1
        out.append(("\n".join(lines) + "\n").encode())
    return out


def _host(data_dir: str | None, fsync: str | None, **kw: object) -> EngineHost:
    s = Settings(data_dir=data_dir, fsync=fsync or "off", checkpoint_records=None, **kw)  # type: ignore[arg-type]
    return EngineHost(s)


def ingest(pushes: int, rows: int, quiet: bool = False) -> list[dict[str, object]]:
    bodies = _bodies(pushes, rows)
    out = []
    for label, fsync in MODES:
        tmp = tempfile.mkdtemp(prefix="cqlstream-bench-")
        try:
            host = _host(tmp if fsync else None, fsync)
            host.register_source(DDL)
            host.register_query(QUERY)
            lat = np.empty(len(bodies))
            t0 = time.perf_counter()
            for k, body in enumerate(bodies):
                a = time.perf_counter()
                host.push("S", body, "application/x-ndjson")
                lat[k] = time.perf_counter() - a
            wall = time.perf_counter() - t0
            host.journal.close()
            r = {
                "mode": label,
                "rows_per_push": rows,
                "pushes": pushes,
                "tuples_per_s": pushes * rows / wall,
                "p50_ms": float(np.percentile(lat, 50) * 1e3),
                "p99_ms": float(np.percentile(lat, 99) * 1e3),
                "log_bytes": host.journal.wal.bytes() if host.journal.wal else 0,
            }
            out.append(r)
            if quiet:
                continue
            print(
                f"  {label:28s} {rows:5d} rows/push: {r['tuples_per_s']:>10,.0f} tuples/s  "
                f"p50 {r['p50_ms']:6.2f} ms  p99 {r['p99_ms']:6.2f} ms",
                flush=True,
            )
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return out


def recovery(lengths: list[int]) -> list[dict[str, object]]:
    out = []
    for n in lengths:
        tmp = tempfile.mkdtemp(prefix="cqlstream-bench-")
        try:
            host = _host(tmp, "off")
            host.register_source(DDL)
            host.register_query(QUERY)
            for body in _bodies(n, 10, seed=n):
                host.push("S", body, "application/x-ndjson")
            log_bytes = host.journal.wal.bytes()  # type: ignore[union-attr]
            t = time.perf_counter()
            replayed = _host(tmp, "off")  # no checkpoint: every record replayed
            replay_s = time.perf_counter() - t
            assert replayed.d.inputs["s"].accepted == 10 * n
            t = time.perf_counter()
            path = replayed.journal.checkpoint()
            write_s = time.perf_counter() - t
            assert path is not None
            t = time.perf_counter()
            loaded = _host(tmp, "off")  # the checkpoint and an empty tail
            load_s = time.perf_counter() - t
            assert loaded.d.inputs["s"].accepted == 10 * n
            r = {
                "records": n,
                "tuples": 10 * n,
                "log_mb": log_bytes / 2**20,
                "replay_s": replay_s,
                "checkpoint_write_s": write_s,
                "checkpoint_mb": path.stat().st_size / 2**20,
                "checkpoint_load_s": load_s,
            }
            out.append(r)
            print(
                f"  {n:7d} records ({r['log_mb']:.1f} MiB log): replay {replay_s:6.2f} s | checkpoint "
                f"{r['checkpoint_mb']:.2f} MiB written in {write_s:.3f} s, restart from it {load_s:.3f} s",
                flush=True,
            )
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.durability", description=__doc__)
    p.add_argument("--pushes", type=int, default=2000, help="pushes per ingest run (default 2000)")
    p.add_argument("--lengths", default="1000,5000,20000", help="log lengths (records) for recovery")
    p.add_argument("--json", help="write the figures here")
    args = p.parse_args(argv)
    print("== ingest through the engine host", flush=True)
    ingest(max(args.pushes // 10, 1), 10, quiet=True)  # warm-up (imports, first-use costs), not reported
    rows = ingest(args.pushes, 1) + ingest(max(args.pushes // 10, 1), 1000)
    print("== recovery time vs log length", flush=True)
    rec = recovery([int(x) for x in args.lengths.split(",") if x])
    if args.json:
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        with open(args.json, "w") as f:
            json.dump({"nproc": os.cpu_count(), "ingest": rows, "recovery": rec}, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
