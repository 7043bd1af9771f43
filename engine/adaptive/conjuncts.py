"""The adaptive order of a selection's conjuncts: executor, profiler and re-optimizer of
A-Greedy (thesis Fig 4.10) in one object that the select operator calls once per batch.

The executor evaluates the conjuncts in the current order, each on the survivors of the ones
before it (vectorized), timing each. The profiler picks tuples with probability p, and every
`profile_batch` of them evaluates every conjunct on them at once: those some conjunct drops
become profile tuples (drop bits). The re-optimizer (a policy) checks its invariant over the
matrix view after each such batch and may change the order. Order never changes a result.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from cqlstream.engine.adaptive.config import OFF, AdaptiveConfig
from cqlstream.engine.adaptive.matrix import MatrixView
from cqlstream.engine.adaptive.policies import POLICIES, Policy, Situation
from cqlstream.engine.adaptive.profile import CostMeter, ProfileWindow, Sampler
from cqlstream.engine.batch import Batch, concat

if TYPE_CHECKING:
    from cqlstream.cql.logical import expr as X
    from cqlstream.engine.exprs import Evaluator

log = logging.getLogger("cqlstream.adaptive")


@dataclass(frozen=True)
class Reorder:
    """One change of order: its number, after how many input tuples, from what to what, why."""

    seq: int
    at: int
    old: tuple[int, ...]
    new: tuple[int, ...]
    reason: str

    def as_dict(self) -> dict[str, Any]:
        return {"seq": self.seq, "at": self.at, "old": list(self.old), "new": list(self.new), "reason": self.reason}


class AdaptiveOrder:
    LOG = 50  # re-orderings kept for the control table
    EVENTS = 100  # re-orderings kept until SysStream publishes them

    def __init__(self, conjuncts: Sequence[X.Expr], config: AdaptiveConfig) -> None:
        self.conjuncts = list(conjuncts)  # original numbering; the order is a permutation of it
        self.n = len(self.conjuncts)
        self.order = list(range(self.n))
        self.names = [c.sql() for c in self.conjuncts]
        self.log: deque[Reorder] = deque(maxlen=self.LOG)
        self.events: deque[Reorder] = deque(maxlen=self.EVENTS)
        self.reorders = 0
        self.seen = 0
        self.configure(config)

    def configure(self, config: AdaptiveConfig) -> None:
        """(Re)start profiling with `config`; the current order stays."""
        n = self.n
        self.config = config
        self.policy: Policy | None = None if config.policy == OFF or n < 2 else POLICIES[config.policy](n, config)
        self.sampler = Sampler(config.p)
        self.sampler.seen = self.seen
        self.window = ProfileWindow(n, config.w)
        self.view = MatrixView(n)
        self.meter = CostMeter(n, config.w / config.p)
        self.pending: list[Batch] = []
        self.pending_rows = 0
        self.profiled = 0  # tuples sampled (dropped or not)

    @property
    def ordered(self) -> list[X.Expr]:
        return [self.conjuncts[i] for i in self.order]

    # ------------------------------------------------------------ executor
    def run(self, b: Batch, ev: Evaluator) -> Batch:
        if self.policy is None:
            for c in self.ordered:
                if not len(b):
                    break
                b = b.take(ev.predicate(c, b))
            return b
        n_in = len(b)
        self.seen += n_in
        picked = self.sampler.take(n_in)
        if len(picked):
            self.pending.append(b.take(picked))
            self.pending_rows += len(picked)
        secs, tuples = np.zeros(self.n), np.zeros(self.n)
        for i in self.order:
            if not len(b):
                break
            t = time.perf_counter()
            mask = ev.predicate(self.conjuncts[i], b)
            secs[i] = time.perf_counter() - t
            tuples[i] = len(b)
            b = b.take(mask)
        self.meter.add(secs, tuples, n_in)
        if self.pending_rows >= self.config.profile_batch:
            self._profile(ev)
        return b

    # ------------------------------------------------------------ profiler and re-optimizer
    def _profile(self, ev: Evaluator) -> None:
        rows = concat(self.pending)
        self.pending, self.pending_rows = [], 0
        self.profiled += len(rows)
        secs, cols = np.zeros(self.n), []
        for i, c in enumerate(self.conjuncts):  # timed too: every conjunct on the same tuples
            t = time.perf_counter()
            cols.append(~ev.predicate(c, rows))
            secs[i] = time.perf_counter() - t
        self.meter.add(secs, np.full(self.n, float(len(rows))), 0)
        drops = np.column_stack(cols)
        dropped = drops[drops.any(axis=1)]  # only dropped tuples carry information (thesis §4.3.1)
        expired = self.window.add(dropped)
        self.view.update(dropped, expired, self.order)
        assert self.policy is not None
        s = Situation(
            self.view, self.window.rows, self.meter.costs(), self.order, self.names, self.config.alpha, len(dropped)
        )
        d = self.policy.check(s)
        if d is not None and list(d.order) != self.order:
            self.set_order(list(d.order), d.reason)

    def set_order(self, order: list[int], reason: str) -> None:
        """Switch to `order` (switching carries no state, thesis §3.2), logged with its reason."""
        old = tuple(self.order)
        self.order = list(order)
        self.view.rebuild(self.window.rows, self.order)
        self.reorders += 1
        r = Reorder(self.reorders, self.seen, old, tuple(order), reason)
        self.log.append(r)
        self.events.append(r)
        log.info("conjunct order %s -> %s after %d tuples: %s", list(old), order, self.seen, reason)

    # ------------------------------------------------------------ what it shows
    def drain_events(self) -> list[tuple[str, float]]:
        """SysStream rows (metric, value) of the re-orderings since the last call: `reorder`, its
        number, and `reorder_first`, the conjunct now evaluated first."""
        out = []
        while self.events:
            r = self.events.popleft()
            out += [("reorder", float(r.seq)), ("reorder_first", float(r.new[0]))]
        return out

    def statistics(self) -> dict[str, Any]:
        """Per conjunct: position, drop rate among profile tuples, cost per tuple, rank."""
        costs = self.meter.costs()
        drop = self.window.drop_rates()
        uncond = self.window.rows.sum(axis=0)
        pos = {c: k for k, c in enumerate(self.order)}
        return {
            "policy": self.config.policy if self.n > 1 else OFF,
            "order": list(self.order),
            "profile_probability": self.config.p,
            "profile_window": self.config.w,
            "alpha": self.config.alpha,
            "profile_tuples": len(self.window),
            "conjuncts": [
                {
                    "index": i,
                    "position": pos[i],
                    "text": self.names[i],
                    "drop_rate": round(float(drop[i]), 6),
                    "cost_ns": round(float(costs[i]) * 1e9, 3) if self.meter.tuples[i] > 0 else None,
                    "rank": round(float(uncond[i] / costs[i]) * 1e-6, 6),
                }
                for i in range(self.n)
            ],
            "matrix_view": self.view.v.tolist(),
            "log": [r.as_dict() for r in list(self.log)[-10:]],
        }

    def explain(self) -> str:
        order = ", ".join(f"[{i}] {self.names[i]}" for i in self.order)
        pol = self.config.policy if self.policy is not None else OFF
        return f"conjunct order ({pol}, {self.reorders} re-orderings): {order}"
