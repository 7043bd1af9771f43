"""Column pruning on and off (engine/column_pruning.py): engine CPU of joins over a wide relation
whose queries read two of its columns.

`python -m bench.column_pruning [--rows N] [--rounds K]` pushes N tuples of a 6-column stream S
(in batches of 2,000, one instant each) against a 24-column relation R of 2,000 rows (each S
tuple meets 20 of them), with the queries below registered on one engine, and prints the engine's thread CPU (best of K rounds,
pruning on and off alternating) and the tuples each join emitted. Window narrowing (the logical
rewrite `narrow_windows`) does not apply here: R is a relation, not a window.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from cqlstream.engine.dsms import Dsms

WIDE = 24
DDL = (
    "register stream S (k int, a int, b int, c int, d int, e int); register relation R ("
    + ", ".join(f"r{i} int" for i in range(WIDE))
    + ")"
)
QUERIES = {
    "stream join (Rstream of S [Now] ⋈ R)": "select rstream(A.a, B.r5) from S [Now] as A, R as B where A.k = B.r0",
    "join under an aggregate": (
        "select B.r7, count(*) from S [Range 2] as A, R as B where A.k = B.r0 and A.b < B.r3 group by B.r7"
    ),
}


def run(rows: int, prune: bool) -> tuple[float, dict[str, int]]:
    rng = np.random.default_rng(7)
    d = Dsms(prune_columns=prune, recent_tails=False, sys_stream=False)
    d.execute(DDL)
    rel = rng.integers(0, 1000, (2000, WIDE))
    rel[:, 0] = np.arange(2000) % 100  # each S tuple meets 20 rows of R
    d.push("R", [tuple(map(int, r)) for r in rel], ts=[0] * 2000)
    hs = {name: d.register_query(q) for name, q in QUERIES.items()}
    subs = {name: d.subscribe(h.id) for name, h in hs.items()}
    out = dict.fromkeys(QUERIES, 0)
    batch = 2000
    cpu = 0.0
    for t, lo in enumerate(range(0, rows, batch), start=1):
        n = min(batch, rows - lo)
        s = rng.integers(0, 100, (n, 6))
        d.push("S", [tuple(map(int, r)) for r in s], ts=[t] * n)
        d.heartbeat("R", t)
        began = time.thread_time()
        d.run()
        cpu += time.thread_time() - began
        for name, sub in subs.items():
            out[name] += len(sub.poll())
    return cpu, out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=200_000)
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args(argv)
    best = {True: float("inf"), False: float("inf")}
    outs = {}
    for _ in range(args.rounds):
        for prune in (True, False):
            cpu, out = run(args.rows, prune)
            best[prune] = min(best[prune], cpu)
            outs[prune] = out
    assert outs[True] == outs[False], "pruning changed the results"
    print(f"{args.rows:,} S tuples against R (2,000 rows, {WIDE} columns); engine thread CPU, best of {args.rounds}")
    print(f"  pruning on : {best[True]:.3f} s")
    print(f"  pruning off: {best[False]:.3f} s")
    for name, n in outs[True].items():
        print(f"  {name}: {n:,} result elements")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
