"""Adaptive probe orders of an N-ary join (MJoin, thesis §5.2): A-Greedy over each pipeline's
*logical filters*.

Pipeline i (the events of input i probing the others) is a chain of joins. For the re-optimizer
each other input j is a filter F_j: the join along the path from i to j in a spanning tree of the
join graph (BFS from i, so a cyclic graph is treated as acyclic). F_j drops an event when that path
join is empty. A sampled event (probability p) is carried through every path (only the path, so
branches never multiply) and becomes a profile tuple of drop bits; the matrix view and the policy
are those of the conjunct orderer. Only whether a path join is empty matters, so before each step
the rows reached are cut to one per (sampled event, probe key), with their multiplicity kept for
the fan-out estimate: a path never multiplies rows. Profile tuples fall due at p per event but are
taken in passes of `profile_pass` (profile.Passes: a pass's cost is mostly fixed), and the
probing itself, which sees for free how many rows leave each step of the current order, takes a
pass at once when those flows move (a shift): cheap on stable data, quick after a change. A filter's cost per tuple is 1 probe plus the measured fan-out
of its tree edge (the rows a step materializes). The policy's filter order becomes a probe order
by putting each filter's path ancestors first, so a step is always linked to an input already
bound: no Cartesian product while the graph is connected. Orders change only between calls and
never change a result (engine/operators/join.py).
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from cqlstream.cql.logical import expr as X
from cqlstream.engine.adaptive import config as AC
from cqlstream.engine.adaptive.backoff import FlowDrift
from cqlstream.engine.adaptive.config import OFF, AdaptiveConfig
from cqlstream.engine.adaptive.conjuncts import Reorder
from cqlstream.engine.adaptive.matrix import MatrixView
from cqlstream.engine.adaptive.policies import POLICIES, Policy, Situation
from cqlstream.engine.adaptive.profile import Passes, ProfileWindow

if TYPE_CHECKING:
    import logging

    from cqlstream.engine.operators.join import Equi, JoinOp, Table


def _log() -> logging.Logger:
    """The adaptive machinery's logger (logging is imported when a change is logged, not at start)."""
    import logging

    return logging.getLogger("cqlstream.adaptive")


# ------------------------------------------------------------------ the join graph


@dataclass(frozen=True)
class Condition:
    """A join condition that is no equality and reads exactly two inputs (a band, an inequality):
    an edge of the join graph that no index serves; the profiler evaluates it on the pairs."""

    expr: X.Expr
    a: int
    b: int


def conditions(op: JoinOp) -> list[Condition]:
    """The join's non-equality conjuncts over two inputs (column indexes of the joined row)."""
    out = []
    for c, own in op.theta:
        if len(own) == 2:
            a, b = sorted(own)
            out.append(Condition(c, a, b))
    return out


def spanning_tree(
    n: int, equi: Sequence[Any], root: int, conds: Sequence[Any] = ()
) -> tuple[list[int], dict[int, int | None]]:
    """BFS over the join graph from `root` (lowest index first): the visit order and each input's
    parent. Equality edges (`equi`, an index serves them) are followed first; an input they do
    not reach hangs off the earliest reached input a condition edge (`conds`) links it to. Inputs
    reachable by neither get parent None (only a Cartesian product reaches them)."""
    adj: dict[int, list[int]] = {k: [] for k in range(n)}
    cadj: dict[int, list[int]] = {k: [] for k in range(n)}
    for edges, to in ((equi, adj), (conds, cadj)):
        for e in edges:
            to[e.a].append(e.b)
            to[e.b].append(e.a)
    parent: dict[int, int | None] = {root: None}
    order = [root]
    k = 0
    while True:
        while k < len(order):
            for nb in sorted(set(adj[order[k]])):
                if nb not in parent:
                    parent[nb] = order[k]
                    order.append(nb)
            k += 1
        if len(order) == n:
            return order, parent
        hop = next(((v, nb) for v in order for nb in sorted(set(cadj[v])) if nb not in parent), None)
        if hop is None:  # a component no edge reaches: a Cartesian step from its lowest input
            nxt = min(x for x in range(n) if x not in parent)
            parent[nxt] = None
        else:
            parent[hop[1]] = hop[0]
            nxt = hop[1]
        order.append(nxt)


