"""Which operator class computes each kind of logical plan node (the planner builds it with
`cls.from_node`; the bounded-memory verdict asks `cls.state_class`). Modules of the stateful
operators are imported when first needed."""

from __future__ import annotations

from importlib import import_module

from cqlstream.cql.logical import nodes as L
from cqlstream.engine.operators.base import Operator
from cqlstream.engine.synopsis_plan import SynopsisAggregatePlan, SynopsisJoinPlan

# logical node type → (module under cqlstream.engine.operators, class name)
OPERATORS: dict[type, tuple[str, str]] = {
    L.Window: ("window", "WindowOp"),
    L.Filter: ("basic", "FilterOp"),
    L.Project: ("basic", "ProjectOp"),
    L.Sample: ("basic", "SampleOp"),
    L.Join: ("join", "JoinOp"),
    L.Aggregate: ("aggregate", "AggregateOp"),
    L.Distinct: ("relational", "DistinctOp"),
    L.SetOp: ("relational", "SetOpOp"),
    L.SemiJoin: ("semijoin", "SemiJoinOp"),
    L.RelToStream: ("r2s", "RelToStreamOp"),
    L.StreamJoin: ("stream_join", "StreamJoinOp"),
    SynopsisJoinPlan: ("synopsis_join", "SynopsisJoinOp"),
    SynopsisAggregatePlan: ("synopsis_aggregate", "SynopsisAggregateOp"),
}

_loaded: dict[type, type[Operator]] = {}


def operator_class(node: L.Plan) -> type[Operator] | None:
    """The Operator subclass computing `node`, or None for a source (nothing computes it)."""
    t = type(node)
    cls = _loaded.get(t)
    if cls is None:
        where = OPERATORS.get(t)
        if where is None:
            return None
        cls = _loaded[t] = getattr(import_module(f"cqlstream.engine.operators.{where[0]}"), where[1])
    return cls
