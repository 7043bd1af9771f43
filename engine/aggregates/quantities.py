"""Additive quantities: per-group running totals that are segmented cumulative sums of signed
per-event weights (row count, count(x), sum(x), and their DISTINCT forms).

A quantity is read at the end of every *cell* (one group at one instant) of a batch: the carried
per-group total plus the cumulative weight of the cell's group up to the cell's last event. Integer
totals are exact int64 (a wrapping prefix sum, differences exact); float sums are compensated
(`exact_sum`). Aggregates that read the same quantity share it (count(x) and sum(x) both need the
count of x, to tell an empty group's NULL apart).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from cqlstream.engine.aggregates.exact_sum import fsum_cells

if TYPE_CHECKING:
    from cqlstream.engine.aggregates.cells import Cells
    from cqlstream.engine.aggregates.group_state import GroupState


@dataclass(frozen=True)
class Quantity:
    """`measure` 'rows' (the group's row count), 'count' (non-NULL values of argument `ai`) or
    'sum' (their sum); `distinct`: each distinct value once (weights are the value's ±1
    transitions in its group's multiset instead of the event signs); `floating`: a float sum,
    carried as a compensated (hi, lo) pair."""

    measure: str
    ai: int = -1
    distinct: bool = False
    floating: bool = False

    @property
    def count(self) -> Quantity:
        """The count of the same values (a sum is NULL while it is 0)."""
        return Quantity("count", self.ai, self.distinct)


ROWS = Quantity("rows")

# a quantity's per-cell totals: int64, or (hi, lo) float64 for a compensated float sum
Totals = np.ndarray | tuple[np.ndarray, np.ndarray]


def _rows(q: Quantity, cx: Cells) -> np.ndarray:
    return cx.ssign


def _count(q: Quantity, cx: Cells) -> np.ndarray:
    if q.distinct:
        return cx.trans[q.ai].take(cx.order)
    return cx.ssign * cx.ev.an[q.ai].take(cx.order)


def _sum(q: Quantity, cx: Cells) -> np.ndarray:
    weight = cx.trans[q.ai] if q.distinct else cx.ev.sign
    av = cx.ev.av[q.ai]
    if q.floating:  # also an integer argument's float sum: -(-2^63) must not wrap
        av = av.astype(np.float64, copy=False)
    x = (np.where(cx.ev.an[q.ai], av, 0) if cx.ev.nulls_in[q.ai] else av) * weight
    return x.take(cx.order)


# measure → the per-event weights (in (gid, ts) order) whose cumulative sum is the quantity
WEIGHTS: dict[str, Callable[[Quantity, Cells], np.ndarray]] = {"rows": _rows, "count": _count, "sum": _sum}


def cell_totals(
    quantities: list[Quantity], cx: Cells, state: GroupState, skip: frozenset[Quantity] = frozenset()
) -> None:
    """Every quantity's total at the end of every cell, into cx.totals (int64 per cell, or a
    (hi, lo) pair of float64 per cell for float sums), except those in `skip` (sum_bound.py:
    shadows no cell needs). ROWS must come first."""
    deltas: dict[Quantity, np.ndarray] = {}  # int quantity → its change over each cell
    cg = cx.cell_g
    for q in quantities:
        if q in skip:
            continue
        if q in state.rows_counts:  # no NULL x ever counted: the row count's totals (GroupState)
            cx.totals[q] = cx.totals[ROWS]
            continue
        if q.measure == "count" and not q.distinct and not cx.ev.nulls_in[q.ai]:
            deltas[q] = deltas[ROWS]  # no NULLs in this batch: same change as the rows
            cx.totals[q] = tot = state.totals[q].take(cg)
            tot += deltas[q]
            continue
        w = WEIGHTS[q.measure](q, cx)
        if q.floating:
            cx.totals[q] = fsum_cells(
                w.astype(np.float64, copy=False), cx.ce, cx.group_base, state.fsum_hi[q][cg], state.fsum_lo[q][cg]
            )
        else:
            cs = np.empty(cx.n + 1, np.int64)
            cs[0] = 0
            np.cumsum(w, out=cs[1:])
            ends = cs[1:] if cx.ncells == cx.n else cs.take(cx.ce + 1)  # every event ends a cell: no gather
            deltas[q] = d = ends - cx.group_base(ends)
            cx.totals[q] = tot = state.totals[q].take(cg)
            tot += d
