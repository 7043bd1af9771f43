"""count, sum and avg (ALL or DISTINCT): invertible aggregates read off additive quantities.

A deletion subtracts what its insertion added, so these need no per-value state: the value at
every cell is a carried total plus a segmented cumulative sum (`quantities`). With DISTINCT the
weights are the argument's ±1 transitions in its group's multiset (a value entering / leaving
the group's set), so the same sums count and add each distinct value once.
"""

from __future__ import annotations

from typing import cast

import numpy as np

from cqlstream.cql.logical.expr import AggCall
from cqlstream.engine.aggregates.cells import Cells
from cqlstream.engine.aggregates.columns import as_dtype
from cqlstream.engine.aggregates.quantities import ROWS, Quantity
from cqlstream.engine.aggregates.strategy import AggregateStrategy


class Count(AggregateStrategy):
    """count(*) (the group's row count), count(x) and count(DISTINCT x): never NULL."""

    def __init__(self, call: AggCall, ai: int):
        super().__init__(call, ai)
        self.total = ROWS if call.arg is None else Quantity("count", ai, call.distinct)
        self.quantities = (self.total,)
        self.distinct_arg = call.arg is not None and call.distinct

    def values(self, cx: Cells) -> tuple[np.ndarray, np.ndarray]:
        return cast(np.ndarray, cx.totals[self.total]), np.zeros(cx.ncells, bool)


class Sum(AggregateStrategy):
    """sum(x) / sum(DISTINCT x): NULL while the group has no non-NULL value; an int64 for
    integers (exact, wrapping), a compensated float sum for floats."""

    def __init__(self, call: AggCall, ai: int):
        super().__init__(call, ai)
        assert call.arg is not None
        floating = call.arg.type.kind == "float"
        self.total = Quantity("sum", ai, call.distinct, floating)
        self.quantities = (self.total.count, self.total)
        self.distinct_arg = call.distinct

    def _count_and_total(self, cx: Cells) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        cnt = cast(np.ndarray, cx.totals[self.total.count])
        tot = cx.totals[self.total]
        if isinstance(tot, tuple):  # compensated float: (hi, lo)
            tot = tot[0]
        return cnt, tot, cnt <= 0

    def values(self, cx: Cells) -> tuple[np.ndarray, np.ndarray]:
        _, tot, null = self._count_and_total(cx)
        return as_dtype(np.where(null, 0, tot), self.dt), null


class Avg(Sum):
    """avg(x) / avg(DISTINCT x): sum / count as a float, NULL while the count is 0."""

    def values(self, cx: Cells) -> tuple[np.ndarray, np.ndarray]:
        cnt, tot, null = self._count_and_total(cx)
        with np.errstate(invalid="ignore", divide="ignore"):
            val = tot.astype(np.float64) / np.where(null, 1, cnt)
        return as_dtype(np.where(null, 0, val), self.dt), null
