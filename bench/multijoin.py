"""Sliding-window multi-joins (Golab & Özsu, Table 8): the paper's relative results beside ours.

Workload: the paper's Table 5 — four streams joined on one attribute, rates λ = 10, 1, 1, 3, time
windows T = 100, 100, 200, 100, distinct values v = 500, 50, 40, 5 — generated as in its §6.1:
each tuple comes from stream i with probability λ_i/Σλ and takes a uniform value in {1..v_i};
time advances 1/Σλ per tuple (so stream i arrives at λ_i per time unit and its window holds
λ_i·T_i tuples, the sizes the cost model assumes); windows are filled before measuring.

1. `model`: the paper's algorithms tuple at a time (engine/joinorder/expiration.py: nested loops
   over windows or over the one hash bucket of the new tuple's value, timestamp checks in every
   loop) — eager NLJ, eager hash with 5 buckets per window, lazy (τ = 5, 10) of both — for the
   best and the worst of the 24 global orders (all 24 measured for the eager runs). This is where
   NLJ lives: the engine's MJoin always probes an index. Measured comparisons per tuple are
   printed beside the cost model's prediction, with probes per tuple, and each eager algorithm's
   time per tuple split into fixed work and time per comparison (`per_comparison`), giving the
   hash/NLJ ratio on comparison time alone, the regime the paper measured in.
2. `engine`: the same workload through the engine's MJoin (`Dsms`, vectorized index probes,
   pushes of `--push` time units), each global order set through the `probe_orders` knob, and
   the orders the cost model picks per input (`join_order` = cost with the workload's rates).

Rates are tuples per CPU second of the process (`time.process_time`), the best of `--repeat` runs.

    python -m bench.multijoin [--tuples 3000] [--engine-units 2000] [--only model,engine] [--json F]
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from cqlstream.engine.dsms import Dsms
from cqlstream.engine.joinorder import ordering as JO
from cqlstream.engine.joinorder.cost import EXACT, JoinShape, WindowStats, global_cost, global_orders, plan_cost
from cqlstream.engine.joinorder.expiration import Counter, SlidingWindow, compute_join
from cqlstream.engine.joinorder.heuristic import all_global_costs, heuristic_order

TABLE5 = [(10, 100, 500), (1, 100, 50), (1, 200, 40), (3, 100, 5)]  # (λ, T, v) of S1..S4
# the paper's Table 8, maximum input rate in tuples per second (best plan, worst plan)
PAPER_TABLE8 = {
    "eager NLJ": (1614, 333),
    "lazy NLJ, tau=5": (1446, 296),
    "lazy NLJ, tau=10": (1332, 274),
    "eager hash": (11540, 2524),
    "lazy hash, tau=5": (8420, 2041),
    "lazy hash, tau=10": (7947, 1848),
}
REPEAT = 1


def shape() -> JoinShape:
    return JoinShape.common([WindowStats(*r) for r in TABLE5])


def name(order: Sequence[int]) -> str:
    return ",".join(f"S{j + 1}" for j in order)


def generate(n: int, seed: int) -> list[tuple[int, tuple[int, int]]]:
    """n tuples (stream, (tick, value)); a tick is 1/Σλ time units."""
    rng = np.random.default_rng(seed)
    lam = np.array([r[0] for r in TABLE5], float)
    streams = rng.choice(len(TABLE5), size=n, p=lam / lam.sum())
    values = [int(rng.integers(1, TABLE5[s][2] + 1)) for s in streams]
    return [(int(s), (t, v)) for t, (s, v) in enumerate(zip(streams, values))]


# ---------------------------------------------------------------------- 1. the paper's algorithms


def run_model(order: Sequence[int], buckets: int, tau: int, tuples: int, seed: int = 1) -> dict[str, float]:
    """One run of the paper's algorithm: eager (tau 0) or lazy every tau time units."""
    scale = sum(r[0] for r in TABLE5)  # ticks per time unit
    prefill = max(r[1] for r in TABLE5) * scale
    data = generate(prefill + tuples, seed)
    orders = global_orders(order)
    windows = [SlidingWindow(r[1] * scale, buckets) for r in TABLE5]
    for i, t in data[:prefill]:
        windows[i].insert(t)
    for w in windows:
        w.expire(prefill)
    counter = Counter()
    rows = 0
    began = time.process_time()
    if tau == 0:
        for i, k in data[prefill:]:
            for w in windows:
                w.expire(k[0])
            windows[i].insert(k)
            rows += len(compute_join(k, i, orders[i], windows, True, counter))
    else:
        step = tau * scale
        batch: list[list[tuple[int, int]]] = [[] for _ in windows]
        for n, (i, k) in enumerate(data[prefill:], 1):
            windows[i].insert(k)
            batch[i].append(k)
            if n % step == 0 or n == tuples:
                for w in windows:
                    w.expire(k[0] - step)
                for j, new in enumerate(batch):
                    for kk in new:
                        rows += len(compute_join(kk, j, orders[j], windows, True, counter))
                batch = [[] for _ in windows]
    cpu = time.process_time() - began
    return {
        "tuples_per_s": tuples / cpu,
        "comparisons_per_tuple": counter.comparisons / tuples,
        "probes_per_tuple": counter.probes / tuples,
        "rows": rows,
    }


