"""A numpy open-addressing hash map from non-negative int64 keys to int64 values, vectorized per
batch of keys (no Python per key): linear probing, a multiplicative hash, deletes as tombstones
that a re-insert of the same key revives and a rebuild drops once they pile up.

It replaces a Python dict where the keys are packed integers (see valuekeys.py): one lookup or
insert round is a handful of numpy operations over the keys still probing, and at a load of at
most one half nearly every key settles in the first or second round."""

from __future__ import annotations

import numpy as np

_EMPTY = -1  # key of a never-used cell (real keys are ≥ 0)
_DEAD = -1  # value of a deleted cell (a tombstone keeps its key, so probe chains stay intact)
_MUL = np.uint64(0x9E3779B97F4A7C15)  # Fibonacci hashing: the high bits of key · φ·2^64
_FEW = 512  # keys still probing at which lookups read _WINDOW cells a round instead of one
_WINDOW = 16


class IntMap:
    """Keys ≥ 0 → values ≥ 0; `get` returns −1 for an absent (or deleted) key."""

    def __init__(self, cap: int = 64) -> None:
        self._alloc(cap)
        self.live = 0

    def _alloc(self, cap: int) -> None:
        self.bits = max(int(cap - 1).bit_length(), 4)
        self.cap = 1 << self.bits
        self.keys = np.full(self.cap, _EMPTY, np.int64)
        self.vals = np.full(self.cap, _DEAD, np.int64)
        self.used = 0  # cells with a key (live or tombstone)
        # every key with a cell lies in [lo, hi] (kept on insert, exact again after a rebuild):
        # a lookup outside needs no probing — e.g. a value table's keys of later instants
        self.lo, self.hi = 0, -1

    def __len__(self) -> int:
        return self.live

    def nbytes(self) -> int:
        return 16 * self.cap

    def _home(self, q: np.ndarray) -> np.ndarray:
        with np.errstate(over="ignore"):
            h = q.astype(np.uint64) * _MUL
        return (h >> np.uint64(64 - self.bits)).astype(np.int64)

    def find(self, q: np.ndarray) -> np.ndarray:
        """Cell of each key in `q` (live or tombstone), −1 where the key has no cell."""
        if not len(q):
            return np.full(0, -1, np.int64)
        if self.lo > self.hi:  # no key has a cell
            return np.full(len(q), -1, np.int64)
        qlo, qhi = int(q.min()), int(q.max())
        if qlo < self.lo or qhi > self.hi:
            inside = np.flatnonzero((q >= self.lo) & (q <= self.hi))
            out = np.full(len(q), -1, np.int64)
            if len(inside):
                out[inside] = self._probe(q.take(inside))
            return out
        return self._probe(q)

    def _probe(self, q: np.ndarray) -> np.ndarray:
        """`find` by walking the probe chains."""
        out = np.full(len(q), -1, np.int64)
        pos = self._home(q)
        mask = self.cap - 1
        todo: np.ndarray | None = None  # None: all of q (the first round)
        # one cell per key and round while many keys probe (positions, not boolean masks, index
        # below: numpy's mask indexing is ~8× slower) ...
        while len(pos) > _FEW:
            k = self.keys.take(pos)
            hit = k == q
            at = np.flatnonzero(hit)
            out[at if todo is None else todo.take(at)] = pos.take(at)
            more = np.flatnonzero(~hit & (k != _EMPTY))
            todo = more if todo is None else todo.take(more)
            pos, q = (pos.take(more) + 1) & mask, q.take(more)  # q: the keys still probing
        if todo is None:
            todo = np.arange(len(q))
        # ... then the few left in long chains read _WINDOW cells a round (a chain ends at the key
        # or at the first empty cell), so a long chain costs a round or two, not one per cell
        step = np.arange(_WINDOW)
        while len(pos):
            cells = (pos[:, None] + step) & mask
            k = self.keys[cells]
            hit = k == q[:, None]
            stop = hit | (k == _EMPTY)
            first = stop.argmax(axis=1)
            rows = np.arange(len(pos))
            ended = stop[rows, first]
            found = ended & hit[rows, first]
            out[todo[found]] = cells[rows[found], first[found]]
            todo, pos, q = todo[~ended], (pos[~ended] + _WINDOW) & mask, q[~ended]
        return out

    def get(self, q: np.ndarray) -> np.ndarray:
        """Value of each key, −1 where absent or deleted."""
        cell = self.find(q)
        out = np.full(len(q), -1, np.int64)
        have = np.flatnonzero(cell >= 0)
        out[have] = self.vals.take(cell.take(have))
        return out

    def lookup(self, q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """`get` and the cells it read: (value of each key or −1, cell of each key or −1). The
        cells stay valid until the next insert (which may rebuild): `delete_cells` then deletes
        found keys without probing for them again."""
        cell = self.find(q)
        out = np.full(len(q), -1, np.int64)
        have = np.flatnonzero(cell >= 0)
        out[have] = self.vals.take(cell.take(have))
        return out, cell

    def delete_cells(self, cells: np.ndarray) -> None:
        """Delete the live keys at these (distinct) cells, as `lookup` gave them."""
        self.vals[cells] = _DEAD
        self.live -= len(cells)

    def delete(self, q: np.ndarray) -> None:
        """Delete the (live, distinct) keys `q`."""
        if not len(q):
            return
        cell = self.find(q)
        self.vals[cell] = _DEAD
        self.live -= len(q)

    def insert(self, q: np.ndarray, v: np.ndarray) -> None:
        """Insert the distinct keys `q` (none of them live) with values `v` ≥ 0."""
        if not len(q):
            return
        if 2 * (self.used + len(q)) > self.cap:
            self._rebuild(len(q))
        cell = self.find(q)
        back = cell >= 0  # tombstones of these very keys: revive in place
        if back.any():
            at = np.flatnonzero(back)  # (positions, not masks: numpy's mask indexing is slow)
            self.vals[cell.take(at)] = v.take(at)
            rest = np.flatnonzero(~back)
            q, v = q.take(rest), v.take(rest)
            self.live += len(at)
        self.live += len(q)
        self.used += len(q)
        if len(q):
            qlo, qhi = int(q.min()), int(q.max())
            empty = self.lo > self.hi
            self.lo = qlo if empty else min(self.lo, qlo)
            self.hi = qhi if empty else max(self.hi, qhi)
        pos = self._home(q)
        mask = self.cap - 1
        while len(q) > _FEW:
            cand = np.flatnonzero(self.keys.take(pos) == _EMPTY)
            # several keys may probe the same empty cell: one write lands, the read-back says which
            pc, qc = pos.take(cand), q.take(cand)
            self.keys[pc] = qc
            won = self.keys.take(pc) == qc
            win = cand.take(np.flatnonzero(won))
            self.vals[pos.take(win)] = v.take(win)
            stay = np.ones(len(q), bool)
            stay[win] = False
            left = np.flatnonzero(stay)
            q, v, pos = q.take(left), v.take(left), (pos.take(left) + 1) & mask  # their cell is taken now
        step = np.arange(_WINDOW)
        while len(q):  # the few left: the first empty cell within _WINDOW cells, per round
            cells = (pos[:, None] + step) & mask
            empty = self.keys[cells] == _EMPTY
            first = empty.argmax(axis=1)
            some = np.flatnonzero(empty[np.arange(len(q)), first])
            cand = cells[some, first[some]]
            _, wi = np.unique(cand, return_index=True)  # one key per empty cell: the first asking
            won = some[wi]
            self.keys[cand[wi]] = q[won]
            self.vals[cand[wi]] = v[won]
            pos = (pos + _WINDOW) & mask  # no empty cell in the window: the next window
            pos[some] = (cand + 1) & mask  # lost the cell to another key: on from it
            stay = np.ones(len(q), bool)
            stay[won] = False
            q, v, pos = q[stay], v[stay], pos[stay]

    def _rebuild(self, incoming: int) -> None:
        """Re-hash the live entries into a table of at least 4 × (live + incoming) cells."""
        alive = (self.keys != _EMPTY) & (self.vals != _DEAD)
        k, v = self.keys[alive], self.vals[alive]
        self._alloc(max(4 * (len(k) + incoming), 64))
        self.live = 0
        self.insert(k, v)

    def items(self) -> tuple[np.ndarray, np.ndarray]:
        """(keys, values) of the live entries."""
        alive = (self.keys != _EMPTY) & (self.vals != _DEAD)
        return self.keys[alive], self.vals[alive]
