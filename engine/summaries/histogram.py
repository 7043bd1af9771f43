"""Equi-depth histogram: bucket boundaries chosen so each bucket holds about the same number of
items, kept up to date under a stream. A batch is counted into the current buckets with one
searchsorted + bincount; whenever the fullest bucket grows past twice its share, the boundaries
are recomputed from the piecewise-linear cumulative count (values spread evenly inside a
bucket). Range counts are answered by the same interpolation."""

from __future__ import annotations

import numpy as np


class EquiDepth:
    def __init__(self, buckets: int = 32) -> None:
        self.b = buckets
        self.edges = np.zeros(0, np.float64)  # b + 1 boundaries once the first batch is seen
        self.counts = np.zeros(0, np.float64)
        self.n = 0
        self.rebuilds = 0

    def nbytes(self) -> int:
        return int(self.edges.nbytes + self.counts.nbytes)

    def update(self, values: np.ndarray) -> None:
        v = values.astype(np.float64)
        if not len(v):
            return
        self.n += len(v)
        if not len(self.edges):
            self.edges = np.quantile(v, np.linspace(0, 1, self.b + 1))
            self.counts = np.zeros(self.b)
        lo, hi = float(v.min()), float(v.max())
        if lo < self.edges[0] or hi > self.edges[-1]:  # widen the end buckets
            self.edges[0], self.edges[-1] = min(lo, self.edges[0]), max(hi, self.edges[-1])
        i = np.clip(np.searchsorted(self.edges, v, side="right") - 1, 0, self.b - 1)
        self.counts += np.bincount(i, minlength=self.b)
        if self.counts.max() > 2.0 * self.n / self.b:
            self._rebalance()

    def _cdf(self, x: np.ndarray) -> np.ndarray:
        cum = np.concatenate([[0.0], np.cumsum(self.counts)])
        return np.interp(x, self.edges, cum)

    def _rebalance(self) -> None:
        cum = np.concatenate([[0.0], np.cumsum(self.counts)])
        targets = np.linspace(0, cum[-1], self.b + 1)
        edges = np.interp(targets, cum, self.edges)
        edges[0], edges[-1] = self.edges[0], self.edges[-1]
        self.edges = np.maximum.accumulate(edges)
        self.counts = np.full(self.b, cum[-1] / self.b)
        self.rebuilds += 1

    def count_between(self, lo: float, hi: float) -> float:
        """Estimated number of items in [lo, hi]."""
        if not len(self.edges):
            return 0.0
        a, b = self._cdf(np.array([lo, hi]))
        return float(b - a)
