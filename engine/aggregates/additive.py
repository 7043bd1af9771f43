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

    interval_cells = True
    never_null = True

    def __init__(self, call: AggCall, ai: int):
        super().__init__(call, ai)
        self.total = ROWS if call.arg is None else Quantity("count", ai, call.distinct)
        self.quantities = (self.total,)
        self.distinct_arg = call.arg is not None and call.distinct

    def values(self, cx: Cells) -> tuple[np.ndarray, np.ndarray]:
        return cast(np.ndarray, cx.totals[self.total]), np.zeros(cx.ncells, bool)


class Sum(AggregateStrategy):
    """sum(x) / sum(DISTINCT x): NULL while the group has no non-NULL value; a compensated float
    sum for floats; for integers an int64, NULL while the exact sum is outside the int64 range.

    The integer total is carried modulo 2^64 (exact whenever the true sum fits, even after it left
    the range and came back); the same sum carried as a compensated float (`shadow`) tells the
    two apart: when the true sum fits, the two differ by rounding only; when it does not, the
    wrapped int64 is a multiple of 2^64 away from it."""

    interval_cells = True

    def __init__(self, call: AggCall, ai: int):
        super().__init__(call, ai)
        assert call.arg is not None
        floating = call.arg.type.kind == "float"
        self.total = Quantity("sum", ai, call.distinct, floating)
        self.shadow = None if floating else Quantity("sum", ai, call.distinct, True)
        self.quantities = (self.total.count, self.total) + ((self.shadow,) if self.shadow else ())
        self.distinct_arg = call.distinct

    def _count_and_total(self, cx: Cells) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        cnt = cast(np.ndarray, cx.totals[self.total.count])
        tot = cx.totals[self.total]
        if isinstance(tot, tuple):  # compensated float: (hi, lo)
            tot = tot[0]
        return cnt, tot, cnt <= 0

    def _outside_int64(self, cx: Cells, tot: np.ndarray) -> tuple[np.ndarray | None, np.ndarray | None]:
        """(cells whose exact integer sum is outside int64, the float sum per cell); (None, None) for
        floats, and while no sum can be outside int64 (the shadow skipped: sum_bound.py)."""
        if self.shadow is None or self.shadow not in cx.totals:
            return None, None
        hi = cast(tuple[np.ndarray, np.ndarray], cx.totals[self.shadow])[0]
        with np.errstate(invalid="ignore", over="ignore"):
            return np.abs(tot.astype(np.float64) - hi) > _WRAPPED, hi

    def values(self, cx: Cells) -> tuple[np.ndarray, np.ndarray]:
        _, tot, null = self._count_and_total(cx)
        out, _ = self._outside_int64(cx, tot)
        if out is not None and out.any():
            null = null | out
        return as_dtype(np.where(null, 0, tot), self.dt), null


# far more than the rounding of a float sum, far less than the 2^64 a wrapped int64 sum is off by
_WRAPPED = float(1 << 62)


class Avg(Sum):
    """avg(x) / avg(DISTINCT x): sum / count as a float, NULL while the count is 0."""

    def values(self, cx: Cells) -> tuple[np.ndarray, np.ndarray]:
        cnt, tot, null = self._count_and_total(cx)
        out, hi = self._outside_int64(cx, tot)
        if out is not None and hi is not None and out.any():
            tot = np.where(out, hi, tot)
        if tot.dtype.kind == "i":
            return as_dtype(_int_avg(tot, cnt, null), self.dt), null
        val = np.zeros(len(cnt), np.float64)  # 0 under NULL; one division elsewhere (float64 / float64)
        np.divide(tot, cnt, out=val, where=~null, casting="unsafe")
        return as_dtype(val, self.dt), null


def _int_avg(tot: np.ndarray, cnt: np.ndarray, null: np.ndarray) -> np.ndarray:
    """tot / cnt as float64 where the count is > 0, exactly 0.0 under NULL (`null`: cnt ≤ 0), for
    int64 totals: the same float64 division as `np.divide(tot, cnt, where=~null)` into zeros, with
    no masked loop (numpy's `where=` and masked selects are ~10x slower than the division on a
    mask without pattern: SMVAvgRel's ~45k cells a call). A NULL cell divides 0 by 1: +0.0."""
    num = tot * ~null  # int64 × bool: the total, or 0 under NULL (exact, no branch)
    den = np.maximum(cnt, 1)
    return np.divide(num, den)
