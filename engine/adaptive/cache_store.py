"""The store of one subresult cache (thesis §5.4): key → the segment join's tuples with that key.

A cache over a segment of a pipeline keeps, for some keys u (the probing tuple's join attributes
into the segment), every tuple of σ_{K=u}(segment join) as of the end of the last call: a
*combo*, the ids of its component tuples, one per segment input (references, never copies).
It is incomplete (only some keys are present) but never wrong: a present key's combos are
all of them, kept current by `maintain` (combos of a deleted or expired tuple leave, new combos
join under present keys only). Entries are kept in creation order; over the byte budget the
oldest entries go (the thesis replaces direct-mapped; either keeps the cache consistent).
Everything is vectorized over numpy arrays; a key is a row of int64 codes (one per equi
conjunct into the segment), compared within one call by dense joint codes."""

from __future__ import annotations

import numpy as np

from cqlstream.engine.kernels import expand, joint_dense


def row_codes(parts: list[np.ndarray]) -> list[np.ndarray]:
    """One int64 code per key row for each (n_k, p) array: equal rows ↔ equal codes."""
    if not parts:
        return []
    p = parts[0].shape[1]
    if p == 1:
        return [a[:, 0] for a in parts]
    codes = [np.zeros(len(a), np.int64) for a in parts]
    size = 1
    for c in range(p):
        dense, n = joint_dense(*[a[:, c] for a in parts])
        if size * n >= 2**62:
            codes, size = joint_dense(*codes)
        codes = [x * n + d for x, d in zip(codes, dense)]
        size *= n
    return codes


class SegmentCache:
    """Entries (present keys) and their combos; `capacity` in bytes (0: none may be created)."""

    def __init__(self, n_key: int, n_seg: int, capacity: int) -> None:
        self.n_key, self.n_seg = n_key, n_seg
        self.capacity = capacity
        self.keys = np.zeros((0, n_key), np.int64)
        self.combo_key = np.zeros((0, n_key), np.int64)
        self.combo_ids = np.zeros((0, n_seg), np.uint64)
        self.evicted = 0

    def __len__(self) -> int:
        return len(self.keys)

    @property
    def rows(self) -> int:
        return len(self.combo_ids)

    def nbytes(self) -> int:
        return int(self.keys.nbytes + self.combo_key.nbytes + self.combo_ids.nbytes)

    def entry_bytes(self) -> float:
        """Average bytes per entry (its key and its combos), for the memory estimate."""
        per_key = 8 * self.n_key
        if not len(self.keys):
            return float(per_key + 8 * (self.n_key + self.n_seg))
        return per_key + self.rows / len(self.keys) * 8 * (self.n_key + self.n_seg)

    def clear(self) -> None:
        self.keys = self.keys[:0]
        self.combo_key = self.combo_key[:0]
        self.combo_ids = self.combo_ids[:0]

    # ------------------------------------------------------------ probe
    def lookup(self, q: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """For probe keys q (n, p): which are present, and the pairs (probe, combo) of equal key."""
        if not len(self.keys) or not len(q):
            z = np.zeros(0, np.int64)
            return np.zeros(len(q), bool), z, z
        qc, ec, cc = row_codes([q, self.keys, self.combo_key])
        present = np.isin(qc, ec)
        order = np.argsort(cc, kind="stable")
        sc = cc[order]
        lo = np.searchsorted(sc, qc, side="left")
        hi = np.searchsorted(sc, qc, side="right")
        hi = np.where(present, hi, lo)
        rep, pos = expand(lo, hi - lo)
        return present, rep, order[pos]

    # ------------------------------------------------------------ updates
    def maintain(self, keep: np.ndarray, key: np.ndarray, ids: np.ndarray) -> int:
        """Keep the combos flagged in `keep` (the others lost a component), then add the new
        combos (key, ids) whose key is present. Returns the rows added."""
        if not keep.all():
            self.combo_key, self.combo_ids = self.combo_key[keep], self.combo_ids[keep]
        if not len(key) or not len(self.keys):
            return 0
        kc, ec = row_codes([key, self.keys])
        take = np.isin(kc, ec)
        if take.any():
            self.combo_key = np.concatenate([self.combo_key, key[take]])
            self.combo_ids = np.concatenate([self.combo_ids, ids[take]])
        return int(take.sum())

    def create(self, keys: np.ndarray, key: np.ndarray, ids: np.ndarray) -> int:
        """New entries for `keys` (distinct, not present) with their combos (key, ids), then the
        oldest entries leave while over capacity. Returns the entries created."""
        if not len(keys) or self.capacity <= 0:
            return 0
        self.keys = np.concatenate([self.keys, keys])
        self.combo_key = np.concatenate([self.combo_key, key])
        self.combo_ids = np.concatenate([self.combo_ids, ids])
        self._fit()
        return len(keys)

    def _fit(self) -> None:
        over = self.nbytes() - self.capacity
        if over <= 0:
            return
        # drop whole entries, oldest first, until the rest fits
        ec, cc = row_codes([self.keys, self.combo_key])
        per = np.zeros(len(ec), np.int64)
        order = np.argsort(ec, kind="stable")
        pos = np.searchsorted(ec[order], cc)
        np.add.at(per, order[pos], 1)
        size = 8 * self.n_key + per * 8 * (self.n_key + self.n_seg)
        k = int(np.searchsorted(np.cumsum(size), over, side="left")) + 1
        gone = ec[:k]
        self.keys = self.keys[k:]
        keep = ~np.isin(cc, gone)
        self.combo_key, self.combo_ids = self.combo_key[keep], self.combo_ids[keep]
        self.evicted += k
