"""The profiler of adaptive ordering (thesis §4.3.1): which tuples are profiled and when, the
window of profile tuples, and the running cost of each conjunct."""

from __future__ import annotations

from typing import Any

import numpy as np


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
    """When a selection or a join pipeline profiles, and which of its tuples. Profile tuples fall
    due at the thesis' rate, p per input tuple, but are taken in *passes* of at least `size`, all
    from one call's tuples (one uniform draw per stratum of the call, `strata`, by a seeded generator): a pass costs mostly a fixed amount
    (a join's pass joins its sampled events along every tree path; a selection's rides on the
    executor's calls and updates the view), so a few large passes cost far less than a
    small one per call, at the same p. Nothing beyond `cap` (the profile window) is ever due:
    more profile tuples from one call would only push each other out of the window. `urgent`
    (the probing itself saw its flows move, engine/adaptive/mjoin.py) takes a pass at once, of
    at least `size` tuples even if fewer are due: re-converging after a shift waits for no pass.
    With p = 1 every tuple is profiled, in every call (nothing to gather into passes)."""

    def __init__(self, p: float, size: int, seed: int, cap: int | None = None) -> None:
        self.p = p
        self.cap = float(cap) if cap is not None else float("inf")
        self.size = 1 if p >= 1 else max(min(int(size), int(min(self.cap, 2**62))), 1)
        self.due = 0.0  # profile tuples due and not yet taken
        self.seed = seed  # of `rng`, made on the first draw (see __getattr__)
        self.passes = 0

    rng: np.random.Generator

    def __getattr__(self, name: str) -> Any:
        """The seeded generator `rng`, made on the first draw: numpy.random is imported only by a
        run that samples (~8 ms of every start otherwise). Called only for a missing attribute."""
        if name != "rng":
            raise AttributeError(name)
        self.rng = np.random.default_rng(self.seed)
        return self.rng

    def take(self, n: int, urgent: bool = False) -> np.ndarray:
        """Positions (sorted, within the call's n tuples) to profile now; usually none."""
        self.due = min(self.due + self.p * n, self.cap)
        if not n or (self.due < self.size and not urgent):
            return np.zeros(0, np.int64)
        k = min(max(int(self.due), self.size if urgent else 1), n)
        self.due = max(self.due - k, 0.0)
        self.passes += 1
        if k == n:
            return np.arange(n, dtype=np.int64)
        return strata(n, k, self.rng)


def strata(n: int, k: int, rng: np.random.Generator) -> np.ndarray:
    """k of n positions, sorted and distinct: the call's tuples cut into k runs of n // k or
    n // k + 1 consecutive tuples, one uniform position drawn in each. Every tuple is taken with
    probability k / n (within one tuple's share of a run: 1 / run length), as by a uniform draw
    of k without replacement, but in one vectorized draw of k numbers with no sort and no
    rejection (`Generator.choice` without replacement, then a sort, cost ~150 µs per pass of
    1,000 from 100,000; this ~15 µs). The positions are spread over the whole call, so a sample
    does not cluster where the call's tuples do not (stratified sampling: the drop counts it
    gives vary less than a simple random sample's)."""
    edges = np.arange(k + 1, dtype=np.int64) * n // k
    lo = edges[:-1]
    return lo + (rng.random(k) * (edges[1:] - lo)).astype(np.int64)
