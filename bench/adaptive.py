"""Adaptive query processing, in process through the `Dsms` facade.

1. `filters`: a selection with five conjuncts of costs 1, 3, 9, 27, 81 (an identity of growing
   length: `(A*2 + A*3 - A*4) < 500` is `A < 500`), whose pass rates change half way: in
   phase 1 the cheapest conjunct drops 98%, in phase 2 it drops nothing and one of cost 27 does. Throughput and conjunct evaluations
   per tuple with A-Greedy and its variants against fixed orders: the optimal one for phase 1,
   the optimal one for phase 2 and the worst one for phase 2 (exhaustive search,
   operations per tuple); the work is counted in operations (tuples × operations per tuple).
2. `overhead`: stable data, the best order already set: the profiler's cost at several
   profiling probabilities p against adaptation off, at two batch sizes.
   `table42`: the thesis' Table 4.2 setting, n equal-cost filters passing 50 % each, correlated in
   groups of two, at its (n, p) = (3, 0.01), (3, 0.05), (8, 0.01), (8, 0.05): the profiler's
   overhead against adaptation off at A-Greedy's converged order, beside the thesis' figures.
3. `chain`: a cheap selection keeping 20% before a costly projection, under bursts (20,000
   tuples every 40 ticks; each tick grants the engine a twentieth of the CPU time a burst needs
   under round robin):
   peak and mean queue memory (tuples waiting in operator inputs, at each tick's end) with
   round robin, FIFO, Greedy and Chain.
   `trap`: the thesis' Example 4.5.1, correlated filters (a uniform on 1..100; F_1..F_{n−1} pass
   a < 50, F_n passes a ≥ 50, unit cost each): the evaluations per tuple of the order each policy
   converges to, against the optimal order (exhaustive) and the thesis' bound (A-Greedy within 4×
   of optimal; Independent, ranking by unconditional drop rates, keeps F_n last: 0.49 n + 0.51).
   `toy`: the thesis' two toy schedules (seed 004 §4.2's two-operator burst, thesis §2.3.2's
   O1→O2→O3 chain; n tuples arrive at each of t = 0..6, each operator takes one unit of time):
   the peak and mean queue size (in units of n) under FIFO, Greedy and Chain beside the thesis'.

Rates are input tuples per CPU second of the process (`time.process_time`), steadier than wall
time on a shared machine, the best of `--repeat` runs.

    python -m bench.adaptive [--rows 2000000] [--only filters,overhead,table42,chain,trap,toy] [--backoff N] [--json F]
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import time
from dataclasses import replace
from typing import Any

import numpy as np

from cqlstream.cql.catalog import Catalog
from cqlstream.cql.ddl import execute_ddl
from cqlstream.cql.frontend import compile_query
from cqlstream.cql.logical import expr as X
from cqlstream.cql.logical import nodes as L
from cqlstream.engine import control
from cqlstream.engine.adaptive.chain import simulate
from cqlstream.engine.adaptive.config import AdaptiveConfig
from cqlstream.engine.adaptive.conjuncts import AdaptiveOrder, static_cost
from cqlstream.engine.batch import Batch, from_rows
from cqlstream.engine.dsms import Dsms
from cqlstream.engine.exprs import Evaluator
from cqlstream.engine.scheduler import SCHEDULERS

COLS = "ABCDE"
COSTS = [1, 3, 9, 27, 81]  # identity terms per conjunct
# pass rate per conjunct: in phase 1 the cheapest conjunct drops 98%; in phase 2 it drops
# nothing, and one of cost 27 drops 98%
PHASES = [[0.02, 0.5, 1.0, 1.0, 1.0], [1.0, 1.0, 0.5, 0.02, 0.5]]


def identity(col: str, k: int) -> str:
    """`col` written with 2k−1 arithmetic operations (cost k), for conjuncts of different costs."""
    if k == 1:
        return col
    terms = [f"{col} * {j + 2}" for j in range(k - 1)]
    return f"({' + '.join(terms)} - {col} * {sum(j + 2 for j in range(k - 1)) - 1})"


WHERE = " and ".join(f"{identity(c, k)} < 500" for c, k in zip(COLS, COSTS))
QUERY = f"select A, B from S where {WHERE}"
OPS = [1 + (2 * k - 1 if k > 1 else 0) + 1 for k in COSTS]  # static_cost of each conjunct


def expected_ops(order: list[int], rates: list[float]) -> float:
    """Operations per input tuple of an order when the conjuncts pass independently."""
    total, alive = 0.0, 1.0
    for i in order:
        total += OPS[i] * alive
        alive *= rates[i]
    return total


def _extreme(rates: list[float], worst: bool = False) -> list[int]:
    orders = [list(o) for o in itertools.permutations(range(len(COSTS)))]
    return (max if worst else min)(orders, key=lambda o: expected_ops(o, rates))


FIXED = {  # orders (conjunct indexes, first evaluated first), by exhaustive search
    "fixed optimal for phase 1": _extreme(PHASES[0]),
    "fixed optimal for phase 2": _extreme(PHASES[1]),
    "fixed worst for phase 2": _extreme(PHASES[1], worst=True),
}


class Counting(Evaluator):
    """Counts the operations the selection's conjuncts run (tuples × operations per tuple)."""

    def __init__(self, functions) -> None:
        super().__init__(functions)
        self.work = 0
        self.ops: dict[int, int] = {}  # static cost per conjunct (counting must not weigh on the timings)

    def predicate(self, e, b):
        ops = self.ops.get(id(e))
        if ops is None:
            ops = self.ops[id(e)] = static_cost(e)
        self.work += len(b) * ops
        return super().predicate(e, b)


