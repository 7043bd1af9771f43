"""The store of one subresult cache (thesis §5.4): key → the segment join's tuples with that key.

A cache over a segment of a pipeline keeps, for some keys u (the probing tuple's join attributes
into the segment), every tuple of σ_{K=u}(segment join) as of the end of the last call: a
*combo*, the ids of its component tuples, one per segment input (references, never copies).
It is incomplete (only some keys are present) but never wrong: a present key's combos are
all of them, kept current by `maintain` (combos of a deleted or expired tuple leave, new combos
join under present keys only). Entries are kept in creation order; over the byte budget the
oldest entries go (the thesis replaces direct-mapped; either keeps the cache consistent).
Everything is vectorized over numpy arrays; a key is a row of int64 codes (one per equi
conjunct into the segment); entries and combos are kept sorted by a 64-bit hash of the key, so
a lookup is a binary search and costs nothing in the size of the cache."""

from __future__ import annotations

import numpy as np

from cqlstream.engine.batch import splitmix64
from cqlstream.engine.kernels import expand

# odd 64-bit weights, one per key column (a key has two columns per equi conjunct)
_MULT = splitmix64(np.arange(1, 65, dtype=np.uint64)) | np.uint64(1)
_MIX = np.uint64(0xBF58476D1CE4E5B9)


def key_hash(keys: np.ndarray) -> np.ndarray:
    """A 64-bit hash per key row (n, p) of int64 codes, equal across calls for equal rows: the
    columns weighted by odd constants and summed (wrapping), then one xor-shift-multiply round. One
    mixer per call whatever p (a splitmix per column cost more than the lookups it serves); a collision
    only ever costs a miss, equal hashes are confirmed on the full key."""
    n, p = keys.shape
    if not n:
        return np.zeros(0, np.uint64)
    u = np.ascontiguousarray(keys).view(np.uint64)
    with np.errstate(over="ignore"):
        h = (u * _MULT[:p]).sum(axis=1, dtype=np.uint64)
        h ^= h >> np.uint64(29)
        h *= _MIX
        h ^= h >> np.uint64(32)
    return h


