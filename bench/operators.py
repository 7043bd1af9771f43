"""Throughput per operator family, in process through the `Dsms` facade (no file I/O).

Input: N tuples of S(A, B), 10 per instant, A uniform 0..999, B uniform 0..99 (seeded), pushed
as columnar batches of `--batch` rows with the scheduler run after each. Prints one line per
family: input tuples/s and output tuples; `--json` writes the figures.

    python -m bench.operators --rows 1000000
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import time

import numpy as np

from cqlstream.engine.batch import Batch
from cqlstream.engine.dsms import Dsms

FAMILIES = [
    ("select", "select A, B from S where B < 10"),
    ("project", "select A + B, A * 2 from S"),
    ("window-range", "select * from S [Range 100]"),
    ("window-rows", "select * from S [Rows 1000]"),
    ("window-partition", "select * from S [Partition By B Rows 5]"),
    ("aggregate-rows", "select B, Sum(A), Count(A) from S [Rows 1000] group by B"),
    ("aggregate-range", "select B, Sum(A), Count(A) from S [Range 100] group by B"),
    ("aggregate-minmax", "select B, Max(A) from S [Range 100] group by B"),
    ("join", "Istream(select S.A, T.B from S [Rows 1000], T [Rows 1000] where S.A = T.A)"),
    ("distinct", "select distinct B from S [Rows 1000]"),
    ("istream", "Istream(select * from S [Rows 1000])"),
]


def columns(n: int, seed: int):
    rng = np.random.default_rng(seed)
    ts = np.arange(n, dtype=np.int64) // 10 + 1
    return ts, rng.integers(0, 1000, n, dtype=np.int64), rng.integers(0, 100, n, dtype=np.int64)


def run_family(query: str, n: int, batch: int) -> dict:
    d = Dsms()
    d.execute("register stream S (A int, B int); register stream T (A int, B int);")
    h = d.register_query(query)
    sub = d.subscribe(h.id)
    inputs = {"S": columns(n, 1)}
    if "T" in query.replace("T.", "T ").split():
        inputs["T"] = columns(n, 2)
    out = 0
    began = time.perf_counter()
    for lo in range(0, n, batch):
        for name, (ts, a, b) in inputs.items():
            k = slice(lo, lo + batch)
            m = len(ts[k])
            d.push_batch(name, Batch([a[k], b[k]], [None, None], ts[k], np.ones(m, np.int8), np.zeros(m, np.uint64)))
        d.run()
        out += len(sub.poll())
    d.end()
    out += len(sub.poll())
    secs = time.perf_counter() - began
    total_in = n * len(inputs)
    return {"seconds": round(secs, 3), "input_tuples_per_s": int(total_in / secs), "output_tuples": out}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.operators", description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=1_000_000, help="tuples per input stream (default 1,000,000)")
    p.add_argument("--batch", type=int, default=100_000, help="rows per push (default 100,000)")
    p.add_argument("--only", help="comma-separated families to run")
    p.add_argument("--json", help="write the figures to this file")
    args = p.parse_args(argv)
    only = set(args.only.split(",")) if args.only else None
    report = {}
    print(f"{'family':18} {'seconds':>8} {'in tuples/s':>12} {'out tuples':>11}")
    for name, query in FAMILIES:
        if only and name not in only:
            continue
        r = run_family(query, args.rows, args.batch)
        report[name] = {"query": query, **r}
        print(f"{name:18} {r['seconds']:8.2f} {r['input_tuples_per_s']:12,} {r['output_tuples']:11,}", flush=True)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024
    print(f"peak RSS {peak} MB (whole run)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"rows": args.rows, "batch": args.batch, "results": report, "peak_rss_mb": peak}, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