def phase_columns(n: int, rates: list[float], rng: np.random.Generator) -> list[np.ndarray]:
    """One column per conjunct: below 500 (passes) with the conjunct's pass rate."""
    out = []
    for r in rates:
        passing = rng.random(n) < r
        out.append(np.where(passing, rng.integers(0, 500, n), rng.integers(500, 1000, n)).astype(np.int64))
    return out


def run_filter(rows: int, batch: int, phases: list[list[float]], *, config: AdaptiveConfig, order=None) -> dict:
    """The best of REPEAT runs (per phase: the least CPU time), the first one's counts."""
    runs = [_run_filter(rows, batch, phases, config=config, order=order) for _ in range(REPEAT)]
    best = runs[0]
    seconds = [min(r["seconds"][k] for r in runs) for k in range(len(phases))]
    per = rows // len(phases)
    best["tuples_per_s"] = int(rows / sum(seconds))
    best["phase_tuples_per_s"] = [int(per / sec) for sec in seconds]
    del best["seconds"]
    return best


REPEAT = 3
BACKOFF: int | None = None  # --backoff: the profiling back-off cap of every adaptive run (None: the default)


def _config(config: AdaptiveConfig) -> AdaptiveConfig:
    return config if BACKOFF is None else replace(config, backoff=BACKOFF)


def _run_filter(rows: int, batch: int, phases: list[list[float]], *, config: AdaptiveConfig, order=None) -> dict:
    d = Dsms(adaptive=_config(config), sys_stream=False)
    d.execute("register stream S (A int, B int, C int, D int, E int)")
    h = d.register_query(QUERY)
    sub = d.subscribe(h.id)
    op = next(op for op in d.plan.operators if op.kind == "select")
    op.ev = ev = Counting(d.catalog.functions)
    if order is not None:
        control.set_knob(d, op.eid, "conjunct_order", order)
    rng = np.random.default_rng(1)
    per = rows // len(phases)
    data = [phase_columns(per, rates, rng) for rates in phases]
    out, t0, seconds, work = 0, 0, [], []
    for cols in data:
        began, w0 = time.process_time(), ev.work
        for lo in range(0, per, batch):
            part = [c[lo : lo + batch] for c in cols]
            m = len(part[0])
            ts = t0 + np.arange(m, dtype=np.int64) // 10
            t0 = int(ts[-1]) + 1
            d.push_batch("S", Batch(part, [None] * 5, ts, np.ones(m, np.int8), np.zeros(m, np.uint64)))
            d.run()
            out += len(sub.poll())
        seconds.append(time.process_time() - began)
        work.append((ev.work - w0) / per)
    d.end()
    out += len(sub.poll())
    return {
        "seconds": seconds,
        "ops_per_tuple": [round(w, 2) for w in work],
        "reorders": op.adaptive.reorders,
        # input tuples from the shift to the first re-ordering after it (None: none after it)
        "adapted_after": next((r.at - per for r in op.adaptive.log if r.at > per), None) if len(phases) > 1 else None,
        "final_order": list(op.adaptive.order),
        "output_tuples": out,
    }