def path(parent: dict[int, int | None], j: int, root: int) -> list[int]:
    """The inputs from the top of j's tree down to j, the root excluded (the head of a component
    the root does not reach is included: a Cartesian step)."""
    out: list[int] = []
    k: int | None = j
    while k is not None and k != root:
        out.append(k)
        k = parent[k]
    return out[::-1]


def linearize(filters: Sequence[int], parent: dict[int, int | None], root: int) -> list[int]:
    """A filter order as a probe order: each filter's path ancestors before it."""
    out: list[int] = []
    for j in filters:
        for k in path(parent, j, root):
            if k not in out:
                out.append(k)
    return out


# ------------------------------------------------------------------ one pipeline


class Pipeline:
    """The profiler and re-optimizer of one input's probe order."""

    LOG = 50
    DECAY = 0.999  # per profiled tuple: fan-out estimates follow the data

    def __init__(self, op: JoinOp, i: int, config: AdaptiveConfig) -> None:
        self.i = i
        self.others = [j for j in range(op.n) if j != i]
        self.pos = {j: k for k, j in enumerate(self.others)}  # input → filter index
        conds = conditions(op)
        self.visit, self.parent = spanning_tree(op.n, op.equi, i, conds)
        self.links = {j: [e for e in op.equi if {e.a, e.b} == {j, p}] for j, p in self.parent.items() if p is not None}
        # the tree edge's other conditions (a band into an input no equality reaches, or one
        # alongside an equality): evaluated on the edge's pairs, so the filter drops what they drop
        self.conds = {
            j: [c.expr for c in conds if {c.a, c.b} == {j, p}] for j, p in self.parent.items() if p is not None
        }
        self.names = [
            f"input {j}" + (f" via {path(self.parent, j, i)[:-1]}" if self.parent[j] != i else "") for j in self.others
        ]
        self.log: deque[Reorder] = deque(maxlen=self.LOG)
        self.reorders = 0
        self.seen = 0
        self.configure(config)

    def configure(self, config: AdaptiveConfig) -> None:
        m = len(self.others)
        self.config = config
        self.policy: Policy | None = None if config.policy == OFF or m < 2 else POLICIES[config.policy](m, config)
        self.passes = Passes(config.p, config.profile_pass, seed=0x5EED + self.i, cap=config.w)
        self.window = ProfileWindow(m, config.w)
        self.view = MatrixView(m)
        # decayed (probing rows, candidate pairs, matches) per tree edge into each filter: an
        # equality's index examines only matches; a condition with no equality examines every
        # alive instance of the window for each row (the executor's Cartesian step), then filters
        self.fan = np.zeros((3, m))
        self.pending: list[np.ndarray] = []
        self.pending_rows = 0
        self.profiled = 0
        self.view_order: list[int] | None = None
        self.drift = FlowDrift()  # the probing's own rows per step, smoothed (engine/adaptive/backoff.py)
        self.urgent = 0  # passes taken because the flows moved

    def shifted(self, flow: Sequence[int] | None, order: list[int]) -> bool:
        """Whether the rows leaving the steps of the current probe order (counted by the join's
        own probing, `flow` = rows into step 0, out of step 0, out of step 1, ...) moved by more
        than log 4 against their smoothed reference (backoff.FlowDrift): the data changed,
        profile now."""
        return self.drift.moved(flow, order)

    def costs(self) -> np.ndarray:
        """Per filter: one probe plus the candidate pairs its edge examines per row in."""
        rows, cand, _hits = self.fan
        return 1.0 + np.where(rows > 0, cand / np.maximum(rows, 1e-9), 1.0)

    def statistics(self, order: list[int]) -> dict[str, Any]:
        drop = self.window.drop_rates()
        costs = self.costs()
        rows, cand, hits = self.fan
        return {
            "input": self.i,
            "order": list(order),
            "tree_parent": {str(j): p for j, p in self.parent.items() if j != self.i},
            "profile_tuples": len(self.window),
            "passes": self.passes.passes,
            "shift_passes": self.urgent,
            "filters": [
                {
                    "input": j,
                    "filter": self.names[k],
                    "drop_rate": round(float(drop[k]), 6),
                    "fan_out": round(float(hits[k] / rows[k]), 6) if rows[k] > 0 else None,
                    "candidates": round(float(cand[k] / rows[k]), 6) if rows[k] > 0 else None,
                    "cost": round(float(costs[k]), 6),
                }
                for k, j in enumerate(self.others)
            ],
            "matrix_view": self.view.v.tolist(),
        }


