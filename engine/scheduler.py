"""Schedulers: which operator runs next and with how much work (pluggable; Chain comes later)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from cqlstream.engine.operators.base import Operator

Weights = Callable[[], dict[int, float]]  # → {id(operator): weight}
Check = Callable[[], bool]  # called after each operator call that did work; True stops the run


class RoundRobin:
    """Visit operators in plan order (producers before consumers), each with a work budget,
    until a full pass does nothing. `check` (per-query memory limits, engine/limits.py) is called
    after each operator call that did work; when it returns True the run stops there, so the
    caller can act (suspend a query) before any other operator runs."""

    name = "round-robin"

    def __init__(self, budget: int | None = None) -> None:
        self.budget = budget

    def run(self, operators: Sequence[Operator], max_passes: int | None = None, check: Check | None = None) -> int:
        total, passes = 0, 0
        while True:
            done = 0
            for op in operators:
                if op.active:
                    n = op.step(self.budget)
                    done += n
                    if n and check is not None and check():
                        return total + done
            total += done
            passes += 1
            if not done or (max_passes is not None and passes >= max_passes):
                return total


class Weighted(RoundRobin):
    """Round robin whose per-call budget for an operator scales with the largest weight of the
    queries using it (seed 004 §2.4): heavier queries get more work per pass. Results never
    depend on it (operators process whole instants)."""

    name = "weighted"

    def __init__(self, budget: int | None = None, weights: Weights | None = None) -> None:
        super().__init__(budget)
        self.weights: Weights = weights or (lambda: {})

    def run(self, operators: Sequence[Operator], max_passes: int | None = None, check: Check | None = None) -> int:
        total, passes = 0, 0
        w = self.weights() if self.budget is not None else {}
        while True:
            done = 0
            for op in operators:
                if op.active:
                    b = None if self.budget is None else max(1, int(self.budget * w.get(id(op), 1.0)))
                    n = op.step(b)
                    done += n
                    if n and check is not None and check():
                        return total + done
            total += done
            passes += 1
            if not done or (max_passes is not None and passes >= max_passes):
                return total


SCHEDULERS = {"round-robin": RoundRobin, "weighted": Weighted}