def bench_filters(rows: int, batch: int) -> dict[str, Any]:
    runs: dict[str, Any] = {}
    for policy in ("a-greedy", "sweep", "independent", "local-swaps"):
        runs[policy] = run_filter(rows, batch, PHASES, config=AdaptiveConfig(policy=policy))
    for name, order in FIXED.items():
        runs[name] = run_filter(rows, batch, PHASES, config=AdaptiveConfig(policy="off"), order=order)
    outs = {r["output_tuples"] for r in runs.values()}
    assert len(outs) == 1, f"results differ between orders: {outs}"
    return runs


def bench_overhead(rows: int, batches: list[int], probabilities: list[float]) -> dict[str, Any]:
    """Steady phase-1 data (its optimal order is the cheapest, so profiling weighs most), the
    optimal order set from the start: what profiling and re-optimizing cost."""
    runs: dict[str, Any] = {}
    best = FIXED["fixed optimal for phase 1"]
    for batch in batches:
        off = run_filter(rows, batch, PHASES[:1], config=AdaptiveConfig(policy="off"), order=best)
        row: dict[str, Any] = {"off": {"tuples_per_s": off["tuples_per_s"], "ops_per_tuple": off["ops_per_tuple"][0]}}
        for p in probabilities:
            on = run_filter(rows, batch, PHASES[:1], config=AdaptiveConfig(probability=p), order=best)
            row[f"p={p:g}"] = {
                "tuples_per_s": on["tuples_per_s"],
                "overhead_pct": round(100 * (off["tuples_per_s"] / on["tuples_per_s"] - 1), 1),
                "ops_per_tuple": on["ops_per_tuple"][0],
                "reorders": on["reorders"],
            }
        runs[f"batch {batch}"] = row
    return runs


# ------------------------------------------------------------------ the thesis' Table 4.2

T42 = [(3, 0.01), (3, 0.05), (8, 0.01), (8, 0.05)]  # its columns: (filters n, profiling probability p)
T42_PAPER = {(3, 0.01): 0.88 + 0.20 + 0.15, (3, 0.05): 4.17 + 0.93 + 0.73, (8, 0.01): 2.92 + 0.20 + 0.22 + 0.04}
T42_PAPER[(8, 0.05)] = 13.34 + 0.91 + 0.98  # its % of run time outside tuple processing
T42_COST = 3  # identity terms per filter: equal costs (the thesis: one hash probe each)


def t42_columns(n: int, rows: int, rng: np.random.Generator, gamma: int = 2) -> list[np.ndarray]:
    """Table 4.1's defaults: every filter passes 50 %; filters in a group of Γ = 2 give the same
    result on 80 % of tuples (each copies its group's coin with probability 0.6), groups are
    independent."""
    out = []
    for g in range(0, n, gamma):
        coin = rng.random(rows) < 0.5
        for _ in range(g, min(g + gamma, n)):
            passing = np.where(rng.random(rows) < 0.6, coin, rng.random(rows) < 0.5)
            out.append(np.where(passing, rng.integers(0, 500, rows), rng.integers(500, 1000, rows)).astype(np.int64))
    return out


def _run_t42(n: int, cols: list[np.ndarray], batch: int, config: AdaptiveConfig, order) -> dict[str, Any]:
    names = [f"C{k}" for k in range(n)]
    d = Dsms(adaptive=_config(config), sys_stream=False)
    d.execute(f"register stream S ({', '.join(f'{c} int' for c in names)})")
    where = " and ".join(f"{identity(c, T42_COST)} < 500" for c in names)
    h = d.register_query(f"select C0 from S where {where}")
    sub = d.subscribe(h.id)
    op = next(op for op in d.plan.operators if op.kind == "select")
    op.ev = ev = Counting(d.catalog.functions)
    if order is not None:
        control.set_knob(d, op.eid, "conjunct_order", order)
    rows, out = len(cols[0]), 0
    began = time.process_time()
    for lo in range(0, rows, batch):
        part = [c[lo : lo + batch] for c in cols]
        m = len(part[0])
        ts = lo // 10 + np.arange(m, dtype=np.int64) // 10
        d.push_batch("S", Batch(part, [None] * n, ts, np.ones(m, np.int8), np.zeros(m, np.uint64)))
        d.run()
        out += len(sub.poll())
    seconds = time.process_time() - began
    d.end()
    return {
        "seconds": seconds,
        "ops_per_tuple": ev.work / rows,
        "order": list(op.adaptive.order),
        "reorders": op.adaptive.reorders,
        "out": out + len(sub.poll()),
    }


