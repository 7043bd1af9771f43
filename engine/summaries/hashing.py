"""Stable 64-bit hashes of whole tuples across batches (NULL equal to NULL), for the sketches
and filters: numbers are mixed as their 64-bit patterns, vectorized; strings and other objects
are hashed once per distinct value of the batch (blake2b: the same in every process)."""

from __future__ import annotations

import numpy as np

try:  # hashlib's own blake2b, without hashlib's import of OpenSSL (~3.5 ms of every run with a join)
    from _blake2 import blake2b
except ImportError:  # another Python
    from hashlib import blake2b

from cqlstream.engine.batch import splitmix64

_NULL = np.uint64(0x6E756C6C)
_SALT = np.uint64(0x9E3779B97F4A7C15)


def column_hash(col: np.ndarray) -> np.ndarray:
    """uint64 hash per element of one column."""
    if col.dtype.kind in "iub":
        return splitmix64(col.astype(np.int64).view(np.uint64))
    if col.dtype.kind == "f":
        x = col.astype(np.float64)
        x = np.where(x == 0, 0.0, x)  # −0.0 equals 0.0
        return splitmix64(x.view(np.uint64))
    if col.dtype.kind == "M" or col.dtype.kind == "m":
        return splitmix64(col.view(np.int64).view(np.uint64))
    uniq, inv = np.unique(col.astype(str), return_inverse=True)  # one hash per distinct value
    hs = np.fromiter(
        (int.from_bytes(blake2b(s.encode(), digest_size=8).digest(), "little") for s in uniq.tolist()),
        np.uint64,
        len(uniq),
    )
    return hs[inv.reshape(-1)]


def row_hash(cols: list[np.ndarray], nulls: list[np.ndarray | None] | None = None) -> np.ndarray:
    """uint64 hash per row of the whole tuple."""
    if not cols:
        return np.zeros(0, np.uint64)
    h = np.zeros(len(cols[0]), np.uint64)
    with np.errstate(over="ignore"):
        for i, c in enumerate(cols):
            ch = column_hash(c)
            m = None if nulls is None else nulls[i]
            if m is not None:
                ch = np.where(m, _NULL, ch)
            h = splitmix64(h * _SALT + ch + np.uint64(i))
    return h
