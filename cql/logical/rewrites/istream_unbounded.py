"""Istream over filters/projections of an Unbounded window is the (filtered, projected) stream itself.

Istream(R)(t) = R(t) − R(t−1); over `S [Range Unbounded]` that difference is exactly the tuples of
S with τ = t, so `select A from S where A > 1` needs no window state at all.
"""

from __future__ import annotations

from dataclasses import replace

from cqlstream.cql.logical import nodes as L


def istream_unbounded(node: L.Plan) -> L.Plan | None:
    if not (isinstance(node, L.RelToStream) and node.op == "istream"):
        return None
    chain, base = [], node.input
    while isinstance(base, (L.Filter, L.Project)):
        chain.append(base)
        base = base.input
    if not (isinstance(base, L.Window) and base.unbounded and isinstance(base.spec, L.RangeSpec | L.RowsSpec)):
        return None
    out = base.input
    for n in reversed(chain):
        out = replace(n, input=out)
    return out
