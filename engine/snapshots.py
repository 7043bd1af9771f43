"""The current relation of a running relation-valued queue, as `+` elements at the instant its
producer has completed (what a late query or a `snapshot=True` subscriber starts from).

A relation store on the queue answers first (a join input's store or a query's result store);
otherwise the producing operator does (`Operator.snapshot`: a window reads its extent, an
aggregate its per-group output, a join joins its inputs' snapshots, a selection/projection
applies itself to its input's snapshot). Producers that cannot (distinct, set operations,
semijoins) get a result store when they produce a query's result.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from cqlstream.engine.batch import Batch

if TYPE_CHECKING:
    from cqlstream.engine.planner import PhysicalPlan, PNode, Snapshot


def at_instant(b: Batch, at: int) -> Batch:
    return Batch(b.cols, b.nulls, np.full(len(b), at, np.int64), np.ones(len(b), np.int8), b.id)


def snapshot(plan: PhysicalPlan, pn: PNode, at: int | None = None) -> Snapshot | None:
    """(pn's relation at its last complete instant as `+` elements, that instant), or None.
    `at` asks for a given instant (an operator's inputs, at the instant it is done through):
    an operator can only give the instant it is done through; a source relation also the
    one before its latest updates."""
    if pn.op is None:
        fn = plan.source_snapshots.get(pn.key)
        return None if fn is None else fn(at)
    if at is not None and at != pn.op.done_through:
        return None
    at = pn.op.done_through
    if at is None:
        return None
    st = plan.stores.get(id(pn.queue)) or pn.store
    if st is not None:
        st.advance(at)
        return at_instant(st.alive_at(at), at), at

    def inputs() -> list[Batch] | None:
        parts = []
        for k in pn.inputs:
            s = snapshot(plan, k, at)
            if s is None or s[1] != at:
                return None
            parts.append(s[0])
        return parts

    b = pn.op.snapshot(at, inputs)
    return None if b is None else (b, at)


def snapshotable(plan: PhysicalPlan, pn: PNode) -> bool:
    """Whether snapshot() can give pn's relation once data flows (without running it)."""
    if pn.op is None:
        return pn.key in plan.source_snapshots
    if id(pn.queue) in plan.stores or pn.store is not None:
        return True
    return pn.op.snapshotable(lambda: all(snapshotable(plan, k) for k in pn.inputs))