def best_of(f, *a) -> dict[str, float]:
    runs = [f(*a) for _ in range(REPEAT)]
    return max(runs, key=lambda r: r["tuples_per_s"])


def bench_model(tuples: int) -> dict[str, Any]:
    s = shape()
    costs = all_global_costs(s)
    model_best = min(costs, key=lambda o: costs[o])
    model_worst = max(costs, key=lambda o: costs[o])
    heur, _ = heuristic_order(s)
    out: dict[str, Any] = {"heuristic": name(heur), "model_best": name(model_best), "model_worst": name(model_worst)}
    algos = [("eager NLJ", 1, 0), ("lazy NLJ, tau=5", 1, 5), ("lazy NLJ, tau=10", 1, 10)]
    algos += [("eager hash", 5, 0), ("lazy hash, tau=5", 5, 5), ("lazy hash, tau=10", 5, 10)]
    for label, b, tau in algos:
        plans = list(itertools.permutations(range(4))) if tau == 0 else [model_best, model_worst]
        per = {name(o): best_of(run_model, o, b, tau, tuples) for o in plans}
        best = max(per, key=lambda o: per[o]["tuples_per_s"])
        worst = min(per, key=lambda o: per[o]["tuples_per_s"])
        sb = s.with_buckets([b] * 4)
        out[label] = {
            "plans": per,
            "best": best,
            "worst": worst,
            "best_tuples_per_s": round(per[best]["tuples_per_s"]),
            "worst_tuples_per_s": round(per[worst]["tuples_per_s"]),
            "best_over_worst": per[best]["tuples_per_s"] / per[worst]["tuples_per_s"],
            "heuristic_tuples_per_s": round(per[name(heur)]["tuples_per_s"]) if name(heur) in per else None,
            "predicted_comparisons_per_tuple": {
                o: plan_cost(sb, global_orders([int(x[1:]) - 1 for x in o.split(",")]), tau) / sum(r[0] for r in TABLE5)
                for o in per
            },
        }
        r = out[label]
        print(
            f"  {label:18} best {r['best']} {r['best_tuples_per_s']:>8,}/s  worst {r['worst']} "
            f"{r['worst_tuples_per_s']:>7,}/s  ratio {r['best_over_worst']:.2f}   paper "
            f"{PAPER_TABLE8[label][0]:>6,} / {PAPER_TABLE8[label][1]:>5,}  ratio "
            f"{PAPER_TABLE8[label][0] / PAPER_TABLE8[label][1]:.2f}",
            flush=True,
        )
    return out


def print_model_summary(m: dict[str, Any]) -> None:
    nlj, hsh = m["eager NLJ"], m["eager hash"]
    print(
        f"  hash (5 buckets) / NLJ, best plans: ours {hsh['best_tuples_per_s'] / nlj['best_tuples_per_s']:.2f}×, "
        f"paper {11540 / 1614:.2f}×"
    )
    print(f"  heuristic's plan {m['heuristic']}; cost model's best {m['model_best']}, worst {m['model_worst']}")
    cmp_n = nlj["plans"][m["heuristic"]]["comparisons_per_tuple"]
    cmp_h = hsh["plans"][m["heuristic"]]["comparisons_per_tuple"]
    print(f"  comparisons per tuple, NLJ / hash on the heuristic's plan: {cmp_n / cmp_h:.2f}× (cost model: 5.00×)")
    for label in ("eager NLJ", "eager hash"):
        r = m[label]
        by_cmp = sorted(r["plans"], key=lambda o: r["plans"][o]["comparisons_per_tuple"])
        lo, hi = r["plans"][by_cmp[0]], r["plans"][by_cmp[-1]]
        m[label]["fewest_comparisons"] = by_cmp[0]
        print(
            f"  {label}: fewest comparisons {by_cmp[0]} ({lo['comparisons_per_tuple']:.0f}/tuple), most "
            f"{by_cmp[-1]} ({hi['comparisons_per_tuple']:.0f}/tuple): ratio "
            f"{hi['comparisons_per_tuple'] / lo['comparisons_per_tuple']:.2f} (cost model 5.43); the heuristic's "
            f"plan is #{by_cmp.index(m['heuristic']) + 1} by comparisons"
        )
    m["per_comparison"] = per_comparison(m)
    for label in ("eager NLJ", "eager hash"):
        r = m[label]
        ranked = sorted(r["plans"], key=lambda o: -r["plans"][o]["tuples_per_s"])
        got = r["plans"][m["heuristic"]]
        print(
            f"  {label}: the heuristic's plan is measured #{ranked.index(m['heuristic']) + 1} of 24 "
            f"({got['tuples_per_s']:,.0f}/s); comparisons/tuple measured {got['comparisons_per_tuple']:.0f}, "
            f"predicted {r['predicted_comparisons_per_tuple'][m['heuristic']]:.0f}"
        )


