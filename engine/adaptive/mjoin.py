"""Adaptive probe orders of an N-ary join (MJoin, thesis §5.2): A-Greedy over each pipeline's
*logical filters*.

Pipeline i (the events of input i probing the others) is a chain of joins. For the re-optimizer
each other input j is a filter F_j: the join along the path from i to j in a spanning tree of the
join graph (BFS from i, so a cyclic graph is treated as acyclic). F_j drops an event when that path
join is empty. A sampled event (probability p) is carried through every path (only the path, so
branches never multiply) and becomes a profile tuple of drop bits; the matrix view and the policy
are those of the conjunct orderer. A filter's cost per tuple is 1 probe plus the measured fan-out
of its tree edge (the rows a step materializes). The policy's filter order becomes a probe order
by putting each filter's path ancestors first, so a step is always linked to an input already
bound: no Cartesian product while the graph is connected. Orders change only between calls and
never change a result (engine/operators/join.py).
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from cqlstream.engine import knobs as K
from cqlstream.engine.adaptive import config as AC
from cqlstream.engine.adaptive.config import OFF, AdaptiveConfig
from cqlstream.engine.adaptive.conjuncts import Reorder
from cqlstream.engine.adaptive.matrix import MatrixView
from cqlstream.engine.adaptive.policies import POLICIES, Policy, Situation
from cqlstream.engine.adaptive.profile import ProfileWindow, Sampler

if TYPE_CHECKING:
    from cqlstream.engine.operators.join import Equi, JoinOp, Table

log = logging.getLogger("cqlstream.adaptive")


# ------------------------------------------------------------------ the join graph


def spanning_tree(n: int, equi: Sequence[Equi], root: int) -> tuple[list[int], dict[int, int | None]]:
    """BFS over the equi-join graph from `root` (lowest index first): the visit order and each
    input's parent. Inputs not reachable get parent None (only a Cartesian product reaches them)."""
    adj: dict[int, list[int]] = {k: [] for k in range(n)}
    for e in equi:
        adj[e.a].append(e.b)
        adj[e.b].append(e.a)
    parent: dict[int, int | None] = {root: None}
    order = [root]
    for start in [root, *range(n)]:
        if start not in parent:
            parent[start] = None
            order.append(start)
        k = order.index(start)
        while k < len(order):
            for nb in sorted(set(adj[order[k]])):
                if nb not in parent:
                    parent[nb] = order[k]
                    order.append(nb)
            k += 1
    return order, parent


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
        self.visit, self.parent = spanning_tree(op.n, op.equi, i)
        self.links = {j: [e for e in op.equi if {e.a, e.b} == {j, p}] for j, p in self.parent.items() if p is not None}
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
        self.sampler = Sampler(config.p, seed=0x5EED + self.i)
        self.sampler.seen = self.seen
        self.window = ProfileWindow(m, config.w)
        self.view = MatrixView(m)
        self.fan = np.zeros((2, m))  # decayed (probing rows, matches) per tree edge into each filter
        self.pending: list[np.ndarray] = []
        self.pending_rows = 0
        self.profiled = 0
        self.view_order: list[int] | None = None

    def costs(self) -> np.ndarray:
        rows, hits = self.fan
        return 1.0 + np.where(rows > 0, hits / np.maximum(rows, 1e-9), 1.0)

    def statistics(self, order: list[int]) -> dict[str, Any]:
        drop = self.window.drop_rates()
        costs = self.costs()
        rows, hits = self.fan
        return {
            "input": self.i,
            "order": list(order),
            "tree_parent": {str(j): p for j, p in self.parent.items() if j != self.i},
            "profile_tuples": len(self.window),
            "filters": [
                {
                    "input": j,
                    "filter": self.names[k],
                    "drop_rate": round(float(drop[k]), 6),
                    "fan_out": round(float(hits[k] / rows[k]), 6) if rows[k] > 0 else None,
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
    def observe(self, tables: Sequence[Table], m: int) -> None:
        """Profile sampled events of each input through every logical filter; re-order if the
        policy's invariant broke."""
        if not self.active:
            return
        for pipe in self.pipes:
            ti = tables[pipe.i]
            n_ev = len(ti.ev)
            if not n_ev:
                continue
            picked = pipe.sampler.take(n_ev)
            pipe.seen += n_ev
            if len(picked):
                self._profile(pipe, tables, ti.ev[picked], m)
            if pipe.pending_rows >= self.config.profile_batch:
                self._check(pipe)

    def _profile(self, pipe: Pipeline, tables: Sequence[Table], rows: np.ndarray, m: int) -> None:
        k = len(rows)
        bits = np.zeros((k, len(pipe.others)), bool)
        seq0 = tables[pipe.i].seq[rows]
        # per input reached: (sample id, row per bound input on its path, seq) of the path join's rows
        at: dict[int, tuple[np.ndarray, dict[int, np.ndarray], np.ndarray]] = {
            pipe.i: (np.arange(k), {pipe.i: rows}, seq0)
        }
        pipe.fan *= Pipeline.DECAY**k
        for j in pipe.visit[1:]:
            par = pipe.parent[j]
            # (no parent: a Cartesian step from the events themselves, every alive instance matches)
            sid, idx, seq = at[par if par is not None else pipe.i]
            p, got = probe_edge(self.op, tables, m, j, pipe.links.get(j, []), idx, seq)
            at[j] = (sid[p], {**{q: v[p] for q, v in idx.items()}, j: got}, seq[p])
            hit = np.zeros(k, bool)
            hit[sid[p]] = True
            bits[:, pipe.pos[j]] = ~hit
            f = pipe.pos[j]
            pipe.fan[0, f] += len(seq)
            pipe.fan[1, f] += len(p)
        pipe.profiled += k
        dropped = bits[bits.any(axis=1)]
        if len(dropped):
            pipe.pending.append(dropped)
            pipe.pending_rows += len(dropped)

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
        log.info("probe order of input %d %s -> %s after %d events: %s", pipe.i, list(old), probe, pipe.seen, reason)

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
            "pipelines": [p.statistics(self.op._order(p.i)) for p in self.pipes],
            "log": [{"input": i, **r.as_dict()} for _, i, r in last[-10:]],
        }

    def explain(self) -> list[str]:
        if not self.pipes:
            return []
        pol = self.config.policy
        orders = "; ".join(f"{i}: {self.op._order(i)}" for i in range(self.op.n))
        return [f"probe orders ({pol}, {self.reorders} re-orderings): {orders}"]


def probe_edge(
    op: JoinOp,
    tables: Sequence[Table],
    m: int,
    j: int,
    links: Sequence[Equi],
    idx: dict[int, np.ndarray],
    seq: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """Pairs (probing row, instance row of input j) over the equi conjuncts `links` between j and
    inputs bound in `idx`, instances alive at the row's seq: the join's own step, on a few rows
    (scanned, or through an index the join already built in this call)."""
    from cqlstream.engine.operators.join import StabIndex, combine_keys, scan_pairs

    tj = tables[j]
    if not len(seq):
        z = np.zeros(0, np.int64)
        return z, z
    if links:
        inst_parts, probe_parts = [], []
        for e in links:
            codes = op._side_codes(e, tables)
            cj, okj = codes[j]
            ck, okk = codes[e.other(j)]
            inst_parts.append((cj[tj.inst], okj[tj.inst]))
            probe_parts.append((ck[idx[e.other(j)]], okk[idx[e.other(j)]]))
        (ikey, ivalid), (pkey, pvalid) = combine_keys(inst_parts, probe_parts)
        cache_key: tuple[int, tuple[int, ...]] | None = (j, (links[0].cid,)) if len(links) == 1 else None
    else:
        cache_key = (j, ())
        ikey, ivalid = np.zeros(len(tj.inst), np.int64), np.ones(len(tj.inst), bool)
        pkey, pvalid = np.zeros(len(seq), np.int64), np.ones(len(seq), bool)
    index = op._indexes.get(cache_key) if cache_key is not None else None
    if index is None:
        got = scan_pairs(pkey, pvalid, seq, ikey, ivalid, tj.lo, tj.hi)
        if got is not None:
            return got[0], tj.inst[got[1]]
        index = StabIndex(tj.inst[ivalid], ikey[ivalid], tj.lo[ivalid], tj.hi[ivalid], m, op.index_mode)
    return index.probe(pkey, pvalid, seq)


# ------------------------------------------------------------------ knobs of the join


MJOIN_KNOBS = (
    K.config_field("adaptive", "adaptive", "policy", AC.policy_name),
    K.config_field("profile_probability", "adaptive", "probability", AC.probability),
    K.config_field("profile_window", "adaptive", "window", AC.window),
    K.config_field("alpha", "adaptive", "alpha", AC.alpha),
)
