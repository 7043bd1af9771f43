"""Many similar queries on one engine: throughput and memory for 1, 10, 100, 1,000 queries.

Each run is a fresh process (clean peak RSS). The queries differ only in a constant:
`select A, B from S [Range 60] where A = k` (k = 0, 1, ...), all subscribed and polled after
every push. With sharing (the default) they hold one window; `--no-share` gives every query its
own operators (selection pushed below its own window) for comparison. Input: S(A, B) as in
bench/operators.py, pushed in columnar batches.

    python -m bench.sharing --rows 200000 --queries 1 10 100 1000 [--template eq|ge] [--no-share] [--json F]

Memory columns: `state` is what the engine's control tables account (operator state, stores and
queued batches); `RSS Δ` is the process's peak RSS minus its RSS before registering queries.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time

import numpy as np

TEMPLATES = {
    "eq": "select A, B from S [Range 60] where A = {k}",  # selective: 1 in 1000
    "ge": "select A, B from S [Range 60] where A >= {k}",
}  # on average half the stream


def _status_mb(field: str) -> float:
    """VmRSS / VmHWM of this process (VmHWM, unlike ru_maxrss, is not inherited across exec)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _rss_mb() -> float:
    return _status_mb("VmRSS")


def one(n_queries: int, rows: int, batch: int, share: bool, template: str = "eq") -> dict:
    from bench.operators import columns
    from cqlstream.engine.batch import Batch
    from cqlstream.engine.dsms import Dsms

    ts, a, b = columns(rows, 1)
    d = Dsms(share=share, sys_stream=False)
    d.execute("register stream S (A int, B int)")
    base = _rss_mb()
    began = time.perf_counter()
    subs = [d.subscribe(d.register_query(TEMPLATES[template].format(k=k % 1000)).id) for k in range(n_queries)]
    register_s = time.perf_counter() - began
    out = 0
    peak_state = 0
    began = time.perf_counter()
    for lo in range(0, rows, batch):
        k = slice(lo, lo + batch)
        m = len(ts[k])
        d.push_batch("S", Batch([a[k], b[k]], [None, None], ts[k], np.ones(m, np.int8), np.zeros(m, np.uint64)))
        d.run()
        for s in subs:
            out += len(s.poll())
        if lo // batch % 5 == 0:
            peak_state = max(peak_state, _state_bytes(d))
    d.end()
    for s in subs:
        out += len(s.poll())
    secs = time.perf_counter() - began
    peak = _status_mb("VmHWM")
    ops = d.control_table("engine")["counters"]
    return {
        "queries": n_queries,
        "share": share,
        "rows": rows,
        "seconds": round(secs, 3),
        "register_seconds": round(register_s, 3),
        "tuples_per_s": round(rows / secs),
        "output_tuples": out,
        "operators": ops["operators"],
        "windows": sum(1 for t in d.control_tables() if t.get("type") == "seq-window"),
        "state_mb": round(peak_state / 2**20, 2),
        "rss_delta_mb": round(peak - base, 1),
        "peak_rss_mb": round(peak, 1),
    }


def _state_bytes(d) -> int:
    """Operator state, stores and batches waiting in queues."""
    return d.control_table("engine")["counters"]["state_bytes"] + sum(pn.queue.nbytes() for pn in d.plan.nodes.values())


def main(argv=None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m bench.sharing", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--rows", type=int, default=200_000, help="tuples of S (default 200,000)")
    p.add_argument("--batch", type=int, default=10_000, help="rows per push (default 10,000)")
    p.add_argument("--queries", type=int, nargs="+", default=[1, 10, 100, 1000])
    p.add_argument("--no-share", action="store_true", help="also run every size without sharing")
    p.add_argument(
        "--template",
        choices=sorted(TEMPLATES),
        default="eq",
        help="eq: where A = k (selective); ge: where A >= k (keeps half) (default eq)",
    )
    p.add_argument("--json", help="write the figures to this file")
    p.add_argument("--one", nargs=2, metavar=("N", "SHARE"), help=argparse.SUPPRESS)  # a child run
    args = p.parse_args(argv)
    if args.one:
        print(json.dumps(one(int(args.one[0]), args.rows, args.batch, args.one[1] == "1", args.template)))
        return 0
    runs = []
    modes = [True, False] if args.no_share else [True]
    print(
        f"{'queries':>7} {'share':>5} {'seconds':>8} {'tuples/s':>10} {'out tuples':>11} {'operators':>9} "
        f"{'windows':>7} {'state MB':>8} {'RSS Δ MB':>8} {'peak RSS MB':>11}"
    )
    for share in modes:
        for n in args.queries:
            cmd = [
                sys.executable,
                "-m",
                "bench.sharing",
                "--rows",
                str(args.rows),
                "--batch",
                str(args.batch),
                "--template",
                args.template,
                "--one",
                str(n),
                "1" if share else "0",
            ]
            r = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)
            runs.append(r)
            print(
                f"{n:>7} {'on' if share else 'off':>5} {r['seconds']:>8.2f} {r['tuples_per_s']:>10,} "
                f"{r['output_tuples']:>11,} {r['operators']:>9} {r['windows']:>7} {r['state_mb']:>8.2f} "
                f"{r['rss_delta_mb']:>8.1f} {r['peak_rss_mb']:>11.1f}",
                flush=True,
            )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(runs, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
