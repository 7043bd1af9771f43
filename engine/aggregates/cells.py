"""What one batch gives the aggregate strategies: its events in (group, ts) order cut into
*cells* (one group at one instant; a cell's end is its last event), the argument values, and
what the shared machinery derived from them (multiset transitions and extremes, additive
totals), all as numpy arrays."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from cqlstream.engine.aggregates.events import StepEvents
from cqlstream.engine.aggregates.quantities import Quantity, Totals


@dataclass
class Cells:
    """One batch, prepared. Event arrays are in arrival order unless named s* (sorted by
    (gid, ts): `order` maps sorted positions to events); cell arrays have one entry per cell.
    (A probed operator whose values are all read off totals cuts cells per probe interval, not
    per instant: AggregateOp's module docstring.)"""

    n: int  # events
    order: np.ndarray  # sorted position → event
    sg: np.ndarray  # sorted events' group ids
    cend: np.ndarray  # sorted event ends its cell (bool)
    ce: np.ndarray  # sorted position of every cell's last event
    cell_g: np.ndarray  # group id per cell
    cell_ts: np.ndarray  # instant per cell
    first: np.ndarray | None  # per cell, the number of its group's first cell (None: every cell is one)
    ev: StepEvents  # the events (arrival order): signs, argument values, not-NULL masks
    ssign: np.ndarray  # ev.sign[order]
    trans: dict[int, np.ndarray] = field(default_factory=dict)  # argument → ±1 distinct transitions
    extremes: dict[tuple[int, str], tuple[np.ndarray, np.ndarray]] = field(default_factory=dict)
    totals: dict[Quantity, Totals] = field(default_factory=dict)  # quantity → per-cell totals

    @property
    def ncells(self) -> int:
        return len(self.ce)

    def group_base(self, ends: np.ndarray) -> np.ndarray:
        """`group_base(ends, self.first)`."""
        return group_base(ends, self.first)


def group_base(ends: np.ndarray, first: np.ndarray | None) -> np.ndarray:
    """Per cell, a prefix sum's value before its group's first event, given its values `ends` at
    the cell ends and each cell's group's first cell `first` (None: every cell is one): the
    previous cell's end (cells cover the sorted events in order, so a group's first cell follows
    the previous group's last), 0 for the first cell, carried to the group's later cells — a
    shift and, only where groups have several cells, one gather at cell level."""
    base = np.empty_like(ends)
    if len(ends):
        base[0] = 0
        base[1:] = ends[:-1]
    return base if first is None else base.take(first)
