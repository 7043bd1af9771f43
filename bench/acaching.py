"""A-Caching (thesis §5.8): subresult caches on MJoin pipelines against a plain MJoin, in process
through the `Dsms` facade. Three figures, each printed beside the thesis's.

Fig 5.21 — a 4-way join of R, S, T, U on workloads D1–D8 (Table 5.2). The thesis gives, per
workload, each stream's rate relative to T and each pair's join selectivity, not its generator
nor its window sizes. Reconstruction (ours): the four streams join on one attribute a (the
predicates of all six pairs, x.a = y.a), each stream drawing a uniformly from its own domain
[0, d_X), so a pair joins with selectivity 1 / max(d_X, d_Y); the four domains are fitted to
the six selectivities of the table (printed beside them). Selectivity 0 (D7): disjoint ranges.
Streams are interleaved by their rates, each with a [Rows base × rate] window (all windows span
the same time; base 100 by default). A shared attribute is what lets the workloads produce
results at these selectivities (six independent attributes, one per pair, gave none: a 4-way
result then needs W³·s⁶ ≥ 1, windows of ~40,000 tuples) and gives a cache's key locality: a
segment's key is a value of a, which repeats within a window. Plans: M (MJoin, A-Greedy
orders, no caches), X (an XJoin-like left-deep tree ((A⋈B)⋈C)⋈D expressed as a fixed full cache
set: C's pipeline caches A⋈B and D's caches A⋈B⋈C, the pair A, B with the lowest selectivity
first), P (A-Caching: caches chosen by the re-optimizer; globally consistent candidates join its
list when the prefix-invariant ones are fewer than m = 6). Metric: input tuples per CPU second, profiling and re-optimization included;
`rows` the join's result rows (the reconstruction check), `prof%` / `cache%` the share of P's CPU
time spent profiling candidates and doing cache work; `X saves` / `X costs`: per join call, in CPU
microseconds, the segment steps X's caches save (their measured step times at the measured hit
rate) against the caches' own measured work (lookup, hits, merges, maintenance, entry creation).

Fig 5.22 — a 3-way join R(a) ⋈ S(a, b) ⋈ T(b) (T's multiplicity r = 5); half way R bursts to 20×
its rate. Throughput per slice of the input, P against M (thesis: no pause in P's throughput
when the burst starts; it switches cache within the re-optimization interval).

Costly probes — the thesis' regime of Figs 5.19/5.20 (an unindexed, nested-loop segment), with a
forced cache F beside M and P; and F against MF (no cache, same orders) at several push sizes.

Fig 5.23 — D8 with the cache memory varied: P against M (flat: it cannot use memory) and X,
which needs all of its subresults in memory (infeasible below that; thesis: below 25.6 KB).

Shared caches (§5.5.4) — R band-joins S, T and U join S on b: T's and U's caches over R ⋈ S are
one store. MF (no cache) against FT / FU (one pipeline's cache) and FS (both, shared), and P,
at each push size of --pushes.

Globally consistent caches (§5.7) — the shape of Ex 5.7.1: V's pipeline caches (T⋈U)⋉S, T⋈U
alone failing the prefix invariant. MF against G (forced) and P.

Trees of joins (§5.3) — the same 4-way join as one MJoin (M, X, P), as an XJoin of binary joins
over views and as a tree of MJoins, on a workload where the tree's intermediate pays and one
where it does not (bench/acaching_tree.py).

    python -m bench.acaching [--tuples 6000] [--push 20] [--base 100] [--repeat 3] [--pushes 20 100 400]
        [--d-pushes 20 100 400] [--only fig_5_21 costly costly_push fig_5_21_push fig_5_22 fig_5_23
        shared consistent tree] [--backoff N] [--json F]

(the costly sweep and the shared and globally consistent cases run at each of --pushes; the D1–D8
sweep, fig_5_21_push, at each of --d-pushes, none by default)
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

from cqlstream.engine.adaptive.cache_config import CachingConfig
from cqlstream.engine.adaptive.config import AdaptiveConfig
from cqlstream.engine.dsms import Dsms
from cqlstream.engine.operators.join import JoinOp

NAMES = "RSTU"
PAIRS = [("R", "S"), ("R", "T"), ("R", "U"), ("S", "T"), ("S", "U"), ("T", "U")]
# Table 5.2: rates relative to T, then selectivities of R⋈S, R⋈T, R⋈U, S⋈T, S⋈U, T⋈U
WORKLOADS: dict[str, tuple[list[float], list[float]]] = {
    "D1": ([10, 1, 1, 1], [0.004, 0.005, 0.005, 0.007, 0.0045, 0.005]),
    "D2": ([8, 1, 1, 8], [0.004, 0.005, 0.005, 0.007, 0.0045, 0.005]),
    "D3": ([10, 15, 1, 5], [0.003, 0.005, 0.007, 0.0045, 0.006, 0.008]),
    "D4": ([1, 1, 1, 1], [0.003, 0.004, 0.0067, 0.002, 0.0023, 0.0027]),
    "D5": ([4, 1, 1, 4], [0.005, 0.007, 0.005, 0.006, 0.005, 0.002]),
    "D6": ([1, 1, 1, 1], [0.005, 0.0033, 0.0025, 0.0067, 0.005, 0.0075]),
    "D7": ([1, 1, 1, 1], [0, 0, 0, 0, 0, 0]),
    "D8": ([1, 1, 1, 1], [0.001, 0.001, 0.001, 0.001, 0.001, 0.001]),
}
# Fig 5.21 as read from the thesis: which plans beat M, in words (no absolute numbers in the digest)
THESIS_521 = "X, P, G beat M almost always; X > P at D1–D3; G ≥ X at D2, D3, D4, D7"
ADAPTIVE = AdaptiveConfig()  # A-Greedy orders (default settings)


BACKOFF: int | None = None  # --backoff: A-Caching's back-off cap (None: the default)


def caching(memory: int = 1 << 20, on: bool = True) -> CachingConfig:
    # the thesis' experiments: I = 2 s; a tuple interval too, so short runs re-optimize
    c = CachingConfig(enabled=on, memory=memory, interval_tuples=2000, distinct_window=256, window=4)
    return c if BACKOFF is None else replace(c, backoff=BACKOFF)


# ------------------------------------------------------------------ D1–D8


def domains(sels: list[float]) -> list[int]:
    """Each stream's domain d_X for its join attribute, X.a uniform over [0, d_X): two streams
    then join with selectivity 1 / max(d_X, d_Y). Table 5.2's six pair selectivities are fitted
    by four domains (least squares of the log ratio over the candidates round(1/s)); all
    selectivities 0 (D7): disjoint ranges, [0, 0) marked by 0."""
    if not any(sels):
        return [0] * 4
    pos = {n: k for k, n in enumerate(NAMES)}
    cands = sorted({round(1 / s) for s in sels if s > 0})
    best: tuple[float, tuple[int, ...]] | None = None
    for ds in itertools.product(cands, repeat=4):
        err = sum(np.log(max(ds[pos[a]], ds[pos[b]]) * s) ** 2 for (a, b), s in zip(PAIRS, sels) if s > 0)
        if best is None or err < best[0]:
            best = (float(err), ds)
    assert best is not None
    return list(best[1])


def fitted(sels: list[float]) -> list[float]:
    """The pair selectivities the fitted domains give (printed beside Table 5.2's)."""
    d = domains(sels)
    pos = {n: k for k, n in enumerate(NAMES)}
    return [0.0 if not d[0] else 1 / max(d[pos[a]], d[pos[b]]) for a, b in PAIRS]


def query4(base: int, rates: list[float]) -> str:
    fr = ", ".join(f"{n} [Rows {max(int(base * r), 1)}] as {n.lower()}" for n, r in zip(NAMES, rates))
    where = " and ".join(f"{a.lower()}.a = {b.lower()}.a" for a, b in PAIRS)
    return f"select * from {fr} where {where}"


def generate4(tuples: int, rates: list[float], sels: list[float], seed: int = 7) -> list[tuple[str, np.ndarray]]:
    """The interleaved input: (stream, rows) per stream tuple, in arrival order."""
    rng = np.random.default_rng(seed)
    p = np.array(rates, float) / sum(rates)
    who = rng.choice(4, size=tuples, p=p)
    d = domains(sels)
    if not d[0]:  # selectivity 0: each stream its own range of 100 values
        vals = [rng.integers(0, 100, tuples) + 100 * k for k in range(4)]
    else:
        vals = [rng.integers(0, dk, tuples) for dk in d]
    return [(NAMES[w], np.array([vals[w][k]], np.int64)) for k, w in enumerate(who)]


def xjoin_plan(sels: list[float]) -> tuple[list[list[int]], list[tuple[int, int]]]:
    """Probe orders and forced caches of a left-deep XJoin ((A⋈B)⋈C)⋈D: A, B the pair of lowest
    selectivity, C the input joining them most selectively. C caches A⋈B, D caches A⋈B⋈C."""
    pos = {n: k for k, n in enumerate(NAMES)}
    sel = {frozenset(p): s for p, s in zip(PAIRS, sels)}
    a, b = min(PAIRS, key=lambda p: sel[frozenset(p)])
    rest = [n for n in NAMES if n not in (a, b)]
    c = min(rest, key=lambda n: sel[frozenset((a, n))] * sel[frozenset((b, n))])
    (d,) = [n for n in rest if n != c]
    A, B, C, D = (pos[x] for x in (a, b, c, d))
    orders = [[0] * 3 for _ in range(4)]
    orders[A] = [B, C, D]
    orders[B] = [A, C, D]
    orders[C] = [A, B, D]
    orders[D] = [A, B, C]
    return orders, [(C, 2), (D, 3)]


def run(
    events: list[tuple[str, np.ndarray]],
    q: str,
    ddl: list[str],
    push: int,
    cache: CachingConfig,
    fixed: tuple[list[list[int]], list[tuple[int, ...]]] | None = None,
    slices: int = 1,
) -> dict[str, Any]:
    adaptive = AdaptiveConfig(policy="a-greedy", probability=1e-9) if fixed else ADAPTIVE

    d = Dsms(adaptive=replace(adaptive, caching=cache), sys_stream=False)
    for stmt in ddl:
        d.execute(stmt)
    h = d.register_query(q)
    sub = d.subscribe(h.id)
    # the query's top join (a tree of joins, from views, has its lower joins first)
    *lower, op = [o for o in d.plan.operators if isinstance(o, JoinOp)]
    if fixed is not None:
        op.set_knob("probe_orders", fixed[0])
        for i, s, *partners in fixed[1]:  # (pipeline, prefix length[, Y's windows...])
            op.caching.force(i, s, partners=partners)
    rows = 0
    per_slice: list[float] = []
    cut = max(len(events) // slices, 1)
    ts = 0
    t_all = 0.0
    t_slice = 0.0
    k = 0
    while k < len(events):
        group = events[k : k + push]
        by: dict[str, list[np.ndarray]] = {}
        for n, r in group:
            by.setdefault(n, []).append(r)
        t0 = time.process_time()
        for n, rs in by.items():
            d.push(n, [tuple(int(x) for x in r) for r in rs], ts=[ts] * len(rs))
        d.run()
        rows += sum(len(b) for b in [sub.poll()])
        dt = time.process_time() - t0
        t_all += dt
        t_slice += dt
        ts += 1
        k += len(group)
        if slices > 1 and (k // cut) > len(per_slice) and len(per_slice) < slices:
            per_slice.append(cut / max(t_slice, 1e-9))
            t_slice = 0.0
    st = op.caching.statistics()
    used = [c for c in st["candidates"] if c["state"] == "used"]
    below = [
        f"{o.eid}:{c['pipeline']}:{c['segment']}"
        for o in lower
        for c in o.caching.statistics()["candidates"]
        if c["state"] == "used"
    ]
    return {
        "throughput": len(events) / max(t_all, 1e-9),
        "rows": rows,
        "slices": per_slice,
        "caches_used": [
            f"{c['pipeline']}:{c['segment']}" + (f"⋉{c['partners']}" if c["partners"] else "") for c in used
        ]
        + below,
        "shared_by": sorted({tuple(c["shared_by"]) for c in used if len(c["shared_by"]) > 1}),
        "estimates": {
            f"{c['pipeline']}:{c['segment']}" + (f"⋉{c['partners']}" if c["partners"] else ""): (
                c["benefit"],
                c["cost"],
            )
            for c in st["candidates"]
        },
        "hit_rate": sum(c["hits"] for c in used) / max(sum(c["probes"] for c in used), 1),
        # per join call, in CPU seconds: the segment steps the used caches save (their measured
        # step times at the measured hit rate) and the caches' own measured work
        "saved_per_call": sum(c["benefit"] for c in used),
        "work_per_call": sum(c["work_seconds_per_call"] or 0.0 for c in used),
        "calls": op.caching.join_calls,
        "cache_bytes": st["memory_used"],
        "selections": st["selections"],
        "profile_seconds": st["profile_seconds"],
        "cache_seconds": st["cache_seconds"],
        "cpu_seconds": t_all,
        "reorders": op.adaptive.reorders,
        "orders": [list(o) for o in op.probe_orders],
    }


def ddl4() -> list[str]:
    return [f"register stream {n} (a int)" for n in NAMES]


def best(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The run of highest throughput (the least disturbed by other processes on the machine)."""
    return max(runs, key=lambda r: r["throughput"])


def fig_521(tuples: int, push: int, base: int, repeat: int = 1) -> dict[str, Any]:
    out: dict[str, Any] = {}
    print(
        "Fig 5.21: 4-way join on a shared attribute, input tuples per CPU second (M: MJoin, X: XJoin as fixed caches, P: A-Caching)"
    )
    print(f"  thesis: {THESIS_521}; up to +90 % for caching over MJoin (§5.8.2)")
    print("  reconstruction: domains d_R d_S d_T d_U and the pair selectivities they give (Table 5.2's)")
    for name, (_rates, sels) in WORKLOADS.items():
        got = " ".join(f"{f:.4f}({s:g})" for f, s in zip(fitted(sels), sels))
        print(f"    {name}: d = {domains(sels)}  {got}")
    print(
        f"  {'pt':<4}{'M':>10}{'X':>10}{'P':>10}{'P/M':>7}{'X/M':>7}{'rows':>8}{'prof%':>7}{'cache%':>7}"
        f"{'X saves':>9}{'X costs':>9}  P's caches (hit rate)"
    )
    for name, (rates, sels) in WORKLOADS.items():
        ev = generate4(tuples, rates, sels)
        q = query4(base, rates)
        ms, xs, ps = [], [], []
        for _ in range(repeat):  # alternating, best of `repeat` each
            ms.append(run(ev, q, ddl4(), push, caching(on=False)))
            xs.append(run(ev, q, ddl4(), push, caching(), fixed=xjoin_plan(sels)))
            ps.append(run(ev, q, ddl4(), push, caching()))
        m, x, p = best(ms), best(xs), best(ps)
        assert m["rows"] == x["rows"] == p["rows"], "plans disagree"
        out[name] = {"M": m, "X": x, "P": p}
        print(
            f"  {name:<4}{m['throughput']:>10.0f}{x['throughput']:>10.0f}{p['throughput']:>10.0f}"
            f"{p['throughput'] / m['throughput']:>7.2f}{x['throughput'] / m['throughput']:>7.2f}{m['rows']:>8}"
            f"{100 * p['profile_seconds'] / p['cpu_seconds']:>7.1f}{100 * p['cache_seconds'] / p['cpu_seconds']:>7.1f}"
            f"{1e6 * x['saved_per_call']:>9.0f}{1e6 * x['work_per_call']:>9.0f}  "
            f"{', '.join(p['caches_used']) or 'none'} ({p['hit_rate']:.2f})"
        )
    return out


# ------------------------------------------------------------------ costly probes (Figs 5.19/5.20)


COSTLY_ORDERS = [[1, 2], [0, 2], [1, 0]]  # S's pipeline probes R first, T's probes S then R (F's cache)
COSTLY_DDL = ["register stream R (a int)", "register stream S (a int, b int)", "register stream T (b int)"]


def costly_input(
    tuples: int, window: int = 1000, dom: int = 200
) -> tuple[list[tuple[str, np.ndarray]], str, list[str]]:
    """The costly-probe workload: events, query and DDL (see `fig_costly`)."""
    rng = np.random.default_rng(5)
    q = (
        f"select * from R [Rows {window}] as r, S [Rows {window}] as s, T [Rows {5 * window}] as t "
        "where s.b = t.b and r.a >= s.a - 1 and r.a <= s.a + 1"
    )
    who = rng.choice(3, size=tuples, p=np.array([1.0, 1.0, 5.0]) / 7.0)
    events: list[tuple[str, np.ndarray]] = []
    for w in who:
        if w == 0:
            events.append(("R", np.array([rng.integers(0, dom)])))
        elif w == 1:
            events.append(("S", np.array([rng.integers(0, dom), rng.integers(0, dom)])))
        else:
            events.append(("T", np.array([rng.integers(0, dom)])))
    return events, q, COSTLY_DDL


MIN_CALLS = 100  # runs against the push size take at least this many join calls (P must learn)


def fig_costly_push(tuples: int, pushes: list[int], repeat: int = 1) -> dict[str, Any]:
    """The costly-probe workload at several push sizes: M (A-Greedy orders, no caches), P
    (A-Caching's own choice), F (T's pipeline caching S ⋈ R, forced) and MF (F's orders, no
    cache). A cache's per-call work is mostly fixed while the nested-loop probe it saves grows
    with the rows per call, so the gain appears with the push size; each run takes at least
    MIN_CALLS join calls (P profiles one call in four before it chooses). `saves` / `costs`:
    P's (else F's) cache, the time model's estimate of the step time it saves per join call and
    its measured work."""
    print(
        "Costly probes against the push size: tuples per CPU second (M: MJoin, P: A-Caching, F: forced cache, MF: F's orders)"
    )
    print("  thesis (tuple at a time): up to +90 % for a cache over a costly segment (Figs 5.19/5.20)")
    print(
        f"  {'push':>6}{'tuples':>8}{'M':>9}{'P':>9}{'MF':>9}{'F':>9}{'P/M':>6}{'F/MF':>6}{'P hit':>6}"
        f"{'saves us':>10}{'costs us':>10}  P's caches"
    )
    out: dict[str, Any] = {}
    for push in pushes:
        n = max(tuples, MIN_CALLS * push)
        events, q, ddl = costly_input(n)
        ms, ps, mfs, fs = [], [], [], []
        for _ in range(repeat):
            ms.append(run(events, q, ddl, push, caching(on=False)))
            ps.append(run(events, q, ddl, push, caching()))
            mfs.append(run(events, q, ddl, push, caching(on=False), fixed=(COSTLY_ORDERS, [])))
            fs.append(run(events, q, ddl, push, caching(), fixed=(COSTLY_ORDERS, [(2, 2)])))
        m, p, mf, f = best(ms), best(ps), best(mfs), best(fs)
        assert m["rows"] == p["rows"] == mf["rows"] == f["rows"]
        out[push] = {"M": m, "P": p, "MF": mf, "F": f}
        est = p if p["caches_used"] else f
        print(
            f"  {push:>6}{n:>8}{m['throughput']:>9.0f}{p['throughput']:>9.0f}{mf['throughput']:>9.0f}{f['throughput']:>9.0f}"
            f"{p['throughput'] / m['throughput']:>6.2f}{f['throughput'] / mf['throughput']:>6.2f}{p['hit_rate']:>6.2f}"
            f"{1e6 * est['saved_per_call']:>10.0f}{1e6 * est['work_per_call']:>10.0f}  {', '.join(p['caches_used']) or 'none'}"
        )
    return out


def fig_521_push(tuples: int, pushes: list[int], base: int, repeat: int = 1) -> dict[str, Any]:
    """P/M and X/M on D1–D8 against the push size (each run at least MIN_CALLS join calls): where
    caches do not pay, P must stay at M (its time model declines them), not below."""
    print("Fig 5.21 against the push size: P/M and X/M (input tuples per CPU second), P's caches")
    print(f"  thesis: {THESIS_521}; up to +90 % for caching over MJoin (§5.8.2)")
    out: dict[str, Any] = {}
    for push in pushes:
        n = max(tuples, MIN_CALLS * push)
        cells = []
        for name, (rates, sels) in WORKLOADS.items():
            ev = generate4(n, rates, sels)
            q = query4(base, rates)
            ms, xs, ps = [], [], []
            for _ in range(repeat):
                ms.append(run(ev, q, ddl4(), push, caching(on=False)))
                xs.append(run(ev, q, ddl4(), push, caching(), fixed=xjoin_plan(sels)))
                ps.append(run(ev, q, ddl4(), push, caching()))
            m, x, p = best(ms), best(xs), best(ps)
            assert m["rows"] == x["rows"] == p["rows"], "plans disagree"
            out[f"{name}@{push}"] = {"M": m, "X": x, "P": p}
            cells.append(
                f"{name} {p['throughput'] / m['throughput']:.2f}/{x['throughput'] / m['throughput']:.2f}"
                + (f" [{', '.join(p['caches_used'])}]" if p["caches_used"] else "")
            )
        print(f"  push {push:>4} ({n} tuples), P/M / X/M: " + "  ".join(cells))
    return out


def fig_costly(tuples: int, push: int, window: int = 1000, dom: int = 200, repeat: int = 1) -> dict[str, Any]:
    """The thesis' regime where probes are costly: R ⋈ S ⋈ T with S.b = T.b and R joining S by a
    band (|R.a − S.a| ≤ 1) that no index serves, so every probe of R is a nested loop over its
    window (the thesis drops the hash index on S.B, Figs 5.19/5.20); T at 5× the rate of R and S
    over a key domain of `dom` values, so T's keys repeat within the windows. M: no caches; F: T's
    pipeline caches S ⋈ R (forced); P: A-Caching's own choice; PF: A-Caching's own choice under
    F's fixed orders (A-Greedy's orders break the prefix invariant of F's cache); MF: F's fixed
    orders without caches, F's fair baseline (M pays for A-Greedy's profiling, F and MF do not)."""
    events, q, ddl = costly_input(tuples, window, dom)
    orders = COSTLY_ORDERS
    ms, fs, ps, pfs, mfs = [], [], [], [], []
    for _ in range(repeat):
        ms.append(run(events, q, ddl, push, caching(on=False)))
        mfs.append(run(events, q, ddl, push, caching(on=False), fixed=(orders, [])))
        fs.append(run(events, q, ddl, push, caching(), fixed=(orders, [(2, 2)])))
        ps.append(run(events, q, ddl, push, caching()))
        pfs.append(run(events, q, ddl, push, caching(), fixed=(orders, [])))
    m, f, p, pf, mf = best(ms), best(fs), best(ps), best(pfs), best(mfs)
    assert m["rows"] == f["rows"] == p["rows"] == pf["rows"] == mf["rows"]
    print(f"Costly probes (thesis Figs 5.19/5.20, a nested-loop segment): windows {window}, T keys over {dom} values")
    print("  thesis: the gain of a cache grows with the cost of the join it saves, up to +90 %")
    for name, r in (("M", m), ("MF", mf), ("F", f), ("P", p), ("PF", pf)):
        share = 100 * r["cache_seconds"] / max(r["cpu_seconds"], 1e-9)
        print(
            f"  {name:<2}: {r['throughput']:>8.0f} tuples/s ({r['throughput'] / m['throughput']:.2f}x M, "
            f"{r['throughput'] / mf['throughput']:.2f}x MF), "
            f"caches {', '.join(r['caches_used']) or 'none'}, hit rate {r['hit_rate']:.2f}, cache work {share:.0f} % of CPU"
            f", {r['selections']} selections"
            + (
                f", per call saves {1e6 * r['saved_per_call']:.0f} us, costs {1e6 * r['work_per_call']:.0f} us"
                if r["caches_used"]
                else ""
            )
        )
    print(f"  result rows: {m['rows']}")
    print(f"  M's probe orders at the end: {m['orders']} ({m['reorders']} re-orderings); MF's: {orders}")
    return {"M": m, "MF": mf, "F": f, "P": p, "PF": pf}


# ------------------------------------------------------------------ shared and globally consistent caches

SHARED_DDL = [
    "register stream R (a int)",
    "register stream S (a int, b int)",
    "register stream T (b int)",
    "register stream U (b int)",
]
# R's pipeline probes S first, S's R first (R⋈S holds the prefix invariant); T's and U's both
# start with S, R: their caches over R⋈S, keyed on s.b, are one (thesis Def 5.5.1)
SHARED_ORDERS = [[1, 2, 3], [0, 2, 3], [1, 0, 3], [1, 0, 2]]


def shared_input(tuples: int, window: int, dom: int) -> tuple[list[tuple[str, np.ndarray]], str]:
    """R(a) band-joins S(a, b) (|r.a − s.a| ≤ 1: a nested loop no index serves, the costly
    segment), T(b) and U(b) join S on b; R, S, T, U at rates 1 : 1 : 2.5 : 2.5, T's and U's keys over
    `dom` values too (they repeat: a cache's locality)."""
    rng = np.random.default_rng(11)
    q = (
        f"select * from R [Rows {window}] as r, S [Rows {window}] as s, T [Rows {window}] as t, "
        f"U [Rows {window}] as u where r.a >= s.a - 1 and r.a <= s.a + 1 and s.b = t.b and s.b = u.b"
    )
    who = rng.choice(4, size=tuples, p=np.array([1.0, 1.0, 2.5, 2.5]) / 7.0)
    events: list[tuple[str, np.ndarray]] = []
    for w in who:
        if w == 0:
            events.append(("R", np.array([rng.integers(0, dom)])))
        elif w == 1:
            events.append(("S", np.array([rng.integers(0, dom), rng.integers(0, dom)])))
        else:
            events.append(("TU"[w - 2], np.array([rng.integers(0, dom)])))
    return events, q


def forced_only(memory: int = 1 << 20) -> CachingConfig:
    """Caching on with no re-optimization in the run: exactly the forced caches are used."""
    return CachingConfig(enabled=True, memory=memory, interval_seconds=0, interval_tuples=10**12, window=10**6)


def best_of_fixed(
    plans: dict[str, tuple[Any, list]],
    events: list,
    q: str,
    ddl: list[str],
    push: int,
    orders: list[list[int]],
    repeat: int,
) -> dict[str, dict[str, Any]]:
    """Each plan (name: (caching config, forced caches)) run under the fixed probe `orders`,
    alternating, best of `repeat`; all plans must give the same result rows."""
    got: dict[str, list[dict[str, Any]]] = {k: [] for k in plans}
    for _ in range(repeat):
        for name, (cfg, forced) in plans.items():
            got[name].append(run(events, q, ddl, push, cfg, fixed=(orders, forced)))
    res = {k: best(v) for k, v in got.items()}
    assert len({r["rows"] for r in res.values()}) == 1, "plans disagree"
    return res


def fig_shared(tuples: int, push: int, window: int = 1000, dom: int = 200, repeat: int = 1) -> dict[str, Any]:
    """Shared caches (thesis §5.5.4): T's and U's pipelines each may cache the costly R⋈S segment
    under the key s.b; the two candidates are one store. MF: these orders without caches; FT /
    FU: one pipeline's cache alone; FS: both, sharing the store (maintained once, probed by
    both); P: the re-optimizer's choice under these orders (time model). P's estimates: each
    candidate's benefit and cost in CPU seconds per join call as the re-optimizer saw them last;
    a shared cache is chosen when the benefits summed beat the cost paid once."""
    events, q = shared_input(tuples, window, dom)
    plans = {
        "MF": (caching(on=False), []),
        "FT": (forced_only(), [(2, 2)]),
        "FU": (forced_only(), [(3, 2)]),
        "FS": (forced_only(), [(2, 2), (3, 2)]),
        "P": (caching(), []),
    }
    res = best_of_fixed(plans, events, q, SHARED_DDL, push, SHARED_ORDERS, repeat)
    mf = res["MF"]
    print(f"Shared caches (thesis §5.5.4): R band-join S, T and U on s.b; windows {window}, push {push}")
    print("  thesis: a shared cache's benefits add up, its cost is paid once (no figure for sharing)")
    for name, r in res.items():
        print(
            f"  {name:<2}: {r['throughput']:>8.0f} tuples/s ({r['throughput'] / mf['throughput']:.2f}x MF), "
            f"caches {', '.join(r['caches_used']) or 'none'}"
            + (f" shared by pipelines {list(r['shared_by'][0])}" if r["shared_by"] else "")
            + f", hit rate {r['hit_rate']:.2f}"
        )
    est = res["P"]["estimates"]
    for name in ("2:[1, 0]", "3:[1, 0]"):
        if name in est:
            b, c = est[name]
            print(
                f"  P's estimate for {name}: benefit {1e6 * b:.0f} us, cost {1e6 * c:.0f} us per call (net alone {1e6 * (b - c):+.0f})"
            )
    if "2:[1, 0]" in est and "3:[1, 0]" in est:
        b = est["2:[1, 0]"][0] + est["3:[1, 0]"][0]
        c = max(est["2:[1, 0]"][1], est["3:[1, 0]"][1])
        print(f"  shared: benefit {1e6 * b:.0f} us summed, cost {1e6 * c:.0f} us once (net {1e6 * (b - c):+.0f})")
    print(f"  result rows: {mf['rows']}")
    return res


CONSISTENT_ORDERS = [[1, 2, 3], [0, 2, 3], [1, 0, 3], [1, 2, 0]]


def consistent_input(tuples: int, window: int, dom: int) -> tuple[list[tuple[str, np.ndarray]], str]:
    """S, T, U, V: T band-joins U (|t.a − u.a| ≤ 1: a nested loop, the costly segment), S and V
    join T on a; V (the probing stream of the cached pipeline) at 2.5× the others' rate."""
    rng = np.random.default_rng(12)
    q = (
        f"select * from S [Rows {window}] as s, T [Rows {window}] as t, U [Rows {window}] as u, "
        f"V [Rows {window}] as v where s.a = t.a and u.a >= t.a - 1 and u.a <= t.a + 1 and t.a = v.a"
    )
    who = rng.choice(4, size=tuples, p=np.array([1.0, 1.0, 1.0, 2.5]) / 5.5)
    events = [("STUV"[w], np.array([rng.integers(0, dom)])) for w in who]
    return events, q


def fig_consistent(tuples: int, push: int, window: int = 1000, dom: int = 200, repeat: int = 1) -> dict[str, Any]:
    """A globally consistent cache (thesis §5.7, the shape of Ex 5.7.1): V's pipeline probes T, U,
    then S; {T, U} fails the prefix invariant (T's pipeline starts with S) so no plain cache over
    T⋈U exists, but {S, T, U} holds it: V's pipeline caches (T⋈U)⋉S, maintained from S's, T's and
    U's pipelines. MF: these orders, no cache; G: that cache forced; P: the re-optimizer's choice
    under these orders with m = 8 (room for globally consistent candidates)."""

    events, q = consistent_input(tuples, window, dom)
    ddl = [f"register stream {n} (a int)" for n in "STUV"]
    plans = {
        "MF": (caching(on=False), []),
        "G": (forced_only(), [(3, 2, 0)]),
        "P": (replace(caching(), candidates_cap=8), []),
    }
    res = best_of_fixed(plans, events, q, ddl, push, CONSISTENT_ORDERS, repeat)
    mf = res["MF"]
    print(f"Globally consistent caches (thesis §5.7): V's pipeline caching (T⋈U)⋉S; windows {window}, push {push}")
    print("  thesis: G almost always as good as the best XJoin, better than P where the prefix invariant")
    print("  fails for a high-benefit cache (Fig 5.21 D1-D3); no figure for this query")
    for name, r in res.items():
        print(
            f"  {name:<2}: {r['throughput']:>8.0f} tuples/s ({r['throughput'] / mf['throughput']:.2f}x MF), "
            f"caches {', '.join(r['caches_used']) or 'none'}, hit rate {r['hit_rate']:.2f}"
        )
    print(f"  result rows: {mf['rows']}")
    return res


# ------------------------------------------------------------------ Fig 5.22: a 20× burst


def fig_522(tuples: int, push: int, base: int, slices: int = 10) -> dict[str, Any]:
    rng = np.random.default_rng(3)
    dom = 200
    ddl = ["register stream R (a int)", "register stream S (a int, b int)", "register stream T (b int)"]
    q = f"select * from R [Rows {base}] as r, S [Rows {base}] as s, T [Rows {5 * base}] as t where r.a = s.a and s.b = t.b"
    events: list[tuple[str, np.ndarray]] = []
    half = tuples // 2
    for k in range(tuples):
        rate_r = 20.0 if k >= half else 1.0
        w = rng.choice(3, p=np.array([rate_r, 1.0, 5.0]) / (rate_r + 6.0))
        if w == 0:
            events.append(("R", np.array([rng.integers(0, dom)])))
        elif w == 1:
            events.append(("S", np.array([rng.integers(0, dom), rng.integers(0, dom)])))
        else:
            events.append(("T", np.array([rng.integers(0, dom // 5)])))
    m = run(events, q, ddl, push, caching(on=False), slices=slices)
    p = run(events, q, ddl, push, caching(), slices=slices)
    assert m["rows"] == p["rows"]
    print("Fig 5.22: 3-way join, R bursts to 20x half way; input tuples per CPU second per tenth of the input")
    print("  thesis: A-Caching converges to T⋈(R⋈S) at ≈ MJoin's throughput, then switches caches at the")
    print("  burst with no significant pause")
    print("  M: " + " ".join(f"{v:>7.0f}" for v in m["slices"]))
    print("  P: " + " ".join(f"{v:>7.0f}" for v in p["slices"]))
    print(f"  P's caches at the end: {', '.join(p['caches_used']) or 'none'} ({p['selections']} selections)")
    return {"M": m, "P": p}


# ------------------------------------------------------------------ Fig 5.23: memory


def fig_523(tuples: int, push: int, base: int) -> dict[str, Any]:
    rates, sels = WORKLOADS["D8"]
    ev = generate4(tuples, rates, sels)
    q = query4(base, rates)
    m = run(ev, q, ddl4(), push, caching(on=False))
    big = run(ev, q, ddl4(), push, caching(memory=1 << 24), fixed=xjoin_plan(sels))
    need = big["cache_bytes"]
    out: dict[str, Any] = {"M": m, "X_needs_bytes": need, "points": {}}
    print("Fig 5.23: D8, input tuples per CPU second against cache memory")
    print("  thesis: caching degrades smoothly as memory shrinks, MJoin is flat, XJoin infeasible below 25.6 KB")
    print(f"  X's subresults need {need / 1024:.1f} KB (measured with unlimited memory)")
    print(f"  {'memory':>9}{'M':>10}{'X':>12}{'P':>10}")
    for mem in (1 << 10, 4 << 10, 16 << 10, 64 << 10, 256 << 10):
        p = run(ev, q, ddl4(), push, caching(memory=mem))
        x = big["throughput"] if mem >= need else None
        out["points"][mem] = {"P": p["throughput"], "X": x}
        xs = f"{x:>12.0f}" if x is not None else f"{'infeasible':>12}"
        print(f"  {mem // 1024:>7}KB{m['throughput']:>10.0f}{xs}{p['throughput']:>10.0f}")
    return out


def _fig_tree(tuples: int, push: int, repeat: int) -> dict[str, Any]:
    from bench.acaching_tree import fig_tree  # it builds on this module's run()

    return fig_tree(tuples, push, repeat)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tuples", type=int, default=6000, help="input tuples per run")
    ap.add_argument("--push", type=int, default=20, help="tuples per push (one instant each)")
    ap.add_argument("--base", type=int, default=100, help="window rows per unit of relative rate")
    ap.add_argument("--repeat", type=int, default=3, help="runs per plan in Fig 5.21 and the costly case (best kept)")
    ap.add_argument(
        "--pushes", type=int, nargs="+", default=[20, 100, 400], help="push sizes of the costly-probe sweep"
    )
    ap.add_argument(
        "--d-pushes", type=int, nargs="*", default=[], help="push sizes of a D1–D8 sweep (P/M, X/M; none by default)"
    )
    ap.add_argument("--backoff", type=int, help="A-Caching's back-off cap (1: none; default: the engine's)")
    ap.add_argument("--json", help="write the figures to this file")
    figs = {
        "fig_5_21": lambda a: fig_521(a.tuples, a.push, a.base, a.repeat),
        "costly": lambda a: fig_costly(a.tuples, a.push, repeat=a.repeat),
        "costly_push": lambda a: fig_costly_push(a.tuples, a.pushes, repeat=a.repeat),
        "fig_5_21_push": lambda a: fig_521_push(a.tuples, a.d_pushes, a.base, a.repeat),
        "fig_5_22": lambda a: fig_522(a.tuples, a.push, a.base),
        "fig_5_23": lambda a: fig_523(a.tuples, a.push, a.base),
        "shared": lambda a: {p: fig_shared(a.tuples, p, repeat=a.repeat) for p in a.pushes},
        "consistent": lambda a: {p: fig_consistent(a.tuples, p, repeat=a.repeat) for p in a.pushes},
        "tree": lambda a: _fig_tree(a.tuples, a.push, a.repeat),
    }
    ap.add_argument("--only", nargs="+", choices=sorted(figs), help="run only these figures (default: all)")
    a = ap.parse_args(argv)
    global BACKOFF
    BACKOFF = a.backoff
    only = a.only or [k for k in figs if k != "fig_5_21_push" or a.d_pushes]
    res = {name: f(a) for name, f in figs.items() if name in only}
    if a.json:
        with open(a.json, "w") as f:
            json.dump(res, f, indent=1, default=str)
    return 0


if __name__ == "__main__":
    sys.exit(main())
