"""Counting Bloom filter over 64-bit keys, as a multiplicity sketch: m one-byte counters and k
probes per key (double hashing, as bloom.py). A key inserted c times adds c to each of its k
counters and a delete subtracts 1, so the filter follows a relation that takes deletes (a plain
Bloom filter cannot forget). `estimate` is the least of a key's k counters: never below the key's
true multiplicity, equal to it unless every one of its counters is shared with other keys —
for a key never inserted, probability about (1 − e^(−kn/m))^k after n distinct keys.

A counter that reaches 255 saturates and stays there (deletes no longer lower it): it can then
only over-count, so the never-below guarantee holds whatever the multiplicities. Updates are one
np.add.at per batch over the (n, k) probe positions."""

from __future__ import annotations

import numpy as np

from cqlstream.engine.summaries.bloom import probe_count, probe_positions

SATURATED = 255


class CountingBloom:
    """`nbytes` one-byte counters and `k` probes (default: optimal for `expected` distinct keys)."""

    def __init__(self, nbytes: int, k: int | None = None, expected: int | None = None, seed: int = 0) -> None:
        self.m = max(8, int(nbytes))
        self.counts = np.zeros(self.m, np.uint8)
        self.k = probe_count(self.m, k, expected)
        self.seed = np.uint64(seed)
        self.saturated = 0  # counters stuck at SATURATED

    def nbytes(self) -> int:
        return int(self.counts.nbytes)

    def _probes(self, keys: np.ndarray) -> np.ndarray:
        """(n, k) counter positions h1 + i·h2 mod m."""
        return probe_positions(keys, self.seed, self.k, self.m)

    def update(self, keys: np.ndarray, signs: np.ndarray) -> None:
        """Add each key's sign (+1 insert, −1 delete of a key inserted before) to its counters."""
        if not len(keys):
            return
        pos = self._probes(keys).ravel()
        d = np.zeros(self.m, np.int64)
        np.add.at(d, pos, np.repeat(signs.astype(np.int64), self.k))
        touched = np.flatnonzero(d)
        c = self.counts[touched].astype(np.int64)
        stuck = c == SATURATED
        new = np.where(stuck, SATURATED, np.clip(c + d[touched], 0, SATURATED))
        self.saturated += int(((new == SATURATED) & ~stuck).sum())
        self.counts[touched] = new.astype(np.uint8)

    def estimate(self, keys: np.ndarray) -> np.ndarray:
        """Per key, the least of its counters (int64): ≥ its true multiplicity."""
        if not len(keys):
            return np.zeros(0, np.int64)
        return self.counts[self._probes(keys)].min(axis=1).astype(np.int64)

    def fill_ratio(self) -> float:
        return float(np.count_nonzero(self.counts)) / self.m

    def fp_rate(self) -> float:
        """The estimated chance now that a key never inserted looks present: (non-zero
        fraction)^k."""
        return self.fill_ratio() ** self.k
