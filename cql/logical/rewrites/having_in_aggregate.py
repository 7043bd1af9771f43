"""A selection over a grouped aggregate's output becomes the aggregate's HAVING predicate.

σ_p(Aggregate) keeps the aggregate's output elements whose row satisfies p: the `−` of an old
row where p held of it, the `+` of a new row where p holds of it, in the aggregate's order. The
aggregate can apply p itself to the rows it is about to emit (`Aggregate.having`,
engine/operators/aggregate.py) and emit exactly those elements, the same batches in the same
order, without building the rows p rejects or a selection pass over them — in Linear Road
`VehPos` (one group per vehicle and position over a 120 s window, 1.3M changes at 720k) under
`where Num = 4`, which keeps 48 of them.

Only grouped aggregates (a scalar aggregate's single row is cheap to build). A second selection
over an aggregate that has a HAVING already is added to it (a conjunction). The filter is the
aggregate's only reader in the plan tree; a query elsewhere reading the same aggregate without the
selection gets its own, unfiltered, operator (different plan nodes are never shared).
"""

from __future__ import annotations

from dataclasses import replace

from cqlstream.cql.logical import expr as X
from cqlstream.cql.logical import nodes as L


def having_in_aggregate(node: L.Plan) -> L.Plan | None:
    if not (isinstance(node, L.Filter) and isinstance(node.input, L.Aggregate) and node.input.keys):
        return None
    agg = node.input
    return replace(agg, having=X.conjunction(X.conjuncts(agg.having) + X.conjuncts(node.predicate)))
