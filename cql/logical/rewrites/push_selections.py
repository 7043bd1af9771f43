"""Push selections toward the sources: split conjuncts over join inputs, below time-based windows,
through projections, relation-to-stream operators and the left side of semijoins; merge stacked
filters. Never below `Rows`/`Partition` windows (a filter there changes which tuples are last).
"""

from __future__ import annotations

from dataclasses import replace

from cqlstream.cql.logical import expr as X
from cqlstream.cql.logical import nodes as L


def push_selections(node: L.Plan) -> L.Plan | None:
    if isinstance(node, L.Join) and node.predicate is not None:
        return _into_join(node, X.conjuncts(node.predicate))
    if not isinstance(node, L.Filter):
        return None
    child, pred = node.input, node.predicate
    if isinstance(child, L.Filter):
        return L.Filter(child.input, X.conjunction(X.conjuncts(child.predicate) + X.conjuncts(pred)))
    if isinstance(child, L.Join):
        return _into_join(child, X.conjuncts(child.predicate) + X.conjuncts(pred), always=True)
    if isinstance(child, L.Window) and child.spec.time_based:
        return replace(child, input=L.Filter(child.input, pred))
    if isinstance(child, L.Project):
        inner = X.remap(pred, lambda c: child.exprs[c.index])
        return replace(child, input=L.Filter(child.input, inner))
    if isinstance(child, L.RelToStream):
        return replace(child, input=L.Filter(child.input, pred))
    if isinstance(child, L.SemiJoin):
        width = len(child.left.schema)
        left = [c for c in X.conjuncts(pred) if max(X.columns(c), default=-1) < width]
        if left:
            rest = [c for c in X.conjuncts(pred) if c not in left]
            moved = replace(child, left=L.Filter(child.left, X.conjunction(left)))
            return L.Filter(moved, X.conjunction(rest)) if rest else moved
    return None


def _into_join(join: L.Join, parts: list[X.Expr], always: bool = False) -> L.Plan | None:
    """Conjuncts reading one input move onto it; constant ones stay; the rest become the join predicate."""
    offsets = join.offsets()
    widths = [len(i.schema) for i in join.inputs_]
    per_input: list[list[X.Expr]] = [[] for _ in join.inputs_]
    keep = []
    for c in parts:
        cols = X.columns(c)
        owners = {k for k, (o, w) in enumerate(zip(offsets, widths)) for i in cols if o <= i < o + w}
        if len(owners) == 1:
            k = owners.pop()
            per_input[k].append(X.shift(c, -offsets[k]))
        else:
            keep.append(c)
    if not any(per_input) and not always:
        return None
    inputs = tuple(L.Filter(i, X.conjunction(p)) if p else i for i, p in zip(join.inputs_, per_input))
    return L.Join(inputs, X.conjoin(keep))
