"""Typed output columns of aggregates: casting computed values to a column's dtype, empty
columns, and columns built from Python values (UDAF results)."""

from __future__ import annotations

import numpy as np
from numpy.typing import DTypeLike


def empty_column_of(dt: DTypeLike, n: int = 0) -> np.ndarray:
    """A column of n placeholder values (0, or "" for strings)."""
    if dt is object:
        out = np.empty(n, object)
        out[:] = ""
        return out
    return np.zeros(n, dt)


def as_dtype(v: np.ndarray, dt: DTypeLike) -> np.ndarray:
    """`v` as a column of dtype `dt` (object for strings)."""
    if dt is object:
        return v if v.dtype == object else v.astype(object)
    if v.dtype == object:  # e.g. a NULL-typed expression: placeholder values
        return np.zeros(len(v), dt)
    return v.astype(dt, copy=False)


def column_from_values(values: list[object], dt: DTypeLike) -> tuple[np.ndarray, np.ndarray]:
    """Python values (None = NULL) → (numpy column of dtype dt, NULL mask)."""
    n = len(values)
    null = np.fromiter((x is None for x in values), bool, n)
    if dt is object:
        out = np.empty(n, object)
        out[:] = ["" if x is None else x for x in values]
    else:
        filler = False if dt is np.bool_ else 0
        out = np.array([filler if x is None else x for x in values], dtype=dt) if n else np.zeros(0, dt)
    return out, null
