"""The store of one subresult cache (thesis §5.4): key → the segment join's tuples with that key.

A cache over a segment of a pipeline keeps, for some keys u (the probing tuple's join attributes
into the segment), every tuple of σ_{K=u}(segment join) as of the end of the last call: a
*combo*, the ids of its component tuples, one per segment input (references, never copies).
It is incomplete (only some keys are present) but never wrong: a present key's combos are
all of them, kept current by `maintain` (combos of a deleted or expired tuple leave, new combos
join under present keys only). Entries are kept in creation order; over the byte budget the
oldest entries go (the thesis replaces direct-mapped; either keeps the cache consistent).
Everything is vectorized over numpy arrays; a key is a row of int64 codes (one per equi
conjunct into the segment). Entries are kept sorted by a 64-bit hash of the key (a lookup is a
binary search). Combos live in *runs* (LSM-style): each call's new combos are one small run
sorted by key hash, appended; runs of similar size are merged (so there are O(log n) of them and
a combo is copied O(log n) times over its life, not the whole store every call); a combo that
loses a component is marked dead in place, and dead combos, like those of evicted entries, are
dropped when their run is next merged or the store compacted."""

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


class _Run:
    """One sorted run of combos: key hashes (ascending), the entry each belongs to (its `eid`),
    component ids per segment input, a live mask, and per segment input the permutation that
    sorts its ids (`by_id`) with the sorted ids (`sid`): a deletion finds its combos by binary
    search, touching only them, whatever the size of the run."""

    __slots__ = ("by_id", "chash", "eid", "ids", "live", "n_live", "sid")

    def __init__(self, chash: np.ndarray, eid: np.ndarray, ids: np.ndarray) -> None:
        self.chash, self.eid, self.ids = chash, eid, ids
        self.live = np.ones(len(chash), bool)
        self.n_live = len(chash)
        # built on the first deletion that needs them (a run merged away first never pays)
        self.by_id: list[np.ndarray | None] = [None] * ids.shape[1]
        self.sid: list[np.ndarray | None] = [None] * ids.shape[1]

    def __len__(self) -> int:
        return len(self.chash)

    def with_id(self, pos: int, gone: np.ndarray) -> np.ndarray:
        """Row indexes of the live combos whose component at `pos` is among `gone` (sorted)."""
        order, sid = self.by_id[pos], self.sid[pos]
        if order is None or sid is None:
            order = self.by_id[pos] = np.argsort(self.ids[:, pos], kind="stable")
            sid = self.sid[pos] = self.ids[order, pos]
        lo = np.searchsorted(sid, gone, side="left")
        hi = np.searchsorted(sid, gone, side="right")
        _rep, at = expand(lo, hi - lo)
        rows = order[at]
        return rows[self.live[rows]]


def _merge(runs: list[_Run], live_eids: np.ndarray) -> _Run:
    """One run of the live combos of `runs` whose entry still exists (`live_eids` sorted), in
    hash order, each key's combos in insertion order (runs are oldest first). Two runs merge in
    linear time (each side's places found by binary search); more are sorted."""
    parts = []
    for r in runs:
        keep = r.live if r.n_live < len(r) else None
        ch, eid, ids = (r.chash, r.eid, r.ids) if keep is None else (r.chash[keep], r.eid[keep], r.ids[keep])
        ok = in_sorted(eid, live_eids)
        if not ok.all():
            ch, eid, ids = ch[ok], eid[ok], ids[ok]
        parts.append((ch, eid, ids))
    if len(parts) == 2:
        (ca, ea, ia), (cb, eb, ib) = parts
        n = len(ca) + len(cb)
        at_b = np.searchsorted(ca, cb, side="right") + np.arange(len(cb))
        is_b = np.zeros(n, bool)
        is_b[at_b] = True
        ch = np.empty(n, ca.dtype)
        eid = np.empty(n, ea.dtype)
        ids = np.empty((n, ia.shape[1]), ia.dtype)
        ch[is_b], ch[~is_b] = cb, ca
        eid[is_b], eid[~is_b] = eb, ea
        ids[is_b], ids[~is_b] = ib, ia
        return _Run(ch, eid, ids)
    ch = np.concatenate([p[0] for p in parts])
    eid = np.concatenate([p[1] for p in parts])
    ids = np.concatenate([p[2] for p in parts])
    o = np.argsort(ch, kind="stable")
    return _Run(ch[o], eid[o], ids[o])


