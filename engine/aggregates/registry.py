"""The aggregate registry: function name → strategy class. Names not listed here are resolved
in the function catalog as user-defined aggregates."""

from __future__ import annotations

from cqlstream.cql.functions import APPROX_QUANTILES, FunctionRegistry
from cqlstream.cql.logical.expr import AggCall
from cqlstream.engine.aggregates.additive import Avg, Count, Sum
from cqlstream.engine.aggregates.extremes import Max, Min
from cqlstream.engine.aggregates.sketch_quantile import ApproxQuantile
from cqlstream.engine.aggregates.strategy import AggregateStrategy
from cqlstream.engine.aggregates.udaf import Udaf
from cqlstream.engine.errors import EngineError

STRATEGIES: dict[str, type[AggregateStrategy]] = {
    "count": Count,
    "sum": Sum,
    "avg": Avg,
    "min": Min,
    "max": Max,
    **dict.fromkeys(APPROX_QUANTILES, ApproxQuantile),  # KLL panes (sketch_quantile.py)
}


def strategy_for(call: AggCall, ai: int, functions: FunctionRegistry) -> AggregateStrategy:
    """The strategy computing `call` over argument `ai`; `functions` (a FunctionRegistry) gives
    user-defined aggregates their implementation."""
    name = call.func.lower()
    cls = STRATEGIES.get(name)
    if cls is not None:
        return cls(call, ai)
    fn = functions.aggregate(name)
    if fn is None or fn.impl is None:
        raise EngineError("no_implementation", f"aggregate {call.func}() has no implementation")
    return Udaf(call, ai, fn.impl)
