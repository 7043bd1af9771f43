"""The `allocator` overload policy: the precision-maximizing allocator (engine/approx/allocator.py
over engine/approx/precision.py) chooses the queries' sampling rates under the load budget, and the
controller walks each query's ladder toward its allocated rate.

The load resource is the input a query keeps: a query sampled at rate r is a `sample` node of the
precision model whose need is `UNITS` units (rate 1.0), so its precision is 1 − (1 − r)/2 and the
allocator maximizes Σ weight × precision over the running queries under a budget of kept input.
With a step to take (shedding: the kept input falls by the smallest step any query can take;
restoring: it grows by the smallest step back), the budget is the queries' current rates summed,
moved by that step; the allocation for it is searched again *incrementally* from the previous one
(Allocator.set_budget / add_query / drop_query / set_weight), so a change of load, a query coming
or going or being reweighted moves little. The query moved is the one furthest from its
allocated rate on the side of the move.

One instance per controller (`fresh`), so engines in one process do not share an allocation.
"""

from __future__ import annotations

from cqlstream.engine.approx.allocator import Allocator, Query
from cqlstream.engine.approx.precision import Node, Plan
from cqlstream.engine.approx.shedding import Candidate

UNITS = 100  # units of kept input per query at rate 1.0 (the ladder's finest rate is 0.01)


class AllocatorPolicy:
    """A policy (engine/approx/shedding.py `Policy`) that keeps an allocator across calls."""

    def __init__(self) -> None:
        self.alloc = Allocator(Plan(), 0, unit=1)
        self.weights: dict[int, float] = {}  # query id → weight the allocator knows
        self.reruns = 0  # incremental searches run (each change of budget, query or weight)

    @staticmethod
    def fresh() -> AllocatorPolicy:
        return AllocatorPolicy()

    # ------------------------------------------------------------ keeping the allocator current
    def sync(self, cands: list[Candidate]) -> None:
        """Tell the allocator which queries run, and their weights (only what changed)."""
        now = {c.query_id: c.weight for c in cands}
        for qid in sorted(set(self.weights) - set(now)):
            self.alloc.drop_query(f"q{qid}")
            del self.weights[qid]
            self.reruns += 1
        for qid, w in sorted(now.items()):
            name = f"q{qid}"
            if qid not in self.weights:
                self.alloc.plan.add(Node(name, "sample", need=float(UNITS)))
                self.alloc.add_query(Query(name, name, w))
                self.reruns += 1
            elif self.weights[qid] != w:
                self.alloc.set_weight(name, w)
                self.reruns += 1
            self.weights[qid] = w

    def targets(self, cands: list[Candidate], budget: float) -> dict[int, float]:
        """Each query's allocated rate for a budget of `budget` (a sum of rates)."""
        self.sync(cands)
        units = max(0, round(budget * UNITS))
        if units != self.alloc.budget:
            self.alloc.set_budget(units)
            self.reruns += 1
        got = self.alloc.bytes()
        return {c.query_id: got.get(f"q{c.query_id}", 0) / UNITS for c in cands}

    # ------------------------------------------------------------ the policy
    def __call__(self, cands: list[Candidate], move: str) -> int | None:
        total = sum(c.rate for c in cands)
        if move == "degrade":
            movable = [c for c in cands if c.down is not None]
            if not movable:
                return None
            step = min(c.rate - c.down for c in movable if c.down is not None)
            want = self.targets(cands, total - step)
            return max(movable, key=lambda c: (c.rate - want[c.query_id], -c.weight, -c.query_id)).query_id
        movable = [c for c in cands if c.up is not None]
        if not movable:
            return None
        step = min(c.up - c.rate for c in movable if c.up is not None)
        want = self.targets(cands, total + step)
        return max(movable, key=lambda c: (want[c.query_id] - c.rate, c.weight, -c.query_id)).query_id