def per_comparison(m: dict[str, Any]) -> dict[str, Any]:
    """Where the time per tuple goes: over the 24 plans of each eager algorithm, CPU seconds per
    tuple fitted as fixed + cost × comparisons (least squares), so the fixed work per tuple (the
    call, expiring every bucket of every window, building results) is told apart from the cost of
    a comparison; then the hash/NLJ ratio with only the comparisons' time, as the paper's Java loop
    spent it (its per-tuple time is ~all comparisons: its rates over the cost model's comparisons
    give its time per comparison)."""
    out: dict[str, Any] = {}
    paper_ns = {}
    for label in ("eager NLJ", "eager hash"):
        r = m[label]
        c = np.array([p["comparisons_per_tuple"] for p in r["plans"].values()])
        t = np.array([1 / p["tuples_per_s"] for p in r["plans"].values()])
        slope, fixed = np.polyfit(c, t, 1)
        resid = t - (fixed + slope * c)
        r2 = 1 - float(resid @ resid) / float((t - t.mean()) @ (t - t.mean()))
        best = r["plans"][r["best"]]
        predicted = r["predicted_comparisons_per_tuple"][r["best"]]
        paper_ns[label] = 1e9 / (PAPER_TABLE8[label][0] * predicted)
        out[label] = {
            "fixed_us_per_tuple": fixed * 1e6,
            "ns_per_comparison": slope * 1e9,
            "r2": r2,
            "best_comparisons_per_tuple": best["comparisons_per_tuple"],
            "best_probes_per_tuple": best["probes_per_tuple"],
            "comparison_share": slope * best["comparisons_per_tuple"] / (1 / best["tuples_per_s"]),
            "paper_ns_per_comparison": paper_ns[label],
        }
    n, h = out["eager NLJ"], out["eager hash"]
    out["measured_ratio"] = m["eager hash"]["best_tuples_per_s"] / m["eager NLJ"]["best_tuples_per_s"]
    out["comparison_ratio"] = n["best_comparisons_per_tuple"] / h["best_comparisons_per_tuple"]
    # the throughput ratio with the fixed per-tuple work taken out (comparisons only)
    out["comparison_bound_ratio"] = (n["ns_per_comparison"] * n["best_comparisons_per_tuple"]) / (
        h["ns_per_comparison"] * h["best_comparisons_per_tuple"]
    )
    out["paper_ratio"] = PAPER_TABLE8["eager hash"][0] / PAPER_TABLE8["eager NLJ"][0]
    print("  where the time per tuple goes (eager, fit over the 24 plans: time = fixed + cost × comparisons):")
    for label in ("eager NLJ", "eager hash"):
        x = out[label]
        print(
            f"    {label:10}: fixed {x['fixed_us_per_tuple']:.1f} µs/tuple, {x['ns_per_comparison']:.0f} ns per "
            f"comparison (R² {x['r2']:.2f}); best plan {x['best_comparisons_per_tuple']:.0f} comparisons, "
            f"{x['best_probes_per_tuple']:.1f} probes per tuple, comparisons {100 * x['comparison_share']:.0f}% "
            f"of its time; paper: {x['paper_ns_per_comparison']:.0f} ns per predicted comparison, ~all of its time"
        )
    print(
        f"  hash/NLJ: measured {out['measured_ratio']:.2f}×, comparisons {out['comparison_ratio']:.2f}×, "
        f"comparison time only {out['comparison_bound_ratio']:.2f}×; paper {out['paper_ratio']:.2f}×"
    )
    return out


