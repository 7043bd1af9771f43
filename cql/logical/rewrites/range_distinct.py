"""`DISTINCT(S [Range N])` reads S directly: one node, no window (`Distinct.window`).

A value is in DISTINCT(S [Range N]) at t iff its latest arrival τ ≤ t is still in the window at t
(t < τ + life, `window_kinds.range_life`: the window code's bound rule, both modes). So the
operator (engine/operators/range_distinct.py) keeps each distinct value's last-seen instant: a
value arriving while absent gives `+`, and one whose last arrival leaves the window gives `−` at
the instant the window would have deleted its last copy. The window's inserts and deletes, and
the DISTINCT's per-copy counts, are never made. Output, ids and order are the DistinctOp's over
the window. Range windows without slide only (Now included): a Rows, Partition or sliding
window's expiry is not a function of the arrival instant alone, and Unbounded expires nothing.
A projection choosing columns between the DISTINCT and the window goes below the window with it
(the chosen columns of the window's tuples are the window of the stream's chosen columns);
one computing expressions stays above, with the window.
A window other queries read too stays for them (plans are shared by equality: only this
DISTINCT's reading of it changes).
"""

from __future__ import annotations

from dataclasses import replace

from cqlstream.cql.logical import expr as X
from cqlstream.cql.logical import nodes as L
from cqlstream.cql.logical.rewrites.stream_join import band_window


def range_distinct(node: L.Plan) -> L.Plan | None:
    if not isinstance(node, L.Distinct) or node.window is not None:
        return None
    chain, x = [], node.input
    while isinstance(x, L.Project) and all(isinstance(e, X.ColRef) for e in x.exprs):
        chain.append(x)  # a choice of columns: the same over the window's tuples or the stream's
        x = x.input
    spec = fused_window(x)
    if spec is None:
        return None
    assert isinstance(x, L.Window)
    out = x.input
    for p in reversed(chain):
        out = replace(p, input=out)
    return replace(node, input=out, window=spec)


def fused_window(x: L.Plan) -> L.RangeSpec | None:
    """The spec of a Range window without slide over a stream, which the DISTINCT reads through
    its stream, or None."""
    return band_window(x)