def bench_table42(rows: int, batch: int) -> dict[str, Any]:
    """Stable data, A-Greedy's own converged order set from the start (and used by the run
    without adaptation): the profiler's overhead at Table 4.2's (n, p), runs alternated, the
    least CPU time of REPEAT each. `profile_ops_pct`: the extra conjunct operations profiling
    ran (exact), the thesis' profile-tuple creation."""
    runs: dict[str, Any] = {}
    for n, p in T42:
        cols = t42_columns(n, rows, np.random.default_rng(4))
        config = AdaptiveConfig(probability=p)
        order = _run_t42(n, cols, batch, config, None)["order"]  # converge first
        on, off = [], []
        for _ in range(REPEAT):
            on.append(_run_t42(n, cols, batch, config, order))
            off.append(_run_t42(n, cols, batch, AdaptiveConfig(policy="off"), order))
        assert len({r["out"] for r in on + off}) == 1
        t_on, t_off = min(r["seconds"] for r in on), min(r["seconds"] for r in off)
        runs[f"n={n} p={p:g}"] = {
            "overhead_pct": round(100 * (t_on / t_off - 1), 1),
            "profile_ops_pct": round(100 * (on[0]["ops_per_tuple"] / off[0]["ops_per_tuple"] - 1), 2),
            "thesis_pct": round(T42_PAPER[(n, p)], 2),
            "tuples_per_s_off": int(rows / t_off),
            "tuples_per_s_on": int(rows / t_on),
            "reorders": on[0]["reorders"],
        }
    return runs


CHAIN_QUERY = "select " + " + ".join(f"A * {k}" for k in range(1, 40)) + " as X, B from S where A < 200"


def _queued(d: Dsms) -> int:
    """Tuples waiting in operator inputs (source queues included; results leave the system)."""
    fed = {id(q): q for op in d.plan.operators for q in op.inputs}
    return sum(q.length() for q in fed.values())


def run_chain(name: str, ticks: int, period: int, burst: int, slice_s: float, budget: int) -> dict:
    d = Dsms(sys_stream=False, scheduler=SCHEDULERS[name](budget))
    d.execute("register stream S (A int, B int)")
    h = d.register_query(CHAIN_QUERY)
    sub = d.subscribe(h.id)
    rng = np.random.default_rng(2)
    mem, out, t = [], 0, 0
    for tick in range(ticks):
        if tick % period == 0:
            a, b = rng.integers(0, 1000, burst), rng.integers(0, 100, burst)
            ts = t + np.arange(burst, dtype=np.int64) // 10  # 10 per instant: the budget cuts between them
            d.push_batch("S", Batch([a, b], [None, None], ts, np.ones(burst, np.int8), np.zeros(burst, np.uint64)))
            t = int(ts[-1]) + 1
        d.heartbeat("S", t)
        t += 1
        end = time.process_time() + slice_s
        while time.process_time() < end:
            if not d.scheduler.run(d.plan.operators, max_passes=1):
                break
        mem.append(_queued(d))  # at each tick's end, as in the thesis' tables
        out += len(sub.poll())
    d.end()
    out += len(sub.poll())
    return {"peak_queued": max(mem), "mean_queued": int(np.mean(mem)), "output_tuples": out}


def bench_chain(ticks: int, period: int, burst: int, budget: int) -> dict[str, Any]:
    # the slice: a twentieth of the CPU one burst needs under round robin (a burst takes ~20 ticks)
    began = time.process_time()
    run_chain("round-robin", 1, 100, burst, 100.0, budget)
    slice_s = (time.process_time() - began) / 20
    runs = {
        name: run_chain(name, ticks, period, burst, slice_s, budget)
        for name in ("round-robin", "fifo", "greedy", "chain")
    }
    outs = {r["output_tuples"] for r in runs.values()}
    assert len(outs) == 1, f"results differ between schedulers: {outs}"
    return {"slice_ms": round(slice_s * 1e3, 3), "runs": runs}


