"""Remove projections that change nothing and merge a projection over a projection."""

from __future__ import annotations

from cqlstream.cql.logical import expr as X
from cqlstream.cql.logical import nodes as L


def remove_projections(node: L.Plan) -> L.Plan | None:
    if not isinstance(node, L.Project):
        return None
    child = node.input
    identity = len(node.exprs) == len(child.schema) and all(
        isinstance(e, X.ColRef) and e.index == i for i, e in enumerate(node.exprs)
    )
    if identity and tuple(node.names) == tuple(a.name for a in child.schema):
        return child
    if isinstance(child, L.Project):
        merged = tuple(X.remap(e, lambda c: child.exprs[c.index]) for e in node.exprs)
        return L.Project(child.input, merged, node.names, node.qualifiers)
    return None
