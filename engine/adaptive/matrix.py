"""The matrix view V of A-Greedy (thesis §4.3.2): for the current order, V[r, c] (c ≥ r, 0-based
positions) counts the profile tuples that the conjunct at position c drops among those that the
conjuncts at positions before r all pass, so V[r, c] ∝ d(c | r−1). Kept incrementally: adding
or expiring a block of profile tuples adds or subtracts its counts.

A block's counts in a fixed number of numpy calls per position, whatever its size: with A[r] the
tuples passed by every position before r and D[c] those the position c drops (one row per
position, a column per profile tuple), V[r, c] = Σ A[r]·D[c], one matrix product; A[r] is zero
where an earlier position dropped, so V is zero below the diagonal, and a tuple first dropped at
position f counts in V[r, c] for every r ≤ f and every c dropping it: Fig 4.5's per-tuple update
(`for r in 1..dc: V[r][c] += 1`). Counts are whole numbers in float64, exact below 2**53."""

from __future__ import annotations

import numpy as np


def counts(rows: np.ndarray, order: list[int]) -> np.ndarray:
    """V's contribution of the profile tuples `rows` (drop bits in original numbering)."""
    n = len(order)
    if not len(rows):
        return np.zeros((n, n), dtype=np.int64)
    drops = rows[:, order].T.astype(np.float64)  # D: a row per position
    alive = np.empty_like(drops)  # A
    alive[0] = 1.0
    for r in range(1, n):
        np.multiply(alive[r - 1], 1.0 - drops[r - 1], out=alive[r])
    return np.rint(alive @ drops.T).astype(np.int64)


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

    def update(
        self, added: np.ndarray, expired: np.ndarray, order: list[int], window: np.ndarray | None = None
    ) -> None:
        """Add the counts of `added` and take out those of `expired`. Given the `window` after
        the change, it is counted anew instead when that is fewer rows (a pass as large as the
        window replaces most of it): the same integers either way."""
        if window is not None and len(expired) and len(added) + len(expired) >= len(window):
            self.v = counts(window, order)
        elif len(expired):
            self.v += counts(added, order) - counts(expired, order)
        else:
            self.v += counts(added, order)

    def rebuild(self, rows: np.ndarray, order: list[int]) -> None:
        self.v = counts(rows, order)

    def ranks(self, costs: np.ndarray, order: list[int]) -> np.ndarray:
        """V[r, c] / a_f(c): conditional drop count per unit cost (the greedy rank)."""
        return self.v / costs[order]  # (broadcast along the rows)
