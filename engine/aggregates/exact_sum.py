"""Exact float sums: compensated segmented prefix sums with a carried (hi, lo) total per group.

The rounding error of every step of the prefix sum is recovered exactly (TwoSum) and summed
separately, and the carried per-group total is a (hi, lo) pair, so long streams of inserts and
deletes do not drift (in practice the correctly rounded sum `math.fsum` gives).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np


def two_sum(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """s = fl(a + b) and its exact rounding error (Knuth's TwoSum)."""
    s = a + b
    bb = s - a
    err = (a - (s - bb)) + (b - bb)
    return s, err


def fsum_cells(
    x: np.ndarray,
    ce: np.ndarray,
    group_base: Callable[[np.ndarray], np.ndarray],
    carry_hi: np.ndarray,
    carry_lo: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """Compensated segmented sums of float64 `x` (sorted by group) at the cell ends `ce`, plus the
    carried (hi, lo) totals: returns (hi, lo) per cell. `group_base` gives, from a prefix sum's
    values at the cell ends, its values before each cell's group (`Cells.group_base`). (The prefix sums are built after a
    leading 0, so the previous sums and the padded ones are views, and the error terms are
    computed in place: the same operations in the same order as the plain formulas.)"""
    n = len(x)
    sp = np.empty(n + 1)  # [0, prefix sums]
    sp[0] = 0.0
    np.cumsum(x, out=sp[1:])  # sequential: s[i] = fl(s[i-1] + x[i]) exactly, so TwoSum recovers the error
    s, prev = sp[1:], sp[:-1]
    cp = np.empty(n + 1)  # [0, prefix sums of the errors]
    cp[0] = 0.0
    with np.errstate(invalid="ignore", over="ignore"):
        bb = s - prev
        err = s - bb
        np.subtract(prev, err, out=err)
        np.subtract(x, bb, out=bb)
        err += bb  # (prev − (s − bb)) + (x − bb)
        bad = ~np.isfinite(err)
        if bad.any():
            err[bad] = 0.0
        np.cumsum(err, out=cp[1:])
        whole = len(ce) == n  # every event ends a cell: ce + 1 is 1..n
        end_s = s if whole else sp.take(ce + 1)
        end_c = cp[1:] if whole else cp.take(ce + 1)
        d, e1 = two_sum(end_s, -group_base(end_s))
        hi, e2 = two_sum(d, carry_hi)
        lo = (e1 + e2) + (end_c - group_base(end_c)) + carry_lo
        hi, lo = two_sum(hi, lo)
        lo = np.where(np.isfinite(lo), lo, 0.0)
    return hi, lo
