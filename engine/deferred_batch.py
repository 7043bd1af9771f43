"""Batches whose rows are built where they are read: the compact hand-off of the output path.

A `DeferredBatch` knows its timestamps at once (queues cut and watermark by them) and builds its
columns, NULL masks, signs and ids on the first read of any of them, from a recipe given by the
operator that made it. A query's result batch is read first by the writer (a writer thread with
`cqlstream run --threads 2`), so the operator's main-thread work stops at a compact record and
the rows are laid out beside the engine. Any other reader (a downstream operator, a snapshot,
a checkpoint's pickle) builds it the same way: the rows do not depend on who reads them first.

`ChangeRows` is the recipe of an operator that updates keyed rows (the grouped aggregate): per
changed cell, the key values, the old and new row values and ids, expanded into the `−` old row
/ `+` new row pairs. `DeferredBatch.project` keeps a projection of plain column references
deferred too. A recipe must read only arrays that nobody writes into after the hand-off.

A batch made from a `ChangeRows` also offers it as its compact form (`change_view`): a reader that
can use the record directly (io/change_text.py: the text of each `−`/`+` pair's shared instant and
key made once) asks for it and skips the row layout; any other batch, or one whose rows were
replaced, has none and is read the usual way. A reader may also prefer rows already laid out (the
text output does: a producer lays them out to share a writer thread's work).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np
from numpy.typing import DTypeLike

from cqlstream.engine.batch import Batch
from cqlstream.engine.kernels import stable_order

# what a recipe builds: columns, NULL masks, signs (ids have a recipe of their own: a writer
# never reads them)
Rows = tuple[list[np.ndarray], list[np.ndarray | None], np.ndarray]


class DeferredBatch(Batch):
    """A `Batch` with eager `ts` whose columns, NULL masks and signs are built by `rows()`, and
    ids by `ids()`, on first read (each once, under a lock: two threads reading at once build
    it once). A slice stays deferred."""

    def __init__(
        self,
        ts: np.ndarray,
        width: int,
        rows: Callable[[], Rows],
        ids: Callable[[], np.ndarray],
        view: ChangeView | None = None,
        parent: DeferredBatch | None = None,
    ) -> None:  # no super(): the other fields are properties
        self.ts = ts
        self._view = view
        self._view_ts = ts  # a view stands only while ts is still this array
        self._parent = parent  # (a projection's rows are read from its parent's: its view too)
        self._width = width
        self._rows_fill: Callable[[], Rows] | None = rows
        self._ids_fill: Callable[[], np.ndarray] | None = ids
        self._rows: Rows | None = None
        self._ids: np.ndarray | None = None
        self._lock = threading.Lock()

    @property
    def built(self) -> bool:
        """Whether the rows have been laid out (tests, benchmarks)."""
        return self._rows is not None

    def build(self) -> None:
        """Lay the rows out now, on this thread (a producer with nothing better to do than wait
        for the thread that would read them: io/result_writer.py)."""
        self._built()

    def _built(self) -> Rows:
        r = self._rows
        if r is None:
            with self._lock:
                r = self._rows
                if r is None:
                    assert self._rows_fill is not None
                    r = self._rows = self._rows_fill()
                    self._rows_fill = None  # drops what it read
        return r

    def _built_ids(self) -> np.ndarray:
        i = self._ids
        if i is None:
            with self._lock:
                i = self._ids
                if i is None:
                    assert self._ids_fill is not None
                    i = self._ids = self._ids_fill()
                    self._ids_fill = None
        return i

    def change_view(self) -> ChangeView | None:
        """The change record these rows are laid out from, with the record columns they show,
        or None (not made from one, or a slice, or its instants, columns, masks or signs were replaced)."""
        if self.ts is not self._view_ts or (self._parent is not None and self._parent.change_view() is None):
            return None
        return self._view

    def _set(self, k: int, v: Any) -> None:
        self._view = None  # the rows no longer are the record's
        cols, nulls, sign = self._built()
        parts = [cols, nulls, sign]
        parts[k] = v
        self._rows = (parts[0], parts[1], parts[2])  # type: ignore[assignment]

    @property
    def cols(self) -> list[np.ndarray]:
        return self._built()[0]

    @cols.setter
    def cols(self, v: list[np.ndarray]) -> None:
        self._set(0, v)

    @property
    def nulls(self) -> list[np.ndarray | None]:
        return self._built()[1]

    @nulls.setter
    def nulls(self, v: list[np.ndarray | None]) -> None:
        self._set(1, v)

    @property
    def sign(self) -> np.ndarray:
        return self._built()[2]

    @sign.setter
    def sign(self, v: np.ndarray) -> None:
        self._set(2, v)

    @property
    def id(self) -> np.ndarray:
        return self._built_ids()

    @id.setter
    def id(self, v: np.ndarray) -> None:
        self._built_ids()
        self._ids = v

    @property
    def width(self) -> int:
        return self._width

    def take(self, idx: np.ndarray | slice | Sequence[int]) -> Batch:
        """A slice stays deferred (a writer formats a large batch chunk by chunk and never
        reads its ids); other indexes give a plain batch."""
        if not isinstance(idx, slice):
            return super().take(idx)

        def rows() -> Rows:
            cols, nulls, sign = self._built()
            return [c[idx] for c in cols], [None if m is None else m[idx] for m in nulls], sign[idx]

        return DeferredBatch(self.ts[idx], self._width, rows, lambda: self._built_ids()[idx])

    def project(self, idx: Sequence[int]) -> Batch:
        """Columns `idx` (a projection of plain column references), still deferred; masks
        without a NULL are None, as the evaluated projection gives them."""

        def rows() -> Rows:
            cols, nulls, sign = self._built()
            kept = [nulls[i] for i in idx]
            return [cols[i] for i in idx], [None if m is None or not m.any() else m for m in kept], sign

        v = self._view
        view = None if v is None else ChangeView(v.rec, tuple(v.picks[i] for i in idx))
        return DeferredBatch(self.ts, len(idx), rows, self._built_ids, view, self)

    def __reduce__(self) -> tuple[type, tuple[Any, ...]]:
        """Pickled (checkpoints) as the plain batch it stands for."""
        cols, nulls, sign = self._built()
        return Batch, (cols, nulls, self.ts, sign, self._built_ids())


@dataclass(frozen=True)
class ChangeRows:
    """The rows of k changed cells, given per changed cell in the operator's order (by group):
    its instant `ts` (relative to `tmin`), whether it deletes its group's old row (`dels`: `−`,
    old values, `old_id`) and inserts a new one (`ins`: `+`, new values, `new_id`), its group key
    (`keys`/`key_nulls`) and its position `cell` in the operator's value arrays `old`/`new` (over
    all of its cells: gathered here rather than by the operator). The rows are in ts order
    (stable: per instant in the cells' order), each cell's `−` before its `+`; a cell with
    neither flag (an unchanged cell the operator kept rather than gathered out) has no row."""

    ts: np.ndarray  # int64, minus tmin
    tmin: int
    tmax: int
    dels: np.ndarray
    ins: np.ndarray
    keys: list[np.ndarray]
    key_nulls: list[np.ndarray | None]
    cell: np.ndarray
    old: list[tuple[np.ndarray, np.ndarray]]  # (values, NULL flags) per value column
    new: list[tuple[np.ndarray, np.ndarray]]
    old_id: np.ndarray
    new_id: np.ndarray

    def rows_ts(self) -> np.ndarray:
        """The rows' timestamps, without ordering the cells: rows per instant, repeated (a sort
        of the rows' instants when they span far more instants than there are cells)."""
        span = self.tmax - self.tmin + 1
        both = self.dels.all() and self.ins.all()  # every cell has both rows (a window's groups, mostly)
        w = 2 if both else self.dels.view(np.uint8) + self.ins.view(np.uint8)
        if span > 4 * len(self.ts) + 1024:  # sparse instants: no table per instant
            return np.sort(np.repeat(self.ts, w)) + self.tmin
        if both:
            per = np.bincount(self.ts, minlength=span)
            per *= 2
        else:
            per = np.bincount(self.ts, weights=w, minlength=span).astype(np.int64)
        return np.repeat(np.arange(self.tmin, self.tmax + 1, dtype=np.int64), per)

    @cached_property
    def layout(self) -> tuple[np.ndarray, np.ndarray | None]:
        """(the cells in ts order (stable), the kept slots of the (del, ins) pairs laid out in
        that order, or None when every cell has both rows)."""
        o = stable_order(self.ts, 0, self.tmax - self.tmin)
        dm, im = self.dels.take(o), self.ins.take(o)
        if dm.all() and im.all():
            return o, None
        keep = np.empty((len(o), 2), bool)
        keep[:, 0] = dm
        keep[:, 1] = im
        return o, np.flatnonzero(keep.reshape(-1))

    def _pick(self, a: np.ndarray | int, b: np.ndarray | int, dt: DTypeLike) -> np.ndarray:
        """Per kept slot: a[j] for slot 2j (the `−` row of the j-th cell in ts order), b[j] for
        2j + 1 (its `+` row)."""
        o, slot = self.layout
        out = np.empty((len(o), 2), dt)
        out[:, 0] = a
        out[:, 1] = b
        flat = out.reshape(-1)
        return flat if slot is None else flat.take(slot)

    def expand(self) -> Rows:
        """The rows: key columns, then value columns; signs. The cells are put in ts order, each
        laid out as a (del, ins) pair of slots; the slots of missing rows (a group appearing or
        becoming empty) are dropped by one gather at the kept slots. Only gathers and strided
        writes: this runs on every output row."""
        o, slot = self.layout
        pick = self._pick
        c = self.cell.take(o)  # cells in output order (take: faster than a fancy index)
        cols: list[np.ndarray] = []
        nulls: list[np.ndarray | None] = []
        half = None if slot is None else o.take(slot >> 1)  # per kept row its cell, in the operator's order
        for kv, km in zip(self.keys, self.key_nulls):
            if half is None:  # every cell has both rows: strided writes
                kv = kv.take(o)
                cols.append(pick(kv, kv, kv.dtype))
                nulls.append(None if km is None else pick(km.take(o), km.take(o), bool))
            else:
                cols.append(kv.take(half))
                nulls.append(None if km is None else km.take(half))
        for (pv, pn), (v, nl) in zip(self.old, self.new):
            cols.append(pick(pv.take(c), v.take(c), v.dtype))
            pm, nm = pn.take(c), nl.take(c)
            m = pick(pm, nm, bool) if (pm.any() or nm.any()) else None
            nulls.append(m if m is not None and m.any() else None)
        return cols, nulls, pick(-1, 1, np.int8)

    def ids(self) -> np.ndarray:
        """The rows' ids: the old row's for a `−`, the new row's for a `+`."""
        o = self.layout[0]
        return self._pick(self.old_id.take(o), self.new_id.take(o), np.uint64)


@dataclass(frozen=True)
class ChangeView:
    """A deferred batch's rows as a change record: its column j is the record's column
    `picks[j]` (the record's columns: its keys, then its values)."""

    rec: ChangeRows
    picks: tuple[int, ...]


def build_now(batches: list[Batch]) -> None:
    """Lay out the deferred ones among `batches` on this thread (their reader then reads the rows
    and no longer the record: io/change_text.py)."""
    for b in batches:
        if isinstance(b, DeferredBatch):
            b.build()


def change_batch(rec: ChangeRows) -> DeferredBatch:
    """The deferred batch of `rec`'s rows: their instants now, the rest when first read."""
    width = len(rec.keys) + len(rec.new)
    return DeferredBatch(rec.rows_ts(), width, rec.expand, rec.ids, ChangeView(rec, tuple(range(width))))


__all__ = ["ChangeRows", "ChangeView", "DeferredBatch", "Rows", "build_now", "change_batch"]
