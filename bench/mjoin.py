"""Adaptive MJoin probe orders, in process through the `Dsms` facade: a 4-way star join
S ⋈ T ⋈ U ⋈ V on `a` (windows of `--window` rows) whose best probe order flips half way.

In phase 1, T's keys rarely meet S's (T drops nearly every probe) while V's keys all do, many
times over (a probe into V first multiplies the rows); in phase 2 T and V swap. U is in between.
Runs: adaptive (A-Greedy, starting from the order that is best at the start), the fixed order
best at the start (what a planner choosing once would keep), and the fixed order best for
phase 2. Reported: input tuples per CPU second per phase and overall, candidate pairs examined
per input tuple (the join's work), re-orderings and when the first one after the flip came.

    python -m bench.mjoin [--rows 40000] [--batch 1000] [--window 400] [--p 0.01] [--profile-window 100]
                          [--profile-pass 128] [--json F]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

import numpy as np

from cqlstream.engine import control
from cqlstream.engine.adaptive.config import AdaptiveConfig
from cqlstream.engine.batch import Batch
from cqlstream.engine.dsms import Dsms
from cqlstream.engine.operators.join import JoinOp

NAMES = "STUV"
KEYS = 10  # S's key domain (and the common one)
RARE = 100_000  # a rare key domain: never S's keys


def query(window: int) -> str:
    fr = ", ".join(f"{n} [Rows {window}] as {n.lower()}" for n in NAMES)
    return f"select * from {fr} where s.a = t.a and s.a = u.a and s.a = v.a"


# (the order best at the start: T, U, V after S; T, V, U are found from S's key first)
START = [[1, 2, 3], [0, 2, 3], [0, 1, 3], [0, 1, 2]]
PHASE2 = [[3, 2, 1], [0, 3, 2], [0, 3, 1], [0, 2, 1]]


def keys(name: str, phase: int, n: int, rng: np.random.Generator) -> np.ndarray:
    rare = rng.integers(KEYS, RARE, n) if name in "TV" else None
    common = rng.integers(0, KEYS, n)
    if name == "S":
        return common
    if name == "U":
        return rng.integers(0, 10 * KEYS, n)  # a tenth of U's tuples meet S's keys
    selective = (name == "T") == (phase == 0)
    assert rare is not None
    return np.where(rng.random(n) < 0.0002, common, rare) if selective else common


def run(rows: int, batch: int, window: int, *, config: AdaptiveConfig, orders: list[list[int]]) -> dict[str, Any]:
    d = Dsms(adaptive=config, sys_stream=False)
    for n in NAMES:
        d.execute(f"register stream {n} (a int, k int)")
    h = d.register_query(query(window))
    sub = d.subscribe(h.id)
    op = next(op for op in d.plan.operators if isinstance(op, JoinOp))
    control.set_knob(d, op.eid, "probe_orders", orders)
    rng = np.random.default_rng(7)
    per = rows // 2
    out, t0, seconds, pairs, prof = 0, 0, [], [], []
    for phase in (0, 1):
        cols = {n: keys(n, phase, per, rng) for n in NAMES}
        began, p0, s0 = time.process_time(), op.counters.extra["candidate_pairs"], op.adaptive.seconds
        for lo in range(0, per, batch):
            m = min(batch, per - lo)
            ts = t0 + np.arange(m, dtype=np.int64)
            for n in NAMES:
                a = cols[n][lo : lo + m].astype(np.int64)
                b = Batch(
                    [a, np.arange(lo, lo + m, dtype=np.int64)],
                    [None, None],
                    ts,
                    np.ones(m, np.int8),
                    np.zeros(m, np.uint64),
                )
                d.push_batch(n, b)
            t0 = int(ts[-1]) + 1
            d.run()
            out += len(sub.poll())
        seconds.append(time.process_time() - began)
        prof.append(op.adaptive.seconds - s0)
        pairs.append((op.counters.extra["candidate_pairs"] - p0) / (per * len(NAMES)))
    d.end()
    out += len(sub.poll())
    pipe = op.adaptive.pipes[0]
    half = pipe.seen // 2
    return {
        "tuples_per_s": int(rows * len(NAMES) / sum(seconds)),
        "phase_tuples_per_s": [int(per * len(NAMES) / s) for s in seconds],
        "pairs_per_tuple": [round(p, 2) for p in pairs],
        # the profiler's and re-optimizer's CPU time, as a share of each phase's
        "profiler_pct": [round(100 * p / s, 1) for p, s in zip(prof, seconds)],
        "passes": sum(p.passes.passes for p in op.adaptive.pipes),
        "shift_passes": sum(p.urgent for p in op.adaptive.pipes),
        "reorders": op.adaptive.reorders,
        "first_reorder_after_flip": next((r.at - half for r in pipe.log if r.at > half), None),
        "final_orders": [list(o) for o in op.probe_orders],
        "output_tuples": out,
    }


def bench(rows: int, batch: int, window: int, repeat: int, p: float, w: int, size: int = 128) -> dict[str, Any]:
    runs = {
        "adaptive (a-greedy)": (AdaptiveConfig(probability=p, window=w, profile_pass=size), START),
        "fixed: best at start": (AdaptiveConfig(policy="off"), START),
        "fixed: best for phase 2": (AdaptiveConfig(policy="off"), PHASE2),
    }
    out = {}
    for name, (config, orders) in runs.items():
        best = None
        for _ in range(repeat):
            r = run(rows, batch, window, config=config, orders=orders)
            if best is None or r["tuples_per_s"] > best["tuples_per_s"]:
                best = r
        out[name] = best
    outs = {r["output_tuples"] for r in out.values()}
    assert len(outs) == 1, f"results differ: {outs}"
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.mjoin", description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=40_000, help="tuples per stream (default 40,000)")
    p.add_argument("--batch", type=int, default=1000, help="tuples per stream per push (default 1000)")
    p.add_argument("--window", type=int, default=400, help="rows per window (default 400)")
    p.add_argument("--repeat", type=int, default=2, help="runs per figure, the best kept (default 2)")
    p.add_argument("--p", type=float, default=0.01, help="profiling probability (default 0.01)")
    p.add_argument("--profile-window", type=int, default=100, help="profile tuples kept (default 100)")
    p.add_argument(
        "--profile-pass",
        type=int,
        default=128,
        help="profile tuples per profiling pass (default 128, capped by the window)",
    )
    p.add_argument("--json", help="write the figures to this file")
    args = p.parse_args(argv)
    r = bench(args.rows, args.batch, args.window, args.repeat, args.p, args.profile_window, args.profile_pass)
    print(
        f"{'run':26} {'tuples/s':>10} {'phase 1':>10} {'phase 2':>10} {'pairs/tuple':>13} {'reorders':>8} {'adapted after':>13}"
    )
    for name, x in r.items():
        ph = x["phase_tuples_per_s"]
        w = "/".join(f"{v:.1f}" for v in x["pairs_per_tuple"])
        aa = x["first_reorder_after_flip"]
        print(
            f"{name:26} {x['tuples_per_s']:10,} {ph[0]:10,} {ph[1]:10,} {w:>13} {x['reorders']:8} {aa if aa is not None else '-':>13}"
        )
    a, f = r["adaptive (a-greedy)"], r["fixed: best at start"]
    print(f"adaptive vs best fixed order chosen at the start: {a['tuples_per_s'] / f['tuples_per_s']:.2f}x")
    over = f["phase_tuples_per_s"][0] / a["phase_tuples_per_s"][0] - 1
    print(
        f"phase 1 (the start order stays best): profiler {a['profiler_pct'][0]} % of the adaptive run's CPU, "
        f"throughput {100 * over:+.1f} % against the fixed order; {a['passes']} profiling passes "
        f"({a['shift_passes']} on a shift of the probing's flows)"
    )
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"args": vars(args), "runs": r}, fh, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
