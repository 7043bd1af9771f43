"""A Bloom filter over int64 values (join keys, tuple ids): "maybe present" or "surely absent"."""

from __future__ import annotations

import numpy as np

# odd 64-bit multipliers: one multiply-shift hash each (Dietzfelbinger et al.)
_MULTS = np.array([0x9E3779B97F4A7C15, 0xC2B2AE3D27D4EB4F, 0x165667B19E3779F9, 0xD6E8FEB86659FD93], np.uint64)


class Bloom:
    """`bits_per_item` × expected items bits (a power of two), `len(_MULTS)` hashes."""

    def __init__(self, expected: int, bits_per_item: int = 10) -> None:
        m = 1 << max(6, int(np.ceil(np.log2(max(1, expected) * bits_per_item))))
        self.shift = np.uint64(64 - int(np.log2(m)))
        self.bits = np.zeros(m, bool)
        self.items = 0

    def nbytes(self) -> int:
        return self.bits.nbytes

    def _slots(self, v: np.ndarray) -> np.ndarray:
        x = v.astype(np.int64, copy=False).view(np.uint64)
        with np.errstate(over="ignore"):
            return ((x[None, :] * _MULTS[:, None]) >> self.shift).astype(np.int64)

    def add(self, v: np.ndarray) -> None:
        if len(v):
            self.bits[self._slots(v).ravel()] = True
            self.items += len(v)

    def contains(self, v: np.ndarray) -> np.ndarray:
        """Per value: maybe present (True) or surely absent (False)."""
        if not len(v):
            return np.zeros(0, bool)
        return self.bits[self._slots(v)].all(axis=0)
