"""Grouped selection (CACQ's grouped filter, NiagaraCQ's predicate index): many queries that
select `column = constant` over one queue, each with its own constant, are served by one
operator that reads the queue once and routes each element to the queries whose constant it
equals. With a few members it compares per member; with many it sorts the batch by the column
once (stable, so each member's rows stay in ts order) and cuts one slice per constant.

Each query keeps its own physical node: a `HubMember` (its output queue, its counters) that the
hub fills; members join and leave while data flows (the plan manager, engine/planner.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from cqlstream.cql.logical import expr as X
from cqlstream.cql.logical.nodes import Plan
from cqlstream.engine import knobs as K
from cqlstream.engine.adaptive.config import OFF, AdaptiveConfig
from cqlstream.engine.adaptive.conjuncts import AdaptiveOrder
from cqlstream.engine.batch import Batch, blanked
from cqlstream.engine.errors import KnobError
from cqlstream.engine.operators.base import Counters, IdSource, Operator
from cqlstream.engine.operators.basic import CONJUNCT_ORDER, FilterOp
from cqlstream.engine.queues import Queue

if TYPE_CHECKING:
    from cqlstream.engine.exprs import Evaluator

SORT_FROM = 8  # members from which one sort beats a comparison per member


def eq_const(pred: X.Expr) -> tuple[int, object] | None:
    """(column, value) when `pred` is `column = constant` (a non-NULL constant), else None."""
    if not isinstance(pred, X.Op) or pred.op != "=" or len(pred.args) != 2:
        return None
    a, b = pred.args
    if isinstance(b, X.ColRef) and isinstance(a, X.Const):
        a, b = b, a
    if (
        isinstance(a, X.ColRef)
        and isinstance(b, X.Const)
        and b.value is not None
        and a.type.kind == b.type.kind
        and a.type.kind in ("int", "varchar", "char", "string", "bool")
    ):
        return a.index, b.value
    return None


class FilterHub(Operator):
    kind = "grouped select"
    fanout = True

    def __init__(self, inputs: list[Queue], ids: IdSource, column: int, label: str = "") -> None:
        super().__init__(inputs, Queue(inputs[0].types, name="hub"), ids)
        self.column = column
        self.members: list[HubMember] = []
        self.label = label

    def output_queues(self) -> list[Queue]:
        return [self.output, *(m.output for m in self.members)]

    def shared_operators(self) -> list[Operator]:
        return list(self.members)

    def resume(self, old: Operator) -> None:
        """Take over the position and progress of `old`, a running selection over the same queue
        that this hub replaces (a selection keeps no state, so nothing else carries over)."""
        q = old.inputs[0]
        for r in self.readers:
            r.q.detach(r)
        self.readers = [q.reader(at=old.readers[0])]
        self.done_through, self.t0 = old.done_through, old.t0
        self.output.start, self.output.watermark = old.output.start, old.output.watermark

    def add(self, m: HubMember) -> None:
        m.hub = self
        self.members.append(m)

    def process(self, inputs: list[Batch], bound: int) -> Batch:
        return inputs[0]  # routed by deliver()

    def deliver(self, b: Batch | None, bound: int, n_in: int) -> None:
        """Route the call's elements to every member's queue (watermark = bound)."""
        parts = self._route(b) if b is not None and len(b) else {}
        for m in self.members:
            part = parts.get(id(m))
            q = m.output
            if q.start is None and self.output.start is not None:
                q.start = self.output.start
            q.ended = self.output.ended
            q.push(part, watermark=bound)
            m.counters.calls += 1
            m.counters.tuples_in += n_in
            m.counters.tuples_out += 0 if part is None else len(part)

    def _route(self, b: Batch) -> dict[int, Batch]:
        col = b.cols[self.column]
        nulls = b.nulls[self.column]
        valid = None if nulls is None else ~nulls
        if len(self.members) < SORT_FROM:
            out: dict[int, Batch] = {}
            for m in self.members:
                mask = col == m.value
                if valid is not None:
                    mask &= valid
                out[id(m)] = _blanked(m, b).take(mask)
            return out
        idx = np.arange(len(b)) if valid is None else np.flatnonzero(valid)
        vals = col[idx]
        order = np.argsort(vals, kind="stable")
        sorted_vals = vals[order]
        consts = np.array([m.value for m in self.members], dtype=col.dtype)
        lo = np.searchsorted(sorted_vals, consts, side="left")
        hi = np.searchsorted(sorted_vals, consts, side="right")
        rows = idx[order]  # ascending within each equal-value run: ts order is kept
        return {id(m): _blanked(m, b).take(rows[lo[k] : hi[k]]) for k, m in enumerate(self.members) if hi[k] > lo[k]}


def _blanked(m: HubMember, b: Batch) -> Batch:
    """`b` with the columns member `m` does not produce blanked (column pruning)."""
    keep = m._blank_keep
    return b if keep is None else blanked(b, m.output.types, keep)


def _no_sampling_rate(m: HubMember, value: object) -> None:
    raise KnobError(f"{m.eid} is computed by its grouped selection {m.hub.eid}: set the knob there")


class HubMember(FilterOp):
    """One query's `column = value` selection, computed by its hub (never scheduled itself)."""

    KNOBS = (K.MEMORY_LIMIT, K.Knob("sampling_rate", lambda m: m.sampling_rate, _no_sampling_rate), CONJUNCT_ORDER)

    def __init__(
        self,
        output: Queue,
        ids: IdSource,
        predicate: X.Expr,
        evaluator: Evaluator,
        value: object,
        hub: FilterHub,
        *,
        eid: str | None,
        node: Plan,
        counters: Counters | None = None,
    ) -> None:
        """`counters`: those of the running selection this member replaces, if any."""
        Operator.__init__(self, [], output, ids)
        self.adaptive = AdaptiveOrder(X.conjuncts(predicate), AdaptiveConfig(policy=OFF))  # one conjunct: no order
        self.ev = evaluator
        self.value = value
        self.hub = hub
        self.eid, self.node = eid, node
        if counters is not None:
            self.counters: Counters = counters

    def scheduled(self) -> Operator:
        return self.hub

    def shared_operators(self) -> list[Operator]:
        return [] if self.hub is None else [self.hub]

    def groupable(self) -> bool:
        return False

    def release(self) -> list[object]:
        hub = self.hub
        hub.members.remove(self)
        if hub.members:
            return []
        return [hub, *hub.release()]

    @property
    def inputs(self) -> list[Queue]:
        return self.hub.inputs

    @property
    def done_through(self) -> int | None:
        return None if self.hub is None else self.hub.done_through

    @done_through.setter
    def done_through(self, v: int | None) -> None:
        pass  # the hub's progress is the member's

    @property
    def t0(self) -> int | None:
        return None if self.hub is None else self.hub.t0

    @t0.setter
    def t0(self, v: int | None) -> None:
        pass

    def step(self, budget: int | None = None) -> int:
        return 0
