"""Bloom filter over 64-bit keys: a numpy bit array of m bits and k probes per key by double
hashing (h1 + i·h2), vectorized over a batch. False positives only, at rate about
(1 − e^(−kn/m))^k after n distinct keys (precision.bloom_fp_rate); no deletes."""

from __future__ import annotations

import math

import numpy as np

from cqlstream.engine.batch import splitmix64

_H2_SALT = np.uint64(0xC2B2AE3D27D4EB4F)


def probe_count(m: int, k: int | None, expected: int | None) -> int:
    """k probes: as given, else optimal (m/n · ln 2) for `expected` distinct keys, else 4; at most 32."""
    if k is None:
        k = max(1, round(m / expected * math.log(2.0))) if expected else 4
    return min(k, 32)


def probe_positions(keys: np.ndarray, seed: np.uint64, k: int, m: int) -> np.ndarray:
    """(n, k) positions h1 + i·h2 mod m of each key's probes (double hashing; h2 odd)."""
    h1 = splitmix64(keys.astype(np.uint64) ^ seed)
    h2 = splitmix64(h1 ^ _H2_SALT) | np.uint64(1)
    i = np.arange(k, dtype=np.uint64)
    with np.errstate(over="ignore"):
        return ((h1[:, None] + i[None, :] * h2[:, None]) % np.uint64(m)).astype(np.int64)


class BloomFilter:
    """`nbytes` of bits (rounded up to 8-byte words) and `k` probes (default: optimal for `expected` keys)."""

    def __init__(self, nbytes: int, k: int | None = None, expected: int | None = None, seed: int = 0) -> None:
        words = max(1, math.ceil(nbytes / 8))
        self.bits = np.zeros(words, np.uint64)
        self.m = words * 64
        self.k = probe_count(self.m, k, expected)
        self.seed = np.uint64(seed)
        self.added = 0  # keys offered to add (with repeats)

    def nbytes(self) -> int:
        return int(self.bits.nbytes)

    def _probes(self, keys: np.ndarray) -> np.ndarray:
        """(n, k) bit positions."""
        return probe_positions(keys, self.seed, self.k, self.m)

    def add(self, keys: np.ndarray) -> None:
        if not len(keys):
            return
        pos = self._probes(keys).ravel()
        np.bitwise_or.at(self.bits, pos >> 6, np.uint64(1) << (pos & 63).astype(np.uint64))
        self.added += len(keys)

    def contains(self, keys: np.ndarray) -> np.ndarray:
        """bool per key: True if possibly added, False if certainly not."""
        if not len(keys):
            return np.zeros(0, bool)
        pos = self._probes(keys)
        hit = (self.bits[pos >> 6] >> (pos & 63).astype(np.uint64)) & np.uint64(1)
        return hit.all(axis=1)

    def test_and_add(self, keys: np.ndarray) -> np.ndarray:
        """Per key, in order: whether it (possibly) was present before it — earlier keys of the
        same batch count — then add them all. Duplicates within the batch are found exactly."""
        n = len(keys)
        if not n:
            return np.zeros(0, bool)
        _, first = np.unique(keys, return_index=True)
        seen = np.ones(n, bool)  # a repeat of an earlier key of the batch was present
        seen[first] = self.contains(keys[first])
        self.add(keys[first])
        return seen

    def fill_ratio(self) -> float:
        return float(np.unpackbits(self.bits.view(np.uint8)).mean())

    def fp_rate(self) -> float:
        """The estimated false-positive rate now: fill ratio to the k-th power."""
        return self.fill_ratio() ** self.k