def match_keys(qh: np.ndarray, q: np.ndarray, dh: np.ndarray, d: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Every pair (i, j) with q[i] == d[j] (key rows with their hashes qh, dh): the d side
    sorted by hash once, each q row binary-searched, equal hashes confirmed on the full key."""
    if not len(qh) or not len(dh):
        z = np.zeros(0, np.int64)
        return z, z
    o = np.argsort(dh, kind="stable")
    sh = dh[o]
    lo = np.searchsorted(sh, qh, side="left")
    hi = np.searchsorted(sh, qh, side="right")
    rep, pos = expand(lo, hi - lo)
    j = o[pos]
    same = (q[rep] == d[j]).all(axis=1) if len(rep) else np.zeros(0, bool)
    return rep[same], j[same]


def first_per_key(h: np.ndarray) -> np.ndarray:
    """Index of the first row of each distinct hash (rows of distinct keys sharing a hash: one
    of them; the others are simply not cached, which is incomplete, never wrong)."""
    return np.unique(h, return_index=True)[1]


def in_sorted(x: np.ndarray, sorted_set: np.ndarray) -> np.ndarray:
    """x ∈ sorted_set, by binary search (no sort of x: x is the large side)."""
    if not len(sorted_set) or not len(x):
        return np.zeros(len(x), bool)
    at = np.minimum(np.searchsorted(sorted_set, x), len(sorted_set) - 1)
    return sorted_set[at] == x


class SegmentCache:
    """Entries (present keys) and their combos; `capacity` in bytes (0: none may be created).

    Both are kept sorted by a 64-bit hash of the key across calls (`khash`, `chash`), so a
    lookup is a binary search per probe, O(q log n), not a pass over the whole cache: a hit then
    costs less than the segment's probes, which is the point of the cache. Equal hashes are
    confirmed on the full key (a collision is never taken for a hit). `age` orders entries by
    creation for the oldest-first eviction."""

    def __init__(self, n_key: int, n_seg: int, capacity: int) -> None:
        self.n_key, self.n_seg = n_key, n_seg
        self.capacity = capacity
        self.keys = np.zeros((0, n_key), np.int64)
        self.khash = np.zeros(0, np.uint64)
        self.age = np.zeros(0, np.int64)
        self.combo_key = np.zeros((0, n_key), np.int64)
        self.chash = np.zeros(0, np.uint64)
        self.combo_ids = np.zeros((0, n_seg), np.uint64)
        self.evicted = 0
        self._born = 0

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
        self.keys, self.khash, self.age = self.keys[:0], self.khash[:0], self.age[:0]
        self.combo_key, self.chash, self.combo_ids = self.combo_key[:0], self.chash[:0], self.combo_ids[:0]

    # ------------------------------------------------------------ probe
    def lookup(self, q: np.ndarray, h: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """For probe keys q (n, p) (their hashes h, computed when not given): which are
        present, and the pairs (probe, combo) of equal key."""
        if not len(self.keys) or not len(q):
            z = np.zeros(0, np.int64)
            return np.zeros(len(q), bool), z, z
        h = key_hash(q) if h is None else h
        at = np.minimum(np.searchsorted(self.khash, h), len(self.khash) - 1)
        present = self.khash[at] == h
        if present.any():
            present[present] = (self.keys[at[present]] == q[present]).all(axis=1)
        lo = np.searchsorted(self.chash, h, side="left")
        hi = np.where(present, np.searchsorted(self.chash, h, side="right"), lo)
        rep, pos = expand(lo, hi - lo)
        same = (self.combo_key[pos] == q[rep]).all(axis=1) if len(pos) else np.zeros(0, bool)
        return present, rep[same], pos[same]

    # ------------------------------------------------------------ updates
    def maintain(self, keep: np.ndarray | None, key: np.ndarray, ids: np.ndarray, h: np.ndarray | None = None) -> int:
        """Keep the combos flagged in `keep` (the others lost a component; None: all), then add
        the new combos (key, ids; key hashes h) whose key is present. Returns the rows added."""
        if keep is not None and not keep.all():
            self.combo_key, self.chash, self.combo_ids = self.combo_key[keep], self.chash[keep], self.combo_ids[keep]
        if not len(key) or not len(self.keys):
            return 0
        h = key_hash(key) if h is None else h
        take = self.present(key, h)
        if take.any():
            self._add_combos(key[take], ids[take], h[take])
        return int(take.sum())

    def present(self, q: np.ndarray, h: np.ndarray) -> np.ndarray:
        """Which key rows q (hashes h) have an entry (no combos gathered)."""
        if not len(self.keys) or not len(q):
            return np.zeros(len(q), bool)
        at = np.minimum(np.searchsorted(self.khash, h), len(self.khash) - 1)
        ok = self.khash[at] == h
        if ok.any():
            ok[ok] = (self.keys[at[ok]] == q[ok]).all(axis=1)
        return ok

    def invalidate(self, pos: int, gone: np.ndarray) -> np.ndarray:
        """The combos whose component at segment position `pos` is not among the ids `gone`
        (sorted): a binary search per combo, no sort of the cache."""
        return ~in_sorted(self.combo_ids[:, pos], gone)

    def create(
        self,
        keys: np.ndarray,
        key: np.ndarray,
        ids: np.ndarray,
        h: np.ndarray | None = None,
        ch: np.ndarray | None = None,
    ) -> int:
        """New entries for `keys` (distinct, not present; hashes h) with their combos (key,
        ids; hashes ch), then the oldest entries leave while over capacity. Returns the entries
        created."""
        if not len(keys) or self.capacity <= 0:
            return 0
        h = key_hash(keys) if h is None else h
        ch = key_hash(key) if ch is None else ch
        # a key whose hash another entry has is not cached (always a miss, still correct): each
        # hash names one entry, so a lookup's binary search finds the only candidate
        clash = in_sorted(h, self.khash)
        o = np.argsort(h, kind="stable")
        dup = np.zeros(len(h), bool)
        dup[o[1:]] = h[o][1:] == h[o][:-1]
        dup[o[:-1]] |= h[o][1:] == h[o][:-1]
        ok = ~(clash | dup)
        if not ok.all():
            keys, h = keys[ok], h[ok]
            keep = in_sorted(ch, np.sort(h)) if len(key) else np.zeros(0, bool)
            key, ids, ch = key[keep], ids[keep], ch[keep]
            if not len(keys):
                return 0
        o = np.argsort(h, kind="stable")
        at = np.searchsorted(self.khash, h[o], side="right")
        self.keys = np.insert(self.keys, at, keys[o], axis=0)
        self.khash = np.insert(self.khash, at, h[o])
        self.age = np.insert(self.age, at, self._born + np.arange(len(keys))[o])
        self._born += len(keys)
        if len(key):
            self._add_combos(key, ids, ch)
        self._fit()
        return len(keys)

    def _add_combos(self, key: np.ndarray, ids: np.ndarray, h: np.ndarray | None = None) -> None:
        """Merge combos into the hash-sorted arrays (in their order among equal hashes)."""
        h = key_hash(key) if h is None else h
        o = np.argsort(h, kind="stable")
        at = np.searchsorted(self.chash, h[o], side="right")
        self.combo_key = np.insert(self.combo_key, at, key[o], axis=0)
        self.chash = np.insert(self.chash, at, h[o])
        self.combo_ids = np.insert(self.combo_ids, at, ids[o], axis=0)

    def _fit(self) -> None:
        over = self.nbytes() - self.capacity
        if over <= 0 or not len(self.keys):
            return
        # drop whole entries, oldest first, until the rest fits
        lo = np.searchsorted(self.chash, self.khash, side="left")
        hi = np.searchsorted(self.chash, self.khash, side="right")
        order = np.argsort(self.age, kind="stable")
        size = 8 * self.n_key + (hi - lo)[order] * 8 * (self.n_key + self.n_seg)
        k = int(np.searchsorted(np.cumsum(size), over, side="left")) + 1
        gone = np.zeros(len(self.keys), bool)
        gone[order[:k]] = True
        # a combo leaves with its entry (entries have distinct hashes: `create`)
        at = np.minimum(np.searchsorted(self.khash, self.chash), len(self.khash) - 1)
        drop = gone[at] & (self.khash[at] == self.chash)
        self.keys, self.khash, self.age = self.keys[~gone], self.khash[~gone], self.age[~gone]
        keep = ~drop
        self.combo_key, self.chash, self.combo_ids = self.combo_key[keep], self.chash[keep], self.combo_ids[keep]
        self.evicted += k
