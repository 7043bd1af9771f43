"""`Rstream(S [Now] ⋈ X)` (through selections and projections) becomes one `StreamJoin` node.

Under Rstream a `[Now]` side makes only the instants where S has tuples produce anything: at t the
result is S(t) ⋈ X(t). The general join processes every insert and expiry of the `[Now]` window and
every change of X as delta events, and the Rstream re-expands the result; the stream–relation
join (engine/operators/stream_join.py) keeps X's live rows and has each S tuple probe them as of
its instant. When X is not arrival-ordered (cql/logical/instant_order.py) the Rstream emits an
instant's rows by value: the node then carries the plan's output columns as expressions over its
own (`StreamJoin.order`) and sorts each instant's rows by them. Selections and projections are per tuple, so they commute with Rstream (a tuple of
R(t) maps to a tuple of the projected R(t), in the same insertion order): they stay above the new
node (selections directly above the join join its predicate). Exact in both modes: the operator gives the Rstream's order within an instant and, in compat
mode, its silence at the last instant. Binary joins only, with a `[Now]` window (no slide) over a
stream as one input; with two such inputs the first is the probing stream. Aggregates that X
reads only for the join get S as their probe (cql/logical/probe_aggregates.py): they emit net changes.

When X is itself a Range window (no slide) over a stream — Linear Road's `SegChangeStr` self-join
`CommonInputStr [Now] ⋈ CommonInputStr [Range 30 Seconds]` — the node reads that stream directly
(`StreamJoin.window`, the band join, engine/operators/band_join.py): a tuple's lifetime in the
window is known from its timestamp alone, so the join finds the pairs by a band search on ts
without the window's insert and delete events. Row, Partition By and sliding windows keep the
window (a Rows tuple's expiry depends on later arrivals), and so does an Unbounded window (its
state never shrinks, so nothing is saved).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from cqlstream.cql.logical import expr as X
from cqlstream.cql.logical import nodes as L
from cqlstream.cql.logical.instant_order import arrival_ordered
from cqlstream.cql.logical.probe_aggregates import probe_aggregates


def stream_join(node: L.Plan) -> L.Plan | None:
    if not (isinstance(node, L.RelToStream) and node.op == "rstream"):
        return None
    chain, base = [], node.input
    while isinstance(base, (L.Filter, L.Project)):
        chain.append(base)
        base = base.input
    if not (isinstance(base, L.Join) and len(base.inputs_) == 2):
        return None
    predicate = base.predicate
    while chain and isinstance(chain[-1], L.Filter):  # a selection over a join is part of its predicate
        f = chain.pop()
        assert isinstance(f, L.Filter)
        predicate = X.conjoin([*X.conjuncts(predicate), *X.conjuncts(f.predicate)])
    now = [k for k, i in enumerate(base.inputs_) if isinstance(i, L.Window) and i.spec == L.RangeSpec(0)]
    if not now:
        return None
    k = now[0]
    window = base.inputs_[k]
    assert isinstance(window, L.Window)
    other = base.inputs_[1 - k]
    band = band_window(other)
    if band is not None:  # read the window's stream directly (the band join)
        assert isinstance(other, L.Window)
        x = other.input
    else:
        x = probe_aggregates(other, window.input)  # aggregates read only at S's instants
    inputs = tuple(window.input if j == k else x for j in range(2))
    order = None if arrival_ordered(other) else output_exprs(base, chain)
    out: L.Plan = L.StreamJoin(inputs, k, predicate, band, order)
    for n in reversed(chain):
        out = replace(n, input=out)
    return out


def output_exprs(join: L.Join, chain: Sequence[L.Plan]) -> tuple[X.Expr, ...]:
    """The plan's output columns as expressions over the join's columns, through the projections
    of `chain` (top first; selections keep the columns): what the Rstream of the unfused plan sorts
    by value when X is not arrival-ordered (cql/logical/instant_order.py)."""
    exprs: tuple[X.Expr, ...] = tuple(X.ColRef(i, a.type, a.name) for i, a in enumerate(join.schema))
    for n in reversed(chain):
        if isinstance(n, L.Project):
            exprs = _through(n, exprs)
    return exprs


def _through(project: L.Project, below: tuple[X.Expr, ...]) -> tuple[X.Expr, ...]:
    """The projection's expressions with each column read replaced by its expression `below`."""
    return tuple(X.remap(e, lambda c: below[c.index]) for e in project.exprs)


def band_window(x: L.Plan) -> L.RangeSpec | None:
    """The spec of a Range window without slide (Now included) over a stream, which the band join
    reads through its stream, or None."""
    spec = x.spec if isinstance(x, L.Window) else None
    if isinstance(spec, L.RangeSpec) and spec.size is not None and spec.slide is None:
        return spec
    return None