# ---------------------------------------------------------------------- 2. the engine's MJoin

DDL = " ".join(f"register stream S{i} (k int);" for i in range(1, 5))
QUERY = (
    "istream(select * from S1 [Range 100], S2 [Range 100], S3 [Range 200], S4 [Range 100] where "
    + " and ".join(f"S{a}.k = S{b}.k" for a, b in itertools.combinations(range(1, 5), 2))
    + ")"
)


def engine_data(units: int, seed: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """Per stream (ts, value) arrays: λ_i tuples per time unit, uniform values in {1..v_i}."""
    rng = np.random.default_rng(seed)
    out = []
    for lam, _t, v in TABLE5:
        ts = np.repeat(np.arange(units, dtype=np.int64), lam)
        out.append((ts, rng.integers(1, v + 1, size=len(ts))))
    return out


def run_engine(orders: list[list[int]] | None, units: int, push: int, seed: int = 2) -> dict[str, float]:
    d = Dsms()
    d.execute(DDL)
    h = d.register_query(QUERY)
    sub = d.subscribe(h.id)
    (join,) = [t for t in d.control_tables() if t.get("type") == "join"]
    if orders is not None:
        d.set_knob(join["id"], "probe_orders", orders)
    data = engine_data(units, seed)
    warm = 200  # fill the windows before measuring
    rows = 0
    measured = 0
    began = None
    for t0 in range(0, units, push):
        if t0 >= warm and began is None:
            began = time.process_time()
        for i, (ts, v) in enumerate(data):
            lo, hi = np.searchsorted(ts, [t0, t0 + push])
            if hi > lo:
                d.push(f"S{i + 1}", [(int(x),) for x in v[lo:hi]], ts=ts[lo:hi].tolist())
                measured += (hi - lo) if began is not None else 0
        d.run()
        rows += len(sub.poll()) if began is not None else 0
    cpu = time.process_time() - (began or time.process_time())
    counters = d.control_table(join["id"])["counters"]
    return {
        "tuples_per_s": measured / cpu if cpu > 0 else 0.0,
        "join_seconds": counters["seconds"],  # the join operator's own time (all of the run)
        "candidate_pairs": counters["candidate_pairs"],  # index probe work: deterministic
        "rows": rows,
    }


def best_engine(orders: list[list[int]], units: int, push: int) -> dict[str, float]:
    """The best of REPEAT runs: the highest throughput and, separately, the least join time."""
    runs = [run_engine(orders, units, push) for _ in range(REPEAT)]
    best = dict(max(runs, key=lambda r: r["tuples_per_s"]))
    best["join_seconds"] = min(r["join_seconds"] for r in runs)
    return best


def bench_engine(units: int, push: int) -> dict[str, Any]:
    per = {}
    for o in itertools.permutations(range(4)):
        per[name(o)] = best_engine(global_orders(o), units, push)
    s = shape()
    eng = s.with_buckets([EXACT] * 4)  # the engine's index: a probe visits exactly its matches
    chosen, _ = JO.choose_orders(eng, global_orders(range(4)))
    cost_run = best_engine(chosen, units, push)
    heur, _ = heuristic_order(s)
    best = max(per, key=lambda o: per[o]["tuples_per_s"])
    worst = min(per, key=lambda o: per[o]["tuples_per_s"])
    ranked = sorted(per, key=lambda o: -per[o]["tuples_per_s"])
    predicted = {
        o: plan_cost(eng, global_orders([int(x[1:]) - 1 for x in o.split(",")]), lookup=JO.LOOKUP) for o in per
    }
    out = {
        "plans": per,
        "best": best,
        "worst": worst,
        "best_over_worst": per[best]["tuples_per_s"] / per[worst]["tuples_per_s"],
        "heuristic": name(heur),
        "heuristic_rank": ranked.index(name(heur)) + 1,
        "cost_model_orders": chosen,
        "cost_model_tuples_per_s": cost_run["tuples_per_s"],
        "predicted_best": min(predicted, key=lambda o: predicted[o]),
        "predicted_worst": max(predicted, key=lambda o: predicted[o]),
        "predicted_ratio": max(predicted.values()) / min(predicted.values()),
    }
    fastest = min(per, key=lambda o: per[o]["join_seconds"])
    slowest = max(per, key=lambda o: per[o]["join_seconds"])
    out["join_seconds_ratio"] = per[slowest]["join_seconds"] / per[fastest]["join_seconds"]
    out["heuristic_join_rank"] = sorted(per, key=lambda o: per[o]["join_seconds"]).index(name(heur)) + 1
    print(
        f"  whole engine: best {best} {per[best]['tuples_per_s']:,.0f}/s, worst {worst} "
        f"{per[worst]['tuples_per_s']:,.0f}/s, ratio {out['best_over_worst']:.2f} (paper eager hash 4.57)"
    )
    print(
        f"  the join operator's time: fastest {fastest} {per[fastest]['join_seconds']:.3f} s, slowest {slowest} "
        f"{per[slowest]['join_seconds']:.3f} s, ratio {out['join_seconds_ratio']:.2f}; heuristic's order "
        f"#{out['heuristic_join_rank']} of 24; rows {per[best]['rows']} in every plan: "
        f"{len({r['rows'] for r in per.values()}) == 1}"
    )
    by_pairs = sorted(per, key=lambda o: per[o]["candidate_pairs"])
    lo, hi = per[by_pairs[0]]["candidate_pairs"], per[by_pairs[-1]]["candidate_pairs"]
    out["candidate_pairs_ratio"] = hi / lo
    out["cost_model_candidate_pairs"] = cost_run["candidate_pairs"]
    out["cost_model_pairs_rank"] = 1 + sum(r["candidate_pairs"] < cost_run["candidate_pairs"] for r in per.values())
    print(
        f"  candidate pairs examined by the index probes (deterministic): fewest {by_pairs[0]} {lo:,}, most "
        f"{by_pairs[-1]} {hi:,}, ratio {hi / lo:.2f}; the heuristic's order #{by_pairs.index(name(heur)) + 1}; "
        f"the cost model's per-input orders {cost_run['candidate_pairs']:,} (#{out['cost_model_pairs_rank']})"
    )
    ranks = [
        np.argsort(np.argsort([x[o] for o in per])) for x in ({o: per[o]["candidate_pairs"] for o in per}, predicted)
    ]
    out["rank_correlation_pairs_vs_model"] = float(np.corrcoef(ranks[0], ranks[1])[0, 1])
    print(
        f"  rank correlation of the 24 plans' candidate pairs with the index cost model's estimates: "
        f"{out['rank_correlation_pairs_vs_model']:.3f}"
    )
    out["cost_model_join_seconds"] = cost_run["join_seconds"]
    out["cost_model_join_rank"] = 1 + sum(r["join_seconds"] < cost_run["join_seconds"] for r in per.values())
    print(
        f"  the cost model's per-input orders (index model): join time {cost_run['join_seconds']:.3f} s, "
        f"would rank #{out['cost_model_join_rank']} among the 24 global orders"
    )
    print(
        f"  heuristic's global order {name(heur)}: measured #{out['heuristic_rank']} of 24 "
        f"({per[name(heur)]['tuples_per_s']:,.0f}/s); per-input orders by the cost model {chosen}: "
        f"{cost_run['tuples_per_s']:,.0f}/s"
    )
    print(
        f"  index cost model: cheapest {out['predicted_best']}, dearest {out['predicted_worst']}, "
        f"predicted ratio {out['predicted_ratio']:.2f}"
    )
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.multijoin", description=__doc__.splitlines()[0])
    p.add_argument("--tuples", type=int, default=3000, help="measured tuples per model run (default 3000)")
    p.add_argument("--engine-units", type=int, default=2000, help="time units of engine input (default 2000)")
    p.add_argument("--push", type=int, default=10, help="time units per engine push (default 10)")
    p.add_argument("--only", help="comma-separated parts: model, engine")
    p.add_argument("--repeat", type=int, default=1, help="runs per figure, the best kept (default 1)")
    p.add_argument("--json", help="write the figures to this file")
    args = p.parse_args(argv)
    global REPEAT
    REPEAT = args.repeat
    only = set(args.only.split(",")) if args.only else {"model", "engine"}
    report: dict[str, Any] = {"table5": TABLE5, "paper_table8": PAPER_TABLE8}
    print(
        f"Table 5 workload; cost model: best {name(heuristic_order(shape())[0])} = {global_cost(shape(), (0, 1, 2, 3)):.0f}"
    )
    if "model" in only:
        print("== the paper's algorithms, tuple at a time (ours: tuples per CPU second; paper: Table 8)", flush=True)
        report["model"] = m = bench_model(args.tuples)
        print_model_summary(m)
    if "engine" in only:
        print("== the engine's MJoin, 24 global orders through the probe_orders knob", flush=True)
        report["engine"] = bench_engine(args.engine_units, args.push)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1, default=str)
    return 0


if __name__ == "__main__":
    sys.exit(main())
