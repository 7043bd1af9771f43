"""Trees of joins (thesis §5.3, Fig 5.6) beside the single MJoin, for `python -m bench.acaching
--only tree`. The thesis has no measured figure for trees: it argues that an XJoin (a tree of
binary joins, every intermediate result materialized) and an MJoin (none) are the two ends of a
spectrum, that a tree of MJoins is a fixed point between them, and that caches in one MJoin
reach every point of it with cheap switching.

The same 4-way join R ⋈ S ⋈ T ⋈ U on one attribute a, five plans:

- M: one MJoin, A-Greedy probe orders, no caches;
- X: that MJoin with the XJoin-like fixed cache set (T's pipeline caches R ⋈ S, U's R ⋈ S ⋈ T);
- P: that MJoin with A-Caching;
- XT: an XJoin, i.e. a left-deep tree of binary joins written as views: RS = R ⋈ S,
  RST = RS ⋈ T, the query RST ⋈ U; each intermediate is a relation, its tuples deleted when a
  component leaves its window;
- TP: a tree of MJoins, RS = R ⋈ S read by RS ⋈ T ⋈ U, with A-Caching in the upper MJoin.

Two workloads: `pays`, R and S slow and joined by a band (|r.a − s.a| ≤ 1: no index serves it,
each probe scans a window), T and U fast, so R ⋈ S is a small intermediate that T's and U's many
events probe by one hash lookup, where the MJoin runs the band's scan for each of them; and
`costs`, R and S fast with many matches between them and T, U slow, so R ⋈ S is large and
changes with every R and S event (inserts, and deletes on expiry), all of it work that M
never does.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from bench import acaching as B

# per workload: (relative rates of R, S, T, U), (domains of a), (window rows), R ⋈ S a band
# (|r.a − s.a| ≤ 1, a nested-loop step) or an equality
TREE_WORKLOADS: dict[str, tuple[list[float], list[int], list[int], bool]] = {
    "pays": ([1, 1, 10, 10], [100, 100, 100, 100], [200, 200, 100, 100], True),
    "costs": ([10, 10, 1, 1], [2, 2, 100, 100], [400, 400, 20, 20], False),
}
THESIS_TREE = (
    "no figure for trees (§5.3 is an argument): XJoin and MJoin are the ends of a spectrum, caches "
    "in an MJoin give every point of it and switch cheaply; a tree's shape is fixed when planned"
)


def tree_input(tuples: int, rates: list[float], doms: list[int], seed: int = 11) -> list[tuple[str, np.ndarray]]:
    rng = np.random.default_rng(seed)
    p = np.array(rates, float) / sum(rates)
    who = rng.choice(4, size=tuples, p=p)
    vals = [rng.integers(0, d, tuples) for d in doms]
    return [(B.NAMES[w], np.array([vals[w][k]], np.int64)) for k, w in enumerate(who)]


def tree_queries(windows: list[int], band: bool) -> dict[str, tuple[str, list[str]]]:
    """Plan name → (query, DDL): the single MJoin (M, X, P share it) and the two trees."""
    r, s, t, u = (f"{n} [Rows {w}] as {n.lower()}" for n, w in zip(B.NAMES, windows))
    rs_on = "r.a >= s.a - 1 and r.a <= s.a + 1" if band else "r.a = s.a"
    mjoin = f"select r.a, s.a, t.a, u.a from {r}, {s}, {t}, {u} where {rs_on} and r.a = t.a and r.a = u.a"
    rs = f"register view RS as select r.a as a, s.a as a2 from {r}, {s} where {rs_on}"
    rst = f"register view RST as select RS.a as a, RS.a2 as a2, t.a as a3 from RS, {t} where RS.a = t.a"
    xjoin = f"select RST.a, RST.a2, RST.a3, u.a from RST, {u} where RST.a = u.a"
    tmj = f"select RS.a, RS.a2, t.a, u.a from RS, {t}, {u} where RS.a = t.a and RS.a = u.a"
    return {"mjoin": (mjoin, B.ddl4()), "XT": (xjoin, [*B.ddl4(), rs, rst]), "TP": (tmj, [*B.ddl4(), rs])}


# X's fixed caches: R, S first (the XJoin's first intermediate), then T, then U
X_PLAN: tuple[list[list[int]], list[tuple[int, ...]]] = ([[1, 2, 3], [0, 2, 3], [0, 1, 3], [0, 1, 2]], [(2, 2), (3, 3)])


def fig_tree(tuples: int, push: int, repeat: int = 1) -> dict[str, Any]:
    print("Trees of joins (thesis §5.3): input tuples per CPU second, one MJoin against trees")
    print(f"  thesis: {THESIS_TREE}")
    print("  M: MJoin; X: MJoin + XJoin-like fixed caches; P: A-Caching; XT: XJoin (binary joins, views);")
    print("  TP: tree of MJoins (R⋈S as a view read by an MJoin with T, U; A-Caching on)")
    print(
        f"  {'load':<6}{'M':>9}{'X':>9}{'P':>9}{'XT':>9}{'TP':>9}{'X/M':>6}{'P/M':>6}{'XT/M':>6}{'TP/M':>6}"
        f"{'rows':>9}  P's / TP's caches"
    )
    out: dict[str, Any] = {}
    for name, (rates, doms, windows, band) in TREE_WORKLOADS.items():
        ev = tree_input(tuples, rates, doms)
        qs = tree_queries(windows, band)
        runs: dict[str, list[dict[str, Any]]] = {k: [] for k in ("M", "X", "P", "XT", "TP")}
        for _ in range(repeat):  # alternating, best of `repeat` each
            q, ddl = qs["mjoin"]
            runs["M"].append(B.run(ev, q, ddl, push, B.caching(on=False)))
            runs["X"].append(B.run(ev, q, ddl, push, B.caching(), fixed=X_PLAN))
            runs["P"].append(B.run(ev, q, ddl, push, B.caching()))
            runs["XT"].append(B.run(ev, *qs["XT"], push, B.caching(on=False)))
            runs["TP"].append(B.run(ev, *qs["TP"], push, B.caching()))
        got = {k: B.best(v) for k, v in runs.items()}
        rows = {g["rows"] for g in got.values()}
        assert len(rows) == 1, f"plans disagree: {rows}"
        out[name] = got
        m = got["M"]["throughput"]
        tp = ", ".join(got["P"]["caches_used"]) or "none"
        tt = ", ".join(got["TP"]["caches_used"]) or "none"
        print(
            f"  {name:<6}"
            + "".join(f"{got[k]['throughput']:>9.0f}" for k in ("M", "X", "P", "XT", "TP"))
            + "".join(f"{got[k]['throughput'] / m:>6.2f}" for k in ("X", "P", "XT", "TP"))
            + f"{got['M']['rows']:>9}  {tp} / {tt}"
        )
    return out