class ProbeCounter(Evaluator):
    """Counts the tuples every predicate evaluation sees (unit cost each, as in Example 4.5.1 and
    the thesis' Figure 4.4 example; tests/test_adaptive_filters.py uses it too)."""

    def __init__(self) -> None:
        super().__init__()
        self.probes = 0

    def predicate(self, e, b):
        self.probes += len(b)
        return super().predicate(e, b)


def _trap(n: int) -> tuple[list, list]:
    """Ex 4.5.1's conjunction over S(a): n − 1 copies of `a < 50`, then `a >= 50`."""
    cat = Catalog()
    execute_ddl(cat, "register stream S (a int);")
    where = " and ".join(["a < 50"] * (n - 1) + ["a >= 50"])
    plan = compile_query(f"select * from S where {where}", cat).analyzed.plan
    while not isinstance(plan, L.Filter):
        plan = plan.inputs[0]
    return X.conjuncts(plan.predicate), [a.type for a in plan.inputs[0].schema]


def _trap_optimum(n: int) -> float:
    """Evaluations per tuple of the best order over a = 1..100 (every order tried)."""
    a = np.arange(1, 101)
    passes = [a < 50] * (n - 1) + [a >= 50]
    best = float(n)
    for order in itertools.permutations(range(n)):
        alive, cost = np.ones(100, bool), 0.0
        for k in order:
            cost += alive.mean()
            alive &= passes[k]
        best = min(best, cost)
    return round(best, 4)


def bench_trap(ns: tuple[int, ...] = (3, 5, 7)) -> dict[str, Any]:
    """Ex 4.5.1: the order each policy converges to on correlated filters, and its cost."""
    out: dict[str, Any] = {}
    for n in ns:
        conj, types = _trap(n)
        opt = _trap_optimum(n)
        row: dict[str, Any] = {"optimal": opt, "thesis_independent": round(0.49 * n + 0.51, 2)}
        for policy in ("a-greedy", "sweep", "independent", "local-swaps"):
            # the thesis' pace (no back-off), p = 0.5 so that 4,000 tuples converge
            cfg = AdaptiveConfig(policy=policy, probability=0.5, window=200, profile_batch=8, backoff=1)
            ad = AdaptiveOrder(conj, cfg)
            ad.meter.costs = lambda n=n: np.ones(n)
            values = np.random.default_rng(0).permutation(np.tile(np.arange(1, 101), 40))
            for k in range(0, len(values), 100):
                v = values[k : k + 100]
                ad.run(from_rows([(int(x),) for x in v], types, np.arange(k, k + 100)), Evaluator())
            ev = ProbeCounter()
            ad.configure(AdaptiveConfig(policy="off"))
            ad.run(from_rows([(x,) for x in range(1, 101)], types, np.zeros(100, np.int64)), ev)
            cost = ev.probes / 100
            row[policy] = {"order": list(ad.order), "evaluations": cost, "vs_optimal": round(cost / opt, 2)}
        assert row["a-greedy"]["vs_optimal"] <= 4.0, f"A-Greedy above 4x the optimum at n = {n}"
        out[str(n)] = row
    return out


# (operator times, selectivities, the thesis' peak queue size in units of n per policy)
TOY_CASES: dict[str, tuple[list[int], list[float], dict[str, float]]] = {
    "two-operator burst (seed 004 §4.2)": ([1, 1], [0.2, 0.0], {"fifo": 4.0, "greedy": 2.2}),
    "O1→O2→O3 (thesis §2.3.2)": ([1, 1, 1], [0.9, 1.0, 0.0], {"fifo": 5.0, "greedy": 6.4}),
}