class AdaptiveProbes:
    """A-Greedy probe orders for every pipeline of one join; the join calls `observe` once per
    call, after probing, and reads `probe_orders` (which this may change) at the next call."""

    EVENTS = 100

    def __init__(self, op: JoinOp, config: AdaptiveConfig) -> None:
        self.op = op
        self.config = config
        self.pipes = [Pipeline(op, i, config) for i in range(op.n)] if op.n >= 3 else []
        self.events: deque[tuple[int, Reorder]] = deque(maxlen=self.EVENTS)
        self.seconds = 0.0  # CPU time spent profiling and re-optimizing (the overhead)

    @property
    def active(self) -> bool:
        return bool(self.pipes) and self.config.policy != OFF

    @property
    def reorders(self) -> int:
        return sum(p.reorders for p in self.pipes)

    @property
    def profiled(self) -> int:
        return sum(p.profiled for p in self.pipes)

    def configure(self, config: AdaptiveConfig) -> None:
        self.config = config
        for p in self.pipes:
            p.configure(config)

    # ------------------------------------------------------------ profiler
    def observe(self, tables: Sequence[Table], m: int, flows: dict[int, list[int]] | None = None) -> None:
        """Profile sampled events of each input through every logical filter when a pass is due
        (or the probing's `flows`, rows per step by pipeline, moved); re-order if the policy's
        invariant broke."""
        if not self.active:
            return
        began = time.process_time()
        for pipe in self.pipes:
            ti = tables[pipe.i]
            n_ev = len(ti.ev)
            if not n_ev:
                continue
            pipe.seen += n_ev
            urgent = pipe.shifted((flows or {}).get(pipe.i), self.op._order(pipe.i))
            picked = pipe.passes.take(n_ev, urgent)
            if len(picked):
                pipe.urgent += urgent
                self._profile(pipe, tables, ti.ev[picked], m)
            if pipe.pending_rows >= self.config.profile_batch:
                self._check(pipe)
        self.seconds += time.process_time() - began

    def _profile(self, pipe: Pipeline, tables: Sequence[Table], rows: np.ndarray, m: int) -> None:
        k = len(rows)
        bits = np.zeros((k, len(pipe.others)), bool)
        seq0 = tables[pipe.i].seq[rows]
        # per input reached: (sample id, row of that input, multiplicity) of the path join's rows,
        # one row per (sample, key the children probe with): only emptiness and fan-out matter
        at: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]] = {pipe.i: (np.arange(k), rows, np.ones(k, np.int64))}
        pipe.fan *= Pipeline.DECAY**k
        for j in pipe.visit[1:]:
            par = pipe.parent[j]
            # (no parent: a Cartesian step from the events themselves, every alive instance matches)
            sid, prow, mult = at[par if par is not None else pipe.i]
            links = pipe.links.get(j, []) if par is not None else []
            conds = pipe.conds.get(j, []) if par is not None else []
            f = pipe.pos[j]
            pipe.fan[0, f] += mult.sum()
            if conds and len(sid) > k:  # the conditions read the parent's row: one per (sample, row)
                sid, prow, mult = _distinct_rows(sid, prow, mult)
            (ikey, ivalid), (pkey, pvalid), cache_key = edge_keys(self.op, tables, j, links, par, prow)
            if not conds and len(sid) > k:  # more rows than samples: one per (sample, key)
                sid, pkey, pvalid, mult = _distinct(sid, pkey, pvalid, mult)
            p, got = edge_pairs(self.op, tables, m, j, cache_key, (ikey, ivalid), (pkey, pvalid), seq0[sid])
            pipe.fan[1, f] += mult[p].sum()
            if conds and len(p):
                assert par is not None
                keep = self._passes(tables, conds, {par: prow[p], j: got}, tables[pipe.i].b.ts[rows[sid[p]]])
                p, got = p[keep], got[keep]
            at[j] = (sid[p], got, mult[p])
            hit = np.zeros(k, bool)
            hit[sid[p]] = True
            bits[:, f] = ~hit
            pipe.fan[2, f] += mult[p].sum()
        pipe.profiled += k
        dropped = bits[bits.any(axis=1)]
        if len(dropped):
            pipe.pending.append(dropped)
            pipe.pending_rows += len(dropped)

    def _passes(
        self, tables: Sequence[Table], conds: Sequence[X.Expr], idx: dict[int, np.ndarray], ts: np.ndarray
    ) -> np.ndarray:
        """Which pairs (row indexes per input in `idx`) every condition keeps, evaluated as the
        join evaluates them (engine/operators/join.py)."""
        from cqlstream.engine.operators.join import gather_batch

        op = self.op
        cols = sorted(set().union(*(X.columns(c) for c in conds)))
        b = gather_batch(op.width, cols, op.offsets, op.widths, tables, idx, ts)
        keep = np.ones(len(ts), bool)
        for c in conds:
            keep &= np.asarray(op.ev.predicate(c, b), dtype=bool)
        return keep

    # ------------------------------------------------------------ re-optimizer
    def _check(self, pipe: Pipeline) -> None:
        order = [pipe.pos[j] for j in self.op._order(pipe.i)]  # filter indexes, as probed now
        new = np.concatenate(pipe.pending)
        pipe.pending, pipe.pending_rows = [], 0
        expired = pipe.window.add(new)
        if pipe.view_order != order:  # first check, or the order was set by hand
            pipe.view.rebuild(pipe.window.rows, order)
            pipe.view_order = order
        else:
            pipe.view.update(new, expired, order)
        assert pipe.policy is not None
        # costs scaled so that the policy's "per microsecond" reads as "per unit" (probe + fan-out)
        costs = pipe.costs() * 1e-6
        s = Situation(pipe.view, pipe.window.rows, costs, order, pipe.names, self.config.alpha, len(new))
        d = pipe.policy.check(s)
        if d is None:
            return
        probe = linearize([pipe.others[f] for f in d.order], pipe.parent, pipe.i)
        if probe != self.op._order(pipe.i):
            self.set_order(pipe, probe, d.reason.replace("/us", " per unit"))

    def set_order(self, pipe: Pipeline, probe: list[int], reason: str) -> None:
        old = tuple(self.op._order(pipe.i))
        self.op.probe_orders[pipe.i] = list(probe)
        order = [pipe.pos[j] for j in probe]
        pipe.view.rebuild(pipe.window.rows, order)
        pipe.view_order = order
        pipe.reorders += 1
        r = Reorder(pipe.reorders, pipe.seen, old, tuple(probe), reason)
        pipe.log.append(r)
        self.events.append((pipe.i, r))
        _log().info("probe order of input %d %s -> %s after %d events: %s", pipe.i, list(old), probe, pipe.seen, reason)

    # ------------------------------------------------------------ what it shows
    def drain_events(self) -> list[tuple[str, float]]:
        """SysStream rows: `reorder` (the join's re-ordering count) and `reorder_input` (whose
        pipeline changed) per re-ordering since the last call."""
        out: list[tuple[str, float]] = []
        total = self.reorders - len(self.events)
        while self.events:
            i, _r = self.events.popleft()
            total += 1
            out += [("reorder", float(total)), ("reorder_input", float(i))]
        return out

    def statistics(self) -> dict[str, Any]:
        c = self.config
        last = sorted(((r.at, i, r) for p in self.pipes for i, r in [(p.i, r) for r in p.log]), key=lambda x: x[0])
        return {
            "policy": c.policy if self.pipes else OFF,
            "profile_probability": c.p,
            "profile_window": c.w,
            "alpha": c.alpha,
            "profile_pass": c.profile_pass,
            "profile_seconds": round(self.seconds, 6),
            "pipelines": [p.statistics(self.op._order(p.i)) for p in self.pipes],
            "log": [{"input": i, **r.as_dict()} for _, i, r in last[-10:]],
        }

    def explain(self) -> list[str]:
        if not self.pipes:
            return []
        pol = self.config.policy
        orders = "; ".join(f"{i}: {self.op._order(i)}" for i in range(self.op.n))
        return [f"probe orders ({pol}, {self.reorders} re-orderings): {orders}"]


