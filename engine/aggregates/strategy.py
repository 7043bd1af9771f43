"""The aggregate strategy protocol: what one aggregate call needs from a batch and how it turns
that into its value at every cell."""

from __future__ import annotations

from abc import ABC, abstractmethod

import numpy as np

from cqlstream.cql.logical.expr import AggCall
from cqlstream.engine.aggregates.cells import Cells
from cqlstream.engine.aggregates.quantities import Quantity
from cqlstream.engine.batch import dtype_of


class AggregateStrategy(ABC):
    """One aggregate call of an Aggregate operator, over argument `ai` (−1: none, count(*)).

    Declares its needs (shared among the calls of the operator and computed once per batch):
    `quantities` (additive running totals), `distinct_arg` (the ±1 transitions of its argument's
    per-group multiset) and `extremes` ('min'/'max' of that multiset at every cell). `values`
    then gives its output column per cell: (values of dtype `self.dt`, NULL mask).

    Strategies whose state is not in quantities or multisets (UDAFs) keep it per group and
    override `stateful`, `forget`, `remap` and `nbytes`."""

    quantities: tuple[Quantity, ...] = ()
    distinct_arg: bool = False
    extremes: tuple[str, ...] = ()
    stateful = False
    # its value at a cell is read off the quantities' totals there alone (not the cells before it
    # in the batch), so a probed operator may make a cell of a group's whole probe interval
    interval_cells = False
    # its value is never NULL (count): its NULL flags are neither read nor carried (GroupState.null_free)
    never_null = False

    def __init__(self, call: AggCall, ai: int):
        self.call = call
        self.ai = ai
        self.dt = dtype_of(call.type)

    @property
    def multiset(self) -> bool:
        """Whether it reads its argument's multiset."""
        return self.distinct_arg or bool(self.extremes)

    @abstractmethod
    def values(self, cx: Cells) -> tuple[np.ndarray, np.ndarray]:
        """Its output column at every cell of `cx`: (values of dtype `self.dt`, NULL mask)."""

    def forget(self, gids: list[int]) -> None:
        """Groups that became empty (only a `stateful` strategy keeps anything per group)."""
        return

    def remap(self, remap: np.ndarray) -> None:
        """Groups renumbered (old id → new id, −1 for dropped ones); see `forget`."""
        return

    def nbytes(self) -> int:
        return 0
