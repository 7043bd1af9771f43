"""The ids a stateful operator gave its inserted rows, kept in insertion order, so that deletes
arriving in that same order get their id without a lookup (shared by the grouped aggregate's
group keys, engine/aggregates/keys.py, and DISTINCT's value table, valuecount.py).

Why: a `[Range N]`, `[Rows N]` or `[Now]` window retracts its rows in the order it inserted
them, so an aggregate or DISTINCT over it sees every row twice — on insert and on expiry — and
without this would intern the row's key both times (a sort of the batch's keys and a search in
the known keys each time). Here the operator pushes, per batch, the packed keys (one int64 per
row: engine/operators/valuekeys.py's layout) and the ids it gave its inserts; the batch's deletes
are then compared, as one vectorized array comparison, with the keys at the FIFO's head, and
when all are equal they take the head's ids and the head moves on. The join pairs its window
deletes with their inserts the same way (`Table._match` in join.py).

Why it is exact: an id is handed out per key (a group of an aggregate, a value of DISTINCT), so
a delete may take the id of *any* entry with its key, as long as that id is still the key's.
While the FIFO is on, every delete has consumed one entry of its own key, so the entries are
exactly the keys of the rows present (as a multiset): a key with an entry has a present row,
hence a live id that cannot have been released or reused (an operator releases a key's id only
when its count drops to zero). The first batch whose deletes do not match the head exactly
(a Partition By window, a relation deleting out of order, a layout that no longer packs)
switches the FIFO off for good: those deletes, and all later rows, go through the operator's
interner as before. Renumbering (an aggregate's compaction) maps the stored ids (`remap`); a
wider key layout re-packs the stored keys (`repack`).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

_EMPTY = np.zeros(0, np.int64)


class RetractFifo:
    """Packed keys and ids of the inserted rows not yet retracted, oldest first (module doc)."""

    def __init__(self) -> None:
        self.on = True
        self.keys = _EMPTY
        self.ids = _EMPTY
        self.head = 0  # entries before it are consumed (dropped at the next push)
        self.hits = 0  # deletes served (for tests and EXPLAIN-free inspection)

    def __len__(self) -> int:
        return len(self.keys) - self.head

    def nbytes(self) -> int:
        return self.keys.nbytes + self.ids.nbytes

    def push(self, keys: np.ndarray, ids: np.ndarray) -> None:
        """Inserted rows, in insertion order: their packed keys and the ids they were given."""
        if not self.on or not len(keys):
            return
        h = self.head
        self.keys = np.concatenate([self.keys[h:], keys])
        self.ids = np.concatenate([self.ids[h:], ids])
        self.head = 0

    def take(self, keys: np.ndarray) -> np.ndarray | None:
        """Ids of deletes with packed keys `keys` (in arrival order): the head's ids when its keys
        are exactly these (the head then moves past them); else None, and the FIFO is off for
        good (the caller looks the deletes up itself)."""
        if not self.on:
            return None
        k, h = len(keys), self.head
        if k <= len(self.keys) - h and np.array_equal(self.keys[h : h + k], keys):
            self.head = h + k
            self.hits += k
            return self.ids[h : h + k]
        self.off()
        return None

    def off(self) -> None:
        """Stop for good (a delete out of order, or keys that no longer pack)."""
        self.on = False
        self.keys = self.ids = _EMPTY
        self.head = 0

    def remap(self, remap: np.ndarray) -> None:
        """The operator renumbered its ids (old id → new id)."""
        if self.on and len(self.ids):
            self.ids = remap[self.ids[self.head :]]
            self.keys = self.keys[self.head :]
            self.head = 0

    def repack(self, convert: Callable[[np.ndarray], np.ndarray]) -> None:
        """The key layout changed: the stored keys are converted to the new one."""
        if self.on and len(self.keys):
            self.keys = convert(self.keys[self.head :])
            self.ids = self.ids[self.head :]
            self.head = 0
