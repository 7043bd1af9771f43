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
    cell_gs: np.ndarray  # first sorted position of the cell's group
    ev: StepEvents  # the events (arrival order): signs, argument values, not-NULL masks
    ssign: np.ndarray  # ev.sign[order]
    trans: dict[int, np.ndarray] = field(default_factory=dict)  # argument → ±1 distinct transitions
    extremes: dict[tuple[int, str], tuple[np.ndarray, np.ndarray]] = field(default_factory=dict)
    totals: dict[Quantity, Totals] = field(default_factory=dict)  # quantity → per-cell totals

    @property
    def ncells(self) -> int:
        return len(self.ce)
