"""The grouped aggregate in parts (engine/operators/aggregate_parts.py): AggregateOp alone, at
1 vs N engine threads, on the batches a real run gives it.

    python -m bench.aggregate_parts [--only Q2,Q4] [--rows 1000000] [--threads 2] [--repeat 5]
                                    [--push-rows 100000,20000,5000]

Runs `cqlstream run --threads 1` on a query of bench/stream_queries.py in this process, keeping
a copy of the aggregate before its first batch and every batch it is given; then replays those
batches on fresh copies of the operator, alternating engine threads 1 and N. Per replay: wall
seconds inside AggregateOp.process, the process's CPU, the calling (main) thread's CPU — the
critical path, what is left of the wall time with a core per thread — and the output's md5 (every
column, instant, sign and id), which must be the same at every thread count. `--push-rows` cuts
the batches into pushes of that many rows (a threshold for AggregateOp.PARALLEL_MIN).
"""

from __future__ import annotations

import argparse
import copy
import hashlib
import os
import statistics
import sys
import tempfile
import time

from bench.stream_queries import write_script
from cqlstream import cli
from cqlstream.engine import parallel
from cqlstream.engine.batch import Batch
from cqlstream.engine.operators.aggregate import AggregateOp


def capture(qname: str, rows: int) -> tuple[AggregateOp, list[tuple[list[Batch], int]]]:
    """The query's aggregate before its first batch, and every (inputs, bound) it was called with."""
    first: list[AggregateOp] = []
    calls: list[tuple[list[Batch], int]] = []
    process = AggregateOp.process

    def keep(self: AggregateOp, inputs: list[Batch], bound: int) -> Batch:
        if not first:
            first.append(copy.deepcopy(self))
        calls.append((copy.deepcopy(inputs), bound))
        return process(self, inputs, bound)

    script, _ = write_script(qname, rows)
    AggregateOp.process = keep  # type: ignore[method-assign]
    try:
        with tempfile.TemporaryDirectory() as out:
            cli.main(["run", str(script), "--threads", "1", "--out-dir", out])
    finally:
        AggregateOp.process = process  # type: ignore[method-assign]
    if not first:
        raise SystemExit(f"{qname} has no aggregate")
    return first[0], calls


def recut(calls: list[tuple[list[Batch], int]], push: int) -> list[tuple[list[Batch], int]]:
    """The same events in pushes of at most `push` rows (probed aggregates are not cut)."""
    out = []
    for inputs, bound in calls:
        b = inputs[0]
        if len(inputs) > 1 or len(b) <= push:
            out.append((inputs, bound))
            continue
        for i in range(0, len(b), push):
            part = b.take(slice(i, i + push))
            out.append(([part], bound if i + push >= len(b) else int(part.ts[-1])))
    return out


def replay(op0: AggregateOp, calls: list[tuple[list[Batch], int]], threads: int) -> dict:
    parallel.set_threads(threads)
    op = copy.deepcopy(op0)
    h = hashlib.md5()
    wall = cpu = main = 0.0
    for inputs, bound in calls:
        t, c, m = time.perf_counter(), time.process_time(), time.thread_time()
        out = op.process(inputs, bound)
        wall += time.perf_counter() - t
        cpu += time.process_time() - c
        main += time.thread_time() - m
        for c, m in zip(out.cols, out.nulls):
            h.update(c.tobytes() if c.dtype != object else repr(c.tolist()).encode())
            h.update(b"-" if m is None else m.tobytes())
        for a in (out.ts, out.sign, out.id):
            h.update(a.tobytes())
    return {
        "wall": wall,
        "cpu": cpu,
        "main": main,
        "md5": h.hexdigest()[:12],
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.aggregate_parts", description=__doc__.splitlines()[0])
    p.add_argument("--only", default="Q2,Q4", help="queries of bench/stream_queries.py (default Q2,Q4)")
    p.add_argument("--rows", type=int, default=1_000_000, help="tuples per input (default 1,000,000)")
    p.add_argument("--threads", type=int, default=2, help="engine threads to compare with 1 (default 2)")
    p.add_argument("--repeat", type=int, default=5, help="replays per thread count, alternated (default 5)")
    p.add_argument("--push-rows", default="", help="comma-separated push sizes to cut the batches into")
    args = p.parse_args(argv)
    pushes = [int(x) for x in args.push_rows.split(",") if x] or [0]
    print(f"load average {os.getloadavg()[0]:.2f}; {os.cpu_count()} cores")
    print(f"{'query':5} {'push':>7} {'thr':>3} {'wall best':>9} {'median':>7} {'cpu':>6} {'main cpu':>8}  md5")
    ok = True
    for q in args.only.split(","):
        op0, calls0 = capture(q, args.rows)
        for push in pushes:
            calls = recut(calls0, push) if push else calls0
            runs: dict[int, list[dict]] = {1: [], args.threads: []}
            for _ in range(args.repeat):
                for t in runs:
                    runs[t].append(replay(op0, calls, t))
            parallel.set_threads(1)
            for t, rs in runs.items():
                walls = [r["wall"] for r in rs]
                best = min(rs, key=lambda r: r["wall"])
                print(
                    f"{q:5} {push or max(len(c[0][0]) for c in calls):7} {t:3} {min(walls):9.3f} "
                    f"{statistics.median(walls):7.3f} {best['cpu']:6.3f} {best['main']:8.3f}  {rs[0]['md5']}",
                    flush=True,
                )
            digests = {r["md5"] for rs in runs.values() for r in rs}
            if len(digests) != 1:
                print(f"{q}: outputs differ between thread counts: {sorted(digests)}", file=sys.stderr)
                ok = False
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
