"""Rstream over filters/projections of a `[Now]` window is the (filtered, projected) stream itself.

Rstream(S [Now])(t) emits exactly the tuples of S with τ = t (CQL's Rstream-Now equivalence).
"""

from __future__ import annotations

from dataclasses import replace

from cqlstream.cql.logical import nodes as L


def rstream_now(node: L.Plan) -> L.Plan | None:
    if not (isinstance(node, L.RelToStream) and node.op == "rstream"):
        return None
    chain, base = [], node.input
    while isinstance(base, (L.Filter, L.Project)):
        chain.append(base)
        base = base.input
    if not (isinstance(base, L.Window) and base.spec == L.RangeSpec(0)):
        return None
    out = base.input
    for n in reversed(chain):
        out = replace(n, input=out)
    return out
