"""CountSketch: `depth` rows of `width` signed counters; a key adds ±weight to one counter per
row and its frequency estimate is the median over rows of ±counter. Unbiased; error about
‖f‖₂ / √width with constant probability per row. Updates are one np.add.at per batch."""

from __future__ import annotations

import numpy as np

from cqlstream.engine.batch import splitmix64


class CountSketch:
    def __init__(self, width: int, depth: int = 5, seed: int = 0) -> None:
        self.width, self.depth = width, depth
        self.table = np.zeros((depth, width), np.int64)
        rng = np.random.default_rng(seed)
        self.salts = rng.integers(1, 2**63, size=depth, dtype=np.int64).astype(np.uint64)

    def nbytes(self) -> int:
        return int(self.table.nbytes)

    def _cells(self, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        h = splitmix64(keys.astype(np.uint64)[None, :] ^ self.salts[:, None])
        col = (h % np.uint64(self.width)).astype(np.int64)
        sign = np.where((h >> np.uint64(63)) == 0, 1, -1).astype(np.int64)
        return col, sign

    def update(self, keys: np.ndarray, weights: np.ndarray | None = None) -> None:
        if not len(keys):
            return
        col, sign = self._cells(keys)
        w = np.ones(len(keys), np.int64) if weights is None else weights.astype(np.int64)
        rows = np.repeat(np.arange(self.depth), len(keys))
        np.add.at(self.table, (rows, col.ravel()), (sign * w[None, :]).ravel())

    def estimate(self, keys: np.ndarray) -> np.ndarray:
        if not len(keys):
            return np.zeros(0, np.float64)
        col, sign = self._cells(keys)
        vals = self.table[np.arange(self.depth)[:, None], col] * sign
        return np.median(vals, axis=0)
