"""Reservoir sample of a fixed size k (Vitter's algorithm R) with a deterministic seed: after n
items each one is in the sample with probability k/n. A batch is taken in one step: item
number j (from 1) is kept with probability k/j and overwrites a uniform slot; when several
kept items of a batch pick the same slot the last one wins, exactly as one at a time."""

from __future__ import annotations

import numpy as np


class Reservoir:
    def __init__(self, k: int, seed: int = 0, dtype: type | np.dtype = np.float64) -> None:
        self.k = k
        self.items = np.zeros(k, dtype)
        self.seen = 0
        self.rng = np.random.default_rng(seed)

    def nbytes(self) -> int:
        return int(self.items.nbytes)

    def sample(self) -> np.ndarray:
        return self.items[: min(self.k, self.seen)]

    def update(self, values: np.ndarray) -> None:
        n = len(values)
        if not n:
            return
        fill = max(0, min(n, self.k - self.seen))
        self.items[self.seen : self.seen + fill] = values[:fill]
        rest = values[fill:]
        j = self.seen + fill + 1 + np.arange(len(rest))  # 1-based arrival numbers
        self.seen += n
        if not len(rest):
            return
        keep = self.rng.random(len(rest)) * j < self.k
        idx = np.flatnonzero(keep)
        slots = self.rng.integers(0, self.k, size=len(idx))
        last = len(slots) - 1 - np.unique(slots[::-1], return_index=True)[1]  # last writer per slot
        self.items[slots[last]] = rest[idx[last]]
