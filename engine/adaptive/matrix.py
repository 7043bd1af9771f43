"""The matrix view V of A-Greedy (thesis §4.3.2): for the current order, V[r, c] (c ≥ r, 0-based
positions) counts the profile tuples that the conjunct at position c drops among those that the
conjuncts at positions before r all pass, so V[r, c] ∝ d(c | r−1). Kept incrementally: adding
or expiring a block of profile tuples adds or subtracts its counts (one matrix product)."""

from __future__ import annotations

import numpy as np


def counts(rows: np.ndarray, order: list[int]) -> np.ndarray:
    """V's contribution of the profile tuples `rows` (drop bits in original numbering)."""
    n = len(order)
    if not len(rows):
        return np.zeros((n, n), dtype=np.int64)
    pos = rows[:, order].astype(np.int64)  # columns in position order
    alive = np.ones_like(pos)
    alive[:, 1:] = np.cumsum(pos, axis=1)[:, :-1] == 0  # passed every earlier position
    return np.triu(alive.T @ pos)


def row(rows: np.ndarray, order: list[int], r: int) -> np.ndarray:
    """Row r of V recomputed from the window (the full scan of Fig 4.7), as a length-n vector."""
    pos = rows[:, order]
    alive = ~pos[:, :r].any(axis=1)
    out = pos[alive].sum(axis=0).astype(np.int64)
    out[:r] = 0
    return out


class MatrixView:
    def __init__(self, n: int) -> None:
        self.v = np.zeros((n, n), dtype=np.int64)

    def update(self, added: np.ndarray, expired: np.ndarray, order: list[int]) -> None:
        self.v += counts(added, order) - counts(expired, order)

    def rebuild(self, rows: np.ndarray, order: list[int]) -> None:
        self.v = counts(rows, order)

    def ranks(self, costs: np.ndarray, order: list[int]) -> np.ndarray:
        """V[r, c] / a_f(c): conditional drop count per unit cost (the greedy rank)."""
        return self.v / costs[order][None, :]
