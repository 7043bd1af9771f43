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
    """Seconds per tuple of each conjunct. A call costs a fixed overhead (interpreting the
    expression, allocating) plus a time per tuple; the overhead is paid once per batch whatever
    the order, so only the per-tuple part decides it. The overhead is the least time of a few
    recent one-tuple calls (`intercept`); the per-tuple part is (seconds − calls × overhead) /
    tuples over the real evaluations, as decayed sums with a half-life in input tuples (the span
    the profile window covers), so it follows slow changes and shrugs off single slow calls."""

    FLOOR = 1e-10  # a conjunct measured as free still has a cost
    KEEP = 8  # one-tuple timings kept per conjunct

    def __init__(self, n: int, half_life: float) -> None:
        self.s = np.zeros((3, n))  # decayed sums of calls, tuples, seconds
        self.half_life = max(half_life, 1.0)
        self.ones = np.full((self.KEEP, n), np.inf)  # recent one-tuple call times
        self.k = 0

    @property
    def tuples(self) -> np.ndarray:
        return self.s[1]

    def add(self, seconds: np.ndarray, tuples: np.ndarray, n_in: int) -> None:
        """One call per conjunct with tuples > 0 (a conjunct not reached has tuples 0)."""
        s = self.s
        s *= 0.5 ** (n_in / self.half_life)
        s[0] += tuples > 0
        s[1] += tuples
        s[2] += seconds

    def intercept(self, seconds: np.ndarray) -> None:
        """The times of one call per conjunct on one tuple."""
        self.ones[self.k % self.KEEP] = seconds
        self.k += 1

    def costs(self) -> np.ndarray:
        """Seconds per tuple; a conjunct never evaluated gets the mean of the others."""
        calls, x, y = self.s
        known = x > 0
        safe = np.where(known, x, 1.0)
        fixed = self.ones.min(axis=0)
        fixed = np.where(np.isfinite(fixed), fixed, 0.0)
        c = np.where(known, (y - calls * fixed) / safe, 0.0)
        c = np.where(c > 0, c, np.where(known, y / safe, 0.0) * 0.01)  # all overhead: nearly free per tuple
        fill = c[known].mean() if known.any() else 1.0
        return np.maximum(np.where(known, c, fill), self.FLOOR)


class Passes:
    """When a join pipeline profiles, and which of its events. Profile tuples fall due at the
    thesis' rate, p per event, but are taken in *passes* of at least `size` tuples, all from one
    call's events (uniformly, by a seeded generator): a pass joins its sampled events along every
    tree path, and what that costs is mostly a fixed amount per path and call, so a few large
    passes cost far less than one small pass per call, at the same p. `urgent` (the probing
    itself saw its drop rates move, engine/adaptive/mjoin.py) takes the next pass at once, at
    least `size` tuples even if fewer are due: re-converging after a shift waits for no pass."""

    def __init__(self, p: float, size: int, seed: int) -> None:
        self.p = p
        self.size = max(int(size), 1)
        self.due = 0.0  # profile tuples due and not yet taken
        self.rng = np.random.default_rng(seed)
        self.passes = 0

    def take(self, n: int, urgent: bool = False) -> np.ndarray:
        """Positions (sorted, within the call's n events) to profile now; usually none."""
        self.due += self.p * n
        if not n or (self.due < self.size and not urgent):
            return np.zeros(0, np.int64)
        k = min(max(int(self.due), self.size if urgent else 1), n)
        self.due = max(self.due - k, 0.0)
        self.passes += 1
        if k == n:
            return np.arange(n, dtype=np.int64)
        return np.sort(self.rng.choice(n, size=k, replace=False))