def edge_keys(
    op: JoinOp, tables: Sequence[Table], j: int, links: Sequence[Equi], par: int | None, prow: np.ndarray
) -> tuple[tuple[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray], tuple[int, tuple[int, ...]] | None]:
    """Keys of the step from rows `prow` of input `par` into input j over the tree edge's equi
    conjuncts `links`: (instance keys, valid), (probe keys, valid), and the key under which the
    join may already have built an index over them in this call (None: none can match)."""
    from cqlstream.engine.operators.join import combine_keys

    tj = tables[j]
    if not links:
        ikey, ivalid = np.zeros(len(tj.inst), np.int64), np.ones(len(tj.inst), bool)
        return (ikey, ivalid), (np.zeros(len(prow), np.int64), np.ones(len(prow), bool)), (j, ())
    inst_parts, probe_parts = [], []
    for e in links:
        codes = op._side_codes(e, tables)
        cj, okj = codes[j]
        ck, okk = codes[e.other(j)]
        inst_parts.append((cj[tj.inst], okj[tj.inst]))
        probe_parts.append((ck[prow], okk[prow]))
    (ikey, ivalid), (pkey, pvalid) = combine_keys(inst_parts, probe_parts)
    return (ikey, ivalid), (pkey, pvalid), ((j, (links[0].cid,)) if len(links) == 1 else None)