class SegmentCache:
    """Entries (present keys) and their combos; `capacity` in bytes (0: none may be created).

    Entries are kept sorted by a 64-bit hash of the key (`khash`; each hash names at most one
    entry), each with a unique `eid` (its creation number, also the eviction order) and its
    count of live combos. Combos are in runs sorted by key hash (see the module docstring); a
    combo names its entry by eid, so a lookup confirms a candidate combo by one integer (the
    entry's key was confirmed on the full key), and the combos of an evicted entry are never
    returned even if its key comes back under a new eid. A lookup is a binary search per probe
    and run: O(q log n), whatever the size of the cache."""

    MERGE_RATIO = 8  # merge the last run into the one before while that one is at most this × larger
    COMPACT_MIN = 64  # compact only stores holding more combos than this

    def __init__(self, n_key: int, n_seg: int, capacity: int) -> None:
        self.n_key, self.n_seg = n_key, n_seg
        self.capacity = capacity
        self.runs: list[_Run] = []
        self.evicted = 0
        self.merged_rows = 0  # combos copied by merges (the store's write amplification)
        self._born = 0
        self.clear()

    def __len__(self) -> int:
        return len(self.keys)

    @property
    def rows(self) -> int:
        """Live combos of present entries."""
        return int(self.count.sum())

    def _combo_bytes(self) -> int:
        return 8 * (2 + self.n_seg)  # hash, eid, ids

    def nbytes(self) -> int:
        """Bytes of the entries and their live combos (what the capacity bounds)."""
        return int(len(self.keys) * 8 * (self.n_key + 3) + self.rows * self._combo_bytes())

    def physical_rows(self) -> int:
        """Combos held in runs, dead and orphaned ones included (at most about twice `rows`)."""
        return sum(len(r) for r in self.runs)

    def entry_bytes(self) -> float:
        """Average bytes per entry (its key and its combos), for the memory estimate."""
        per_key = 8 * (self.n_key + 3)
        if not len(self.keys):
            return float(per_key + self._combo_bytes())
        return per_key + self.rows / len(self.keys) * self._combo_bytes()

    def clear(self) -> None:
        self.keys = np.zeros((0, self.n_key), np.int64)
        self.khash = np.zeros(0, np.uint64)
        self.eid = np.zeros(0, np.int64)
        self.count = np.zeros(0, np.int64)
        self.runs = []

    # ------------------------------------------------------------ probe
    def _entry_of(self, q: np.ndarray, h: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Per key row: whether it has an entry, and that entry's index (meaningless if not)."""
        if not len(self.keys) or not len(q):
            return np.zeros(len(q), bool), np.zeros(len(q), np.int64)
        at = np.minimum(np.searchsorted(self.khash, h), len(self.khash) - 1)
        ok = self.khash[at] == h
        if ok.any():
            ok[ok] = (self.keys[at[ok]] == q[ok]).all(axis=1)
        return ok, at

    def lookup(self, q: np.ndarray, h: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """For probe keys q (n, p) (their hashes h, computed when not given): which are
        present, and for each (probe, combo) pair of equal key the probe's index and the
        combo's component ids (one row per pair, one column per segment input)."""
        h = key_hash(q) if h is None else h
        present, at = self._entry_of(q, h)
        reps, idss = [], []
        hq = np.flatnonzero(present)
        if len(hq):
            qh, qe = h[hq], self.eid[at[hq]]
            for r in self.runs:
                if not r.n_live:
                    continue
                lo = np.searchsorted(r.chash, qh, side="left")
                hi = np.searchsorted(r.chash, qh, side="right")
                rep, pos = expand(lo, hi - lo)
                if not len(pos):
                    continue
                ok = (r.eid[pos] == qe[rep]) & r.live[pos]
                reps.append(hq[rep[ok]])
                idss.append(r.ids[pos[ok]])
        if not reps:
            return present, np.zeros(0, np.int64), np.zeros((0, self.n_seg), np.uint64)
        return present, np.concatenate(reps), np.concatenate(idss)

    def present(self, q: np.ndarray, h: np.ndarray) -> np.ndarray:
        """Which key rows q (hashes h) have an entry (no combos gathered)."""
        return self._entry_of(q, h)[0]

    # ------------------------------------------------------------ updates
    def invalidate(self, pos: int, gone: np.ndarray) -> int:
        """Mark dead the combos whose component at segment position `pos` is among the ids
        `gone` (sorted): a binary search per gone id and run, no pass over the store and no
        copy. Returns the combos marked."""
        if not len(gone):
            return 0
        dead_eids = []
        for r in self.runs:
            if not r.n_live:
                continue
            d = r.with_id(pos, gone)
            if len(d):
                r.live[d] = False
                r.n_live -= len(d)
                dead_eids.append(r.eid[d])
        if not dead_eids:
            return 0
        de = np.concatenate(dead_eids)
        self._uncount(de)
        self._maybe_compact()
        return len(de)

    def _uncount(self, eids: np.ndarray) -> None:
        """Take combos of entries `eids` off their entries' counts (entries evicted: none)."""
        if not len(self.eid):
            return
        o = np.argsort(self.eid)
        se = self.eid[o]
        at = np.minimum(np.searchsorted(se, eids), len(se) - 1)
        ok = se[at] == eids
        np.subtract.at(self.count, o[at[ok]], 1)

    def maintain(self, key: np.ndarray, ids: np.ndarray, h: np.ndarray | None = None, distinct: bool = False) -> int:
        """Add the new combos (key, ids; key hashes h) whose key is present. Returns the rows
        added. `distinct`: the combos may repeat each other or the entry's live ones (a globally
        consistent cache's projections, one per partner): each is added once."""
        if not len(key) or not len(self.keys):
            return 0
        h = key_hash(key) if h is None else h
        take, at = self._entry_of(key, h)
        if distinct and take.any():
            take &= self._new_combos(at, ids, take)
        if not take.any():
            return 0
        self._add_run(h[take], at[take], ids[take])
        return int(take.sum())

    def _new_combos(self, at: np.ndarray, ids: np.ndarray, take: np.ndarray) -> np.ndarray:
        """Which rows (entry index at, ids) among `take` are neither live in their entry nor an
        earlier row's repeat."""
        rows = np.flatnonzero(take)
        cand = np.column_stack([self.eid[at[rows]], ids[rows].view(np.int64)])
        # the live combos of those entries only (a lookup: no pass over the store)
        ue = np.unique(at[rows])
        _present, q, old_ids = self.lookup(self.keys[ue], self.khash[ue])
        old = np.column_stack([self.eid[ue[q]], old_ids.view(np.int64)])
        _u, first, inv = np.unique(np.concatenate([old, cand]), axis=0, return_index=True, return_inverse=True)
        inv = inv.reshape(-1)
        # a candidate is new when it is the first occurrence of its row and no old row precedes it
        is_new = first[inv[len(old) :]] == len(old) + np.arange(len(cand))
        out = np.zeros(len(take), bool)
        out[rows[is_new]] = True
        return out

    def _add_run(self, h: np.ndarray, entry: np.ndarray, ids: np.ndarray) -> None:
        """A new run of combos (hashes h, entry indexes, ids), then merges while the run before
        is at most MERGE_RATIO × larger: O(log n) runs, each combo copied O(log n) times
        (8: a lookup searches about three runs in the benchmarks' caches)."""
        np.add.at(self.count, entry, 1)
        o = np.argsort(h, kind="stable")
        self.runs.append(_Run(h[o], self.eid[entry[o]], ids[o]))
        while len(self.runs) > 1 and len(self.runs[-2]) <= self.MERGE_RATIO * len(self.runs[-1]):
            b = self.runs.pop()
            a = self.runs.pop()
            m = _merge([a, b], np.sort(self.eid))
            self.merged_rows += len(m)
            self.runs.append(m)

    def _maybe_compact(self) -> None:
        """One run of the live combos once dead and orphaned ones outnumber them."""
        phys = self.physical_rows()
        if phys > self.COMPACT_MIN and phys > 2 * self.rows:
            m = _merge(self.runs, np.sort(self.eid))
            self.merged_rows += len(m)
            self.runs = [m] if len(m) else []

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
            if not len(keys):
                return 0
        o = np.argsort(h, kind="stable")
        at = np.searchsorted(self.khash, h[o], side="right")
        self.keys = np.insert(self.keys, at, keys[o], axis=0)
        self.khash = np.insert(self.khash, at, h[o])
        self.eid = np.insert(self.eid, at, self._born + np.arange(len(keys))[o])
        self.count = np.insert(self.count, at, 0)
        self._born += len(keys)
        if len(key):
            # the combos of the new entries (those of a key dropped above find no entry)
            new, eat = self._entry_of(key, ch)
            new &= self.eid[eat] >= self._born - len(keys)
            if new.any():
                self._add_run(ch[new], eat[new], ids[new])
        self._fit()
        return len(keys)

    def _fit(self) -> None:
        over = self.nbytes() - self.capacity
        if over <= 0 or not len(self.keys):
            return
        # drop whole entries, oldest first (smallest eid), until the rest fits; their combos
        # become orphans (never returned: a combo is confirmed on its entry's eid), dropped at
        # the next merge or compaction
        order = np.argsort(self.eid, kind="stable")
        size = 8 * (self.n_key + 3) + self.count[order] * self._combo_bytes()
        k = int(np.searchsorted(np.cumsum(size), over, side="left")) + 1
        keep = np.ones(len(self.keys), bool)
        keep[order[:k]] = False
        self.keys, self.khash, self.eid, self.count = (
            self.keys[keep],
            self.khash[keep],
            self.eid[keep],
            self.count[keep],
        )
        self.evicted += k
        self._maybe_compact()

    def contents(self) -> dict[tuple[int, ...], list[tuple[int, ...]]]:
        """Every present key and its live combos' ids, sorted (for tests and inspection)."""
        out: dict[tuple[int, ...], list[tuple[int, ...]]] = {tuple(map(int, k)): [] for k in self.keys}
        by_eid = {int(e): tuple(map(int, k)) for e, k in zip(self.eid, self.keys)}
        for r in self.runs:
            for e, row, ok in zip(r.eid.tolist(), r.ids.tolist(), r.live.tolist()):
                if ok and e in by_eid:
                    out[by_eid[e]].append(tuple(row))
        return {k: sorted(v) for k, v in out.items()}