def bench_toy() -> dict[str, Any]:
    """Queue sizes of the thesis' toy schedules under FIFO, Greedy and Chain (engine/adaptive/chain.py's
    `simulate`: one unit of time per operator step, the priorities the schedulers use)."""
    out: dict[str, Any] = {}
    for case, (times, sels, thesis) in TOY_CASES.items():
        out[case] = {}
        for policy in ("fifo", "greedy", "chain"):
            sizes = simulate(policy, times, sels, [1.0] * 7)
            out[case][policy] = {
                "sizes": sizes,
                "peak": max(sizes),
                "mean": round(sum(sizes) / len(sizes), 2),
                "thesis_peak": thesis.get(policy),
            }
        best = min(out[case][p]["peak"] for p in ("fifo", "greedy"))
        assert out[case]["chain"]["peak"] <= best + 1e-9, f"Chain above FIFO or Greedy in {case}"
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.adaptive", description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=2_000_000, help="tuples in the filter runs (default 2,000,000)")
    p.add_argument("--batch", type=int, default=100_000, help="rows per push in the filter runs (default 100,000)")
    p.add_argument("--only", help="comma-separated parts: filters, overhead, table42, chain, trap, toy")
    p.add_argument("--ticks", type=int, default=400, help="ticks of the chain run (default 400)")
    p.add_argument("--repeat", type=int, default=3, help="filter runs per figure, the best kept (default 3)")
    p.add_argument(
        "--backoff", type=int, help="profiling back-off cap of the adaptive runs (1: none; default: the engine's)"
    )
    p.add_argument("--json", help="write the figures to this file")
    args = p.parse_args(argv)
    global REPEAT, BACKOFF
    REPEAT, BACKOFF = args.repeat, args.backoff
    only = set(args.only.split(",")) if args.only else {"filters", "overhead", "table42", "chain", "trap", "toy"}
    report: dict[str, Any] = {"rows": args.rows, "batch": args.batch}
    if "filters" in only:
        run_filter(args.rows // 4, args.batch, PHASES, config=AdaptiveConfig())  # warm up
        report["filters"] = r = bench_filters(args.rows, args.batch)
        print(
            f"{'order':26} {'tuples/s':>11} {'phase 1':>11} {'phase 2':>11} {'ops/tuple':>14} {'reorders':>8} {'adapted after':>13}"
        )
        for name, x in r.items():
            ph = x["phase_tuples_per_s"]
            w = "/".join(f"{v:.2f}" for v in x["ops_per_tuple"])
            print(
                f"{name:26} {x['tuples_per_s']:11,} {ph[0]:11,} {ph[1]:11,} {w:>14} {x['reorders']:8} "
                f"{x['adapted_after'] if x['adapted_after'] is not None else '-':>13}",
                flush=True,
            )
    if "overhead" in only:
        report["overhead"] = r = bench_overhead(args.rows, [10_000, args.batch], [0.001, 0.005, 0.01, 0.05])
        for name, x in r.items():
            for k, v in x.items():
                print(f"{name:14} {k:8} {v}", flush=True)
    if "table42" in only:
        report["table42"] = r = bench_table42(args.rows // 2, args.batch)
        print(
            f"{'Table 4.2':14} {'overhead':>9} {'profile ops':>12} {'thesis':>7} {'off t/s':>11} {'on t/s':>11} reorders"
        )
        for name, x in r.items():
            print(
                f"{name:14} {x['overhead_pct']:8.1f}% {x['profile_ops_pct']:11.2f}% {x['thesis_pct']:6.2f}% "
                f"{x['tuples_per_s_off']:11,} {x['tuples_per_s_on']:11,} {x['reorders']:8}",
                flush=True,
            )
    if "chain" in only:
        report["chain"] = r = bench_chain(args.ticks, 40, 20_000, 500)
        print(f"slice {r['slice_ms']} ms per tick")
        for name, x in r["runs"].items():
            print(
                f"{name:12} peak {x['peak_queued']:8,}  mean {x['mean_queued']:8,}  out {x['output_tuples']:,}",
                flush=True,
            )
    if "trap" in only:
        report["trap"] = trap = bench_trap()
        print("Example 4.5.1 (correlated filters): evaluations per tuple of the converged order")
        print(f"{'n':>3} {'optimal':>8} {'a-greedy':>9} {'sweep':>7} {'independent':>12} {'local-swaps':>12}")
        for n, row in trap.items():
            cells = " ".join(
                f"{row[p]['evaluations']:.2f} ({row[p]['vs_optimal']:.2f}x)".rjust(w)
                for p, w in (("a-greedy", 9), ("sweep", 7), ("independent", 12), ("local-swaps", 12))
            )
            print(
                f"{n:>3} {row['optimal']:8.2f} {cells}  thesis: A-Greedy ≤ 4x, Independent {row['thesis_independent']}"
            )
    if "toy" in only:
        report["toy"] = toy = bench_toy()
        for case, runs in toy.items():
            print(case)
            for policy, x in runs.items():
                paper = "—" if x["thesis_peak"] is None else f"{x['thesis_peak']:.1f}n"
                print(f"  {policy:7} peak {x['peak']:.1f}n (thesis {paper})  mean {x['mean']:.2f}n", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
