"""The exact tuple ids of one spill segment, kept in memory delta-coded (sorted ids, each stored
as its gap to the previous one in the narrowest unsigned type that holds every gap: 1 byte per
row when ids are dense, as a window's arrivals are). Exact, unlike a Bloom filter, so a delete of
a spilled row is applied in memory (the row is marked gone) without reading the segment."""

from __future__ import annotations

import numpy as np

_WIDTHS = (np.uint8, np.uint16, np.uint32, np.uint64)


class IdSet:
    def __init__(self, ids: np.ndarray) -> None:
        """`ids`: sorted, distinct, int64. Gaps are taken modulo 2**64 (as uint64): ids anywhere in
        the int64 range, as the hashed ids of a join's output rows, can be more than 2**63 apart,
        which an int64 difference would overflow."""
        self.first = int(ids[0]) if len(ids) else 0
        self.last = int(ids[-1]) if len(ids) else -1
        gaps = np.diff(np.ascontiguousarray(ids, np.int64).view(np.uint64))
        top = int(gaps.max()) if len(gaps) else 0
        dt = next(t for t in _WIDTHS if top <= np.iinfo(t).max)
        self.gaps = gaps.astype(dt)
        self.n = len(ids)

    def nbytes(self) -> int:
        return self.gaps.nbytes + 16

    def decode(self) -> np.ndarray:
        out = np.empty(self.n, np.uint64)
        if self.n:
            out[0] = np.int64(self.first).view(np.uint64)
            np.cumsum(self.gaps, dtype=np.uint64, out=out[1:])
            out[1:] += out[0]
        return out.view(np.int64)

    def positions(self, probes: np.ndarray) -> np.ndarray:
        """Positions (in id order) of the `probes` (sorted, distinct int64) that are here."""
        lo, hi = np.searchsorted(probes, self.first, "left"), np.searchsorted(probes, self.last, "right")
        if hi <= lo:
            return np.zeros(0, np.int64)
        ids = self.decode()
        p = probes[lo:hi]
        at = np.minimum(np.searchsorted(ids, p), self.n - 1)
        return at[ids[at] == p]
