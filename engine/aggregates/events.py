"""One step's events as an Aggregate operator's steps 2–7 read them (engine/operators/aggregate.py):
group ids, instants, signs and argument values in arrival order, with what holds for the whole
step (which float shadows are skipped, the probe's instants). One record, so the sequential path
and the parts of a batch (aggregate_parts.py) pass the same thing, and a part is `take` of it."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from cqlstream.engine.aggregates.quantities import Quantity


@dataclass(frozen=True)
class StepEvents:
    """Event arrays are in arrival order (ts non-decreasing), one entry per event."""

    gid: np.ndarray  # dense group id (int64)
    ts: np.ndarray  # instant (int64)
    sign: np.ndarray  # +1 / −1 as int64 (0 for the scalar row's weightless first event)
    av: tuple[np.ndarray, ...]  # per argument: values (the argument's dtype)
    an: tuple[np.ndarray, ...]  # per argument: not-NULL mask
    nulls_in: tuple[bool, ...]  # per argument: any NULL among the step's events
    skip: frozenset[Quantity]  # float shadows of int sums no cell needs (sum_bound.py)
    probe_ts: np.ndarray | None  # the probe stream's instants (None: not probed)

    def __len__(self) -> int:
        return len(self.gid)

    def take(self, sel: np.ndarray) -> StepEvents:
        """The events at positions `sel` (ascending: arrival order kept), e.g. one part's groups."""
        return StepEvents(
            self.gid.take(sel),
            self.ts.take(sel),
            self.sign.take(sel),
            tuple(a.take(sel) for a in self.av),
            tuple(m.take(sel) for m in self.an),
            self.nulls_in,
            self.skip,
            self.probe_ts,
        )
