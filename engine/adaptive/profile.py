"""The profiler of adaptive conjunct ordering (thesis §4.3.1): which tuples are profiled, the
window of profile tuples, and the running cost of each conjunct."""

from __future__ import annotations

import numpy as np


class Sampler:
    """Chooses the tuples to profile: each with probability p, by arrival position (geometric
    gaps from a seeded generator), so the choice does not depend on how input was batched."""

    def __init__(self, p: float, seed: int = 0x5EED) -> None:
        self.p = p
        self.rng = np.random.default_rng(seed)
        self.seen = 0
        self.upcoming = np.cumsum(self.rng.geometric(p, size=256)) - 1  # absolute positions

    def take(self, n: int) -> np.ndarray:
        """Positions (0-based, within the next n tuples) of the sampled ones."""
        lo, hi = self.seen, self.seen + n
        while self.upcoming[-1] < hi:
            more = self.upcoming[-1] + np.cumsum(self.rng.geometric(self.p, size=max(256, int((hi - lo) * self.p) + 1)))
            self.upcoming = np.concatenate([self.upcoming, more])
        k = int(np.searchsorted(self.upcoming, hi))
        out = self.upcoming[:k] - lo
        self.upcoming = self.upcoming[k:]
        self.seen = hi
        return out


class ProfileWindow:
    """The last `size` profile tuples: one row of drop bits per profiled dropped tuple, bit i
    set when conjunct i (original numbering) is false on it."""

    def __init__(self, n: int, size: int) -> None:
        self.size = size
        self.rows = np.zeros((0, n), dtype=bool)
        self.total = 0  # profile tuples ever added

    def __len__(self) -> int:
        return len(self.rows)

    def add(self, new: np.ndarray) -> np.ndarray:
        """Append rows; returns the rows that expired (oldest first)."""
        self.total += len(new)
        rows = np.concatenate([self.rows, new])
        cut = max(len(rows) - self.size, 0)
        self.rows = rows[cut:]
        return rows[:cut]

    def drop_rates(self) -> np.ndarray:
        """Per conjunct, the share of profile tuples it drops (unconditional, among dropped tuples)."""
        return self.rows.mean(axis=0) if len(self.rows) else np.zeros(self.rows.shape[1])


class CostMeter:
    """Seconds per tuple of each conjunct, from the timings of its real evaluations. A call costs
    a fixed overhead plus a time per tuple; the overhead is paid once per batch whatever the
    order, so only the per-tuple part decides the order: it is the slope of a least-squares
    line through (tuples, seconds) of the calls (decayed sums, with a half-life in input tuples,
    the span the profile window covers). Without spread in tuple counts: seconds / tuples."""

    FLOOR = 1e-10  # a conjunct measured as free still has a cost

    def __init__(self, n: int, half_life: float) -> None:
        self.s = np.zeros((5, n))  # decayed sums of 1, x, y, x², xy (x: tuples, y: seconds)
        self.half_life = max(half_life, 1.0)

    @property
    def tuples(self) -> np.ndarray:
        return self.s[1]

    def add(self, seconds: np.ndarray, tuples: np.ndarray, n_in: int) -> None:
        """One call per conjunct with tuples > 0 (a conjunct not reached has tuples 0)."""
        called = (tuples > 0).astype(float)
        self.s *= 0.5 ** (n_in / self.half_life)
        self.s += np.stack([called, tuples, seconds, tuples * tuples, tuples * seconds])

    def costs(self) -> np.ndarray:
        """Seconds per tuple; a conjunct never evaluated gets the mean of the others."""
        n1, x, y, xx, xy = self.s
        known = x > 0
        ratio = np.where(known, y / np.where(known, x, 1.0), 0.0)
        den = n1 * xx - x * x
        spread = den > 1e-6 * np.maximum(n1 * xx, 1e-300)
        slope = np.where(spread, (n1 * xy - x * y) / np.where(spread, den, 1.0), ratio)
        c = np.where(slope > 0, slope, ratio)
        fill = c[known].mean() if known.any() else 1.0
        return np.maximum(np.where(known, c, fill), self.FLOOR)
