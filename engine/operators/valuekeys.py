"""Whole-tuple values of integer-like columns (ints, booleans, timestamps; NULL-able) packed into
one int64 key ≥ 0, so a value table can map them through a numpy hash map instead of a dict of
Python tuples.

Each column gets a base and a bit width: its code is value − base + 1 (0 is NULL) and the codes
sit side by side in the key. The layout covers the columns' value ranges seen so far with some
headroom; a batch outside it asks for a new layout (`KeyLayout.fit`) and the live keys are
re-packed (`unpack` then `pack`). When the ranges need more than 62 bits there is no layout."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

MAX_BITS = 62
_I64_MIN, _I64_MAX = -(1 << 63), (1 << 63) - 1


def packable(cols: list[np.ndarray]) -> bool:
    """Whether every column is integer-like and fits int64 (ints, booleans, timestamps)."""
    return all(c.dtype.kind in "ib" or (c.dtype.kind == "u" and c.dtype.itemsize < 8) for c in cols)


def ranges(cols: Sequence[np.ndarray], nulls: Sequence[np.ndarray | None]) -> list[tuple[int, int] | None]:
    """(min, max) of each column's non-NULL values; None for a column with none."""
    out: list[tuple[int, int] | None] = []
    for c, m in zip(cols, nulls):
        v = c if m is None or not m.any() else c[~m]
        out.append((int(v.min()), int(v.max())) if len(v) else None)
    return out


@dataclass(frozen=True)
class KeyLayout:
    """Per column: base (code = value − base + 1) and bit width; shift of each column's code.
    `major_first`: the first column in the highest bits, so keys sort as the tuples do (NULL
    first); else in the lowest."""

    base: tuple[int, ...]
    bits: tuple[int, ...]
    major_first: bool = False

    @property
    def shifts(self) -> tuple[int, ...]:
        out, s = [], 0
        for b in reversed(self.bits) if self.major_first else self.bits:
            out.append(s)
            s += b
        return tuple(reversed(out)) if self.major_first else tuple(out)

    def covers(self, rng: list[tuple[int, int] | None]) -> bool:
        """Whether values within these (min, max) ranges have a code under this layout."""
        for r, base, bits in zip(rng, self.base, self.bits):
            if r is not None and (r[0] < base or r[1] - base + 1 >= 1 << bits):
                return False
        return True

    @staticmethod
    def fit(rng: list[tuple[int, int] | None]) -> KeyLayout | None:
        """A layout covering the ranges: with headroom (a span below, two above) when that fits
        62 bits, else the exact ranges; None when even those do not fit."""
        if any(r is not None and r[0] == _I64_MIN for r in rng):  # base − 1 must be an int64
            return None
        for slack in (True, False):
            base, bits = [], []
            for r in rng:
                lo, hi = r if r is not None else (0, 0)
                span = hi - lo + 1
                if slack:
                    lo, hi = max(lo - span, _I64_MIN + 1), min(hi + 2 * span, _I64_MAX)
                base.append(lo)
                bits.append((hi - lo + 1).bit_length())  # codes 0..hi−lo+1
            if sum(bits) <= MAX_BITS:
                return KeyLayout(tuple(base), tuple(bits))
        return None

    def pack(self, cols: Sequence[np.ndarray], nulls: Sequence[np.ndarray | None], idx: np.ndarray) -> np.ndarray:
        """Keys of the rows at `idx` (their values must be covered)."""
        key = np.zeros(len(idx), np.int64)
        for c, m, base, shift in zip(cols, nulls, self.base, self.shifts):
            code = c[idx].astype(np.int64)
            code -= base - 1
            if m is not None:
                code[m[idx]] = 0
            if shift:
                code <<= shift
            key |= code
        return key

    def pack_all(self, cols: Sequence[np.ndarray], nulls: Sequence[np.ndarray | None], n: int) -> np.ndarray:
        """Keys of all `n` rows (a fresh array; their values must be covered)."""
        key: np.ndarray | None = None
        for c, m, base, shift in zip(cols, nulls, self.base, self.shifts):
            code = c.astype(np.int64)  # a copy, also for int64 columns
            code -= base - 1
            if m is not None:
                code[m] = 0
            if shift:
                code <<= shift
            if key is None:
                key = code
            else:
                key |= code
        return np.zeros(n, np.int64) if key is None else key

    def unpack(self, key: np.ndarray) -> tuple[list[np.ndarray], list[np.ndarray]]:
        """Column values (int64; arbitrary under NULL) and NULL flags of packed keys."""
        cols, nulls = [], []
        for base, bits, shift in zip(self.base, self.bits, self.shifts):
            code = (key >> shift) & ((1 << bits) - 1)
            nulls.append(code == 0)
            cols.append(code + (base - 1))
        return cols, nulls
