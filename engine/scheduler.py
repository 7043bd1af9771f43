"""Schedulers: which operator runs next and with how much work (pluggable; Chain comes later)."""
from __future__ import annotations


class RoundRobin:
    """Visit operators in plan order (producers before consumers), each with a work budget,
    until a full pass does nothing."""

    name = "round-robin"

    def __init__(self, budget: int | None = None):
        self.budget = budget

    def run(self, operators, max_passes: int | None = None) -> int:
        total, passes = 0, 0
        while True:
            done = 0
            for op in operators:
                if op.active:
                    done += op.step(self.budget)
            total += done
            passes += 1
            if not done or (max_passes is not None and passes >= max_passes):
                return total
