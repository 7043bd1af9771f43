"""Memory allocation for precision and the summary synopses, measured.

1. The allocator against a uniform split (each operator gets the same fraction of its need) on a
   multi-query fixture with shared joins, a Bloom-filter distinct, except and intersect: the
   weighted precision (Σ w·precision / Σ w) at budgets from 5 % to 100 % of the total need.
2. Each summary's error against its bytes at a fixed seed: Bloom filter (measured vs formula
   false-positive rate), KLL (max rank error), CountSketch (mean error / ‖f‖₂), reservoir
   (error of the sample mean), equi-depth histogram (max range-count error / n).
3. Distinct on the engine with `summary` = exact vs bloom: state bytes and values missed.

    python -m bench.approx_allocation [--quick] [--json F]
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np

from cqlstream.engine.approx.allocator import Allocator, Query, uniform
from cqlstream.engine.approx.precision import Node, Plan, bloom_fp_rate
from cqlstream.engine.summaries.bloom import BloomFilter
from cqlstream.engine.summaries.countsketch import CountSketch
from cqlstream.engine.summaries.histogram import EquiDepth
from cqlstream.engine.summaries.quantiles import KLL
from cqlstream.engine.summaries.reservoir import Reservoir

KB = 1024


def fixture() -> tuple[Plan, list[Query]]:
    """Six queries over shared subplans (needs in KB)."""
    p = Plan()
    for s in ("R", "S", "T", "U", "V", "A", "B", "C", "D"):
        p.add(Node(s, "source"))
    p.add(Node("RS", "join", ("R", "S"), need=400 * KB, need_right=100 * KB))
    p.add(Node("RST", "join", ("RS", "T"), need=200 * KB, need_right=200 * KB))
    p.add(Node("UV", "join", ("U", "V"), need=150 * KB, need_right=150 * KB))
    p.add(Node("dU", "distinct", ("U",), need=300 * KB, items=50_000))
    p.add(Node("AB", "except", ("A", "B"), need=120 * KB, items=20_000, overlap=0.2))
    p.add(Node("CD", "intersect", ("C", "D"), need=120 * KB, items=20_000, overlap=0.5))
    p.add(Node("sRS", "select", ("RS",)))
    qs = [
        Query("q1", "sRS", 1.0),
        Query("q2", "RST", 3.0),
        Query("q3", "UV", 1.0),
        Query("q4", "dU", 2.0),
        Query("q5", "AB", 1.0),
        Query("q6", "CD", 0.5),
    ]
    return p, qs


def allocation_rows(fractions: list[float]) -> list[dict]:
    plan, qs = fixture()
    total_need = sum(n.need + n.need_right for n in plan.nodes.values())
    wsum = sum(q.weight for q in qs)
    out = []
    for f in fractions:
        a = Allocator(plan, int(total_need * f), unit=8 * KB)
        a.queries = {q.name: q for q in qs}
        t0 = time.perf_counter()
        a.solve()
        secs = time.perf_counter() - t0
        uni = {k: v // a.unit for k, v in uniform(a).items()}
        out.append(
            {
                "budget_fraction": f,
                "allocator": round(a.objective() / wsum, 4),
                "uniform": round(a.objective(uni) / wsum, 4),
                "seconds": round(secs, 3),
            }
        )
    return out


def incremental_rows() -> list[dict]:
    """Objective evaluations (the cost) and result of re-running after each change, against
    solving from scratch, at a budget of 30 % of the need."""
    plan, qs = fixture()
    budget = int(0.3 * sum(n.need + n.need_right for n in plan.nodes.values()))
    a = Allocator(plan, budget, unit=8 * KB)
    a.queries = {q.name: q for q in qs}
    a.solve()
    changes = [
        ("weight q5 → 4", lambda x: x.set_weight("q5", 4.0)),
        ("deactivate q2", lambda x: x.set_active("q2", False)),
        ("U rate ×2", lambda x: x.set_node("dU", items=100_000, need=600 * KB)),
        ("activate q2", lambda x: x.set_active("q2", True)),
        ("drop q6", lambda x: x.drop_query("q6")),
    ]
    out = []
    for name, change in changes:
        before = a.evaluations
        change(a)
        inc_cost = a.evaluations - before
        fresh = Allocator(Plan(dict(a.plan.nodes)), a.budget, a.unit)
        fresh.queries = dict(a.queries)
        fresh.solve()
        out.append(
            {
                "change": name,
                "incremental_evals": inc_cost,
                "scratch_evals": fresh.evaluations,
                "incremental": round(a.objective(), 4),
                "scratch": round(fresh.objective(), 4),
            }
        )
    return out


def bloom_rows(sizes: list[int], n: int = 10_000) -> list[dict]:
    keys = np.random.default_rng(1).integers(0, 2**62, n)
    probe = np.random.default_rng(2).integers(2**62, 2**63 - 1, 200_000)
    out = []
    for nbytes in sizes:
        f = BloomFilter(nbytes, expected=n, seed=3)
        f.add(keys)
        out.append(
            {
                "bytes": f.nbytes(),
                "measured_fp": round(float(f.contains(probe).mean()), 5),
                "formula_fp": round(bloom_fp_rate(f.nbytes(), n, f.k), 5),
            }
        )
    return out


def kll_rows(ks: list[int], n: int) -> list[dict]:
    v = np.random.default_rng(11).normal(size=n)
    sv = np.sort(v)
    qs = np.linspace(0.01, 0.99, 99)
    out = []
    for k in ks:
        s = KLL(k=k, seed=4)
        for part in np.array_split(v, 20):
            s.update(part)
        err = np.abs(np.searchsorted(sv, s.quantile(qs), side="right") / n - qs).max()
        out.append({"k": k, "bytes": s.nbytes(), "max_rank_error": round(float(err), 5)})
    return out


def countsketch_rows(widths: list[int], n: int) -> list[dict]:
    keys = np.random.default_rng(5).zipf(1.3, n) % 20_000
    uniq, true = np.unique(keys, return_counts=True)
    l2 = float(np.sqrt((true.astype(float) ** 2).sum()))
    out = []
    for w in widths:
        cs = CountSketch(w, depth=5, seed=1)
        cs.update(keys)
        err = np.abs(cs.estimate(uniq) - true)
        out.append({"width": w, "bytes": cs.nbytes(), "mean_error_over_l2": round(float(err.mean() / l2), 6)})
    return out


def reservoir_rows(ks: list[int], n: int) -> list[dict]:
    v = np.random.default_rng(6).exponential(size=n)
    out = []
    for k in ks:
        errs = []
        for seed in range(20):
            r = Reservoir(k, seed=seed)
            r.update(v)
            errs.append(abs(r.sample().mean() - v.mean()) / v.mean())
        out.append({"k": k, "bytes": k * 8, "mean_rel_error_of_mean": round(float(np.mean(errs)), 5)})
    return out


def histogram_rows(buckets: list[int], n: int) -> list[dict]:
    rng = np.random.default_rng(8)
    parts = [rng.normal(loc=i * 0.3, size=n // 10) for i in range(10)]
    v = np.concatenate(parts)
    ranges = [(lo, lo + w) for lo in np.linspace(-2, 4, 13) for w in (0.25, 1.0)]
    out = []
    for b in buckets:
        h = EquiDepth(b)
        for p in parts:
            h.update(p)
        err = max(abs(h.count_between(lo, hi) - ((v >= lo) & (v <= hi)).sum()) for lo, hi in ranges) / len(v)
        out.append({"buckets": b, "bytes": h.nbytes(), "max_range_error_over_n": round(float(err), 5)})
    return out


def engine_rows(n: int, sizes: list[int]) -> list[dict]:
    from cqlstream.engine import control
    from cqlstream.engine.dsms import Dsms

    rng = np.random.default_rng(2)
    vals = rng.integers(0, n // 2, n)
    out = []
    for mode, nbytes in [("exact", 0), *[("bloom", s) for s in sizes]]:
        d = Dsms()
        d.execute("register stream S (a int);")
        h = d.register_query("select distinct a from S [Range Unbounded]")
        sub = d.subscribe(h.id)
        (op,) = [t["id"] for t in control.tables(d) if t.get("type") == "distinct"]
        if mode == "bloom":
            control.set_knob(d, op, "summary", "bloom")
            control.set_knob(d, op, "summary_bytes", nbytes)
        emitted = 0
        for i, part in enumerate(np.array_split(vals, 20)):
            d.push("S", [(int(x),) for x in part], ts=[i] * len(part))
            d.run()
            emitted += len(sub.poll())
        d.end()
        emitted += len(sub.poll())
        t = control.table(d, op)["counters"]
        out.append(
            {
                "summary": mode,
                "state_bytes": t["state_bytes"],
                "emitted": emitted,
                "missed": len(np.unique(vals)) - emitted,
                "est_missed": t.get("summary_est_false_negatives", 0),
            }
        )
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.approx_allocation", description=__doc__)
    p.add_argument("--quick", action="store_true", help="small sizes (a smoke run)")
    p.add_argument("--json", default=None)
    args = p.parse_args(argv)
    q = args.quick
    n = 20_000 if q else 200_000
    report = {
        "allocation": allocation_rows([0.1, 0.5] if q else [0.05, 0.1, 0.2, 0.35, 0.5, 0.75, 1.0]),
        "incremental": incremental_rows(),
        "bloom": bloom_rows([2 * KB, 8 * KB] if q else [2 * KB, 4 * KB, 8 * KB, 16 * KB, 32 * KB]),
        "kll": kll_rows([50, 200] if q else [25, 50, 100, 200, 400], n),
        "countsketch": countsketch_rows([256, 1024] if q else [128, 256, 512, 1024, 4096], n),
        "reservoir": reservoir_rows([100, 1000] if q else [100, 300, 1000, 3000], n),
        "histogram": histogram_rows([8, 32] if q else [8, 16, 32, 64, 128], n),
        "distinct": engine_rows(4000 if q else 40_000, [1 * KB] if q else [4 * KB, 16 * KB, 64 * KB]),
    }
    for name, rows in report.items():
        print(f"\n== {name}")
        cols = list(rows[0])
        print("  ".join(f"{c:>22}" for c in cols))
        for r in rows:
            print("  ".join(f"{r[c]!s:>22}" for c in cols))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