def _distinct(
    sid: np.ndarray, pkey: np.ndarray, pvalid: np.ndarray, mult: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """One row per (sample, valid probe key), multiplicities summed; rows with no valid key
    match nothing and go."""
    sid, pkey, mult = sid[pvalid], pkey[pvalid], mult[pvalid]
    if len(sid) < 2:
        return sid, pkey, np.ones(len(sid), bool), mult
    o = np.lexsort((pkey, sid))
    sid, pkey, mult = sid[o], pkey[o], mult[o]
    start = np.flatnonzero(np.concatenate(([True], (sid[1:] != sid[:-1]) | (pkey[1:] != pkey[:-1]))))
    return sid[start], pkey[start], np.ones(len(start), bool), np.add.reduceat(mult, start)


def _distinct_rows(sid: np.ndarray, prow: np.ndarray, mult: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One row per (sample, parent row), multiplicities summed (a condition reads the row itself)."""
    if len(sid) < 2:
        return sid, prow, mult
    o = np.lexsort((prow, sid))
    sid, prow, mult = sid[o], prow[o], mult[o]
    start = np.flatnonzero(np.concatenate(([True], (sid[1:] != sid[:-1]) | (prow[1:] != prow[:-1]))))
    return sid[start], prow[start], np.add.reduceat(mult, start)


def edge_pairs(
    op: JoinOp,
    tables: Sequence[Table],
    m: int,
    j: int,
    cache_key: tuple[int, tuple[int, ...]] | None,
    inst: tuple[np.ndarray, np.ndarray],
    probe: tuple[np.ndarray, np.ndarray],
    seq: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """Pairs (probing row, instance row of input j) with equal keys, instances alive at the row's
    seq: the join's own step, on a few rows (scanned, or through an index the join already built
    in this call)."""
    from cqlstream.engine.operators.join import StabIndex, scan_pairs
    from cqlstream.engine.operators.tiny_pairs import Pairing

    tj = tables[j]
    (ikey, ivalid), (pkey, pvalid) = inst, probe
    if not len(seq):
        z = np.zeros(0, np.int64)
        return z, z
    index = op._indexes.get(cache_key) if cache_key is not None else None
    if index is None:
        got = scan_pairs(Pairing(pkey, pvalid, seq, ikey, ivalid, tj.lo, tj.hi))
        if got is not None:
            return got[0], tj.inst[got[1]]
        index = StabIndex(tj.inst[ivalid], ikey[ivalid], tj.lo[ivalid], tj.hi[ivalid], m, op.index_mode)
    return index.probe(pkey, pvalid, seq)


# ------------------------------------------------------------------ knobs of the join


MJOIN_KNOBS = AC.MJOIN_KNOBS  # defined with the config: the join's class lists them without loading this module
