"""The current relation of a running relation-valued queue, as `+` elements at the instant its
producer has completed (what a late query or a `snapshot=True` subscriber starts from, #5).

One case per producer kind (`SNAPSHOTS`): a window reads its extent of the window store; an
aggregate reads its per-group output state; a join recomputes the join of its inputs' snapshots
(join result ids are a function of the input ids, so they match what the running join emitted);
a selection/projection applies itself to its input's snapshot; otherwise a relation store on the
queue (a join input's store or a query's result store). Producers with none of these (distinct,
set operations, semijoins) get a result store when they produce a query's result.
"""

from __future__ import annotations

import numpy as np
from cqlstream.engine.batch import Batch


def at_instant(b: Batch, at: int) -> Batch:
    return Batch(b.cols, b.nulls, np.full(len(b), at, np.int64), np.ones(len(b), np.int8), b.id)


def _window(plan, pn, at):
    from cqlstream.engine.operators.window import snapshot

    return snapshot(pn.op)


def _aggregate(plan, pn, at):
    return pn.op.current_rows(at)


def _join(plan, pn, at):
    from cqlstream.engine.operators.join import JoinOp
    from cqlstream.engine.queues import Queue

    parts = []
    for k in pn.inputs:
        s = snapshot(plan, k, at)
        if s is None or s[1] != at:
            return None
        parts.append(s[0])
    op = pn.op
    fresh = JoinOp([Queue(t) for t in op.input_types], Queue(op.out_types), op.ids, op.predicate, op.input_types, op.ev)
    return fresh.process(parts, at)


def _stateless(plan, pn, at):
    if pn.is_stream:
        return None
    inner = snapshot(plan, pn.inputs[0], at)
    if inner is None or inner[1] != at:
        return None
    return pn.op.process([inner[0]], at)


def _table():
    from cqlstream.engine.operators.aggregate import AggregateOp
    from cqlstream.engine.operators.basic import FilterOp, PassOp, ProjectOp
    from cqlstream.engine.operators.filterhub import HubMember
    from cqlstream.engine.operators.join import JoinOp
    from cqlstream.engine.operators.window import WindowOp

    return {
        WindowOp: _window,
        AggregateOp: _aggregate,
        JoinOp: _join,
        FilterOp: _stateless,
        ProjectOp: _stateless,
        PassOp: _stateless,
        HubMember: _stateless,
    }


SNAPSHOTS: dict = {}


def snapshot(plan, pn, at: int | None = None):
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
    if not SNAPSHOTS:
        SNAPSHOTS.update(_table())
    case = SNAPSHOTS.get(type(pn.op))
    b = None if case is None else case(plan, pn, at)
    return None if b is None else (b, at)


def snapshotable(plan, pn) -> bool:
    """Whether snapshot() can give pn's relation once data flows (without running it)."""
    from cqlstream.engine.operators.window import WindowOp, has_state

    if pn.op is None:
        return pn.key in plan.source_snapshots
    if id(pn.queue) in plan.stores or pn.store is not None:
        return True
    if not SNAPSHOTS:
        SNAPSHOTS.update(_table())
    case = SNAPSHOTS.get(type(pn.op))
    if case is None:
        return False
    if isinstance(pn.op, WindowOp):
        return has_state(pn.node.spec)
    if case is _stateless:
        return not pn.is_stream and snapshotable(plan, pn.inputs[0])
    if case is _join:
        return all(snapshotable(plan, k) for k in pn.inputs)
    return True
