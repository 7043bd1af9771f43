"""Exact float sums: compensated segmented prefix sums with a carried (hi, lo) total per group.

The rounding error of every step of the prefix sum is recovered exactly (TwoSum) and summed
separately, and the carried per-group total is a (hi, lo) pair, so long streams of inserts and
deletes do not drift (in practice the correctly rounded sum `math.fsum` gives).
"""

from __future__ import annotations

import numpy as np


def two_sum(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """s = fl(a + b) and its exact rounding error (Knuth's TwoSum)."""
    s = a + b
    bb = s - a
    err = (a - (s - bb)) + (b - bb)
    return s, err


def fsum_cells(
    x: np.ndarray, ce: np.ndarray, cell_gs: np.ndarray, carry_hi: np.ndarray, carry_lo: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Compensated segmented sums of float64 `x` (sorted by group) at the cell ends, plus the
    carried (hi, lo) totals: returns (hi, lo) per cell."""
    s = np.cumsum(x)  # sequential: s[i] = fl(s[i-1] + x[i]) exactly, so TwoSum recovers the error
    prev = np.empty_like(s)
    if len(s):
        prev[0] = 0.0
        prev[1:] = s[:-1]
    with np.errstate(invalid="ignore", over="ignore"):
        bb = s - prev
        err = (prev - (s - bb)) + (x - bb)
        err = np.where(np.isfinite(err), err, 0.0)
        c = np.cumsum(err)
        s_pad = np.concatenate([[0.0], s])
        c_pad = np.concatenate([[0.0], c])
        d, e1 = two_sum(s_pad[ce + 1], -s_pad[cell_gs])
        hi, e2 = two_sum(d, carry_hi)
        lo = (e1 + e2) + (c_pad[ce + 1] - c_pad[cell_gs]) + carry_lo
        hi, lo = two_sum(hi, lo)
        lo = np.where(np.isfinite(lo), lo, 0.0)
    return hi, lo
