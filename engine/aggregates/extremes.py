"""min and max with deletions: read from the argument's per-group multiset, which keeps every
live value with its count, so the extreme stays exact when the current one leaves the window."""

from __future__ import annotations

import numpy as np

from cqlstream.engine.aggregates.cells import Cells
from cqlstream.engine.aggregates.columns import as_dtype
from cqlstream.engine.aggregates.strategy import AggregateStrategy


class Extreme(AggregateStrategy):
    """The smallest ('min') or largest ('max') live value of the group; NULL when it has none."""

    kind = "min"

    @property
    def extremes(self) -> tuple[str, ...]:  # type: ignore[override]
        return (self.kind,)

    def values(self, cx: Cells) -> tuple[np.ndarray, np.ndarray]:
        vals, valid = cx.extremes[(self.ai, self.kind)]
        return as_dtype(vals, self.dt), ~valid


class Min(Extreme):
    kind = "min"


class Max(Extreme):
    kind = "max"
