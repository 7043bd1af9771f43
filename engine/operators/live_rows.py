"""A relation's live rows kept in place between calls: the stream–relation join's state.

The join used to rebuild its state every call (the carried rows concatenated with the call's
inserts, a copy of every live row whenever one was deleted): O(state · width) per call however
few the events (Linear Road: ~20k carried rows for ~1k events a call). Here rows are written
once, after the last ones, into arrays with spare capacity (doubled when full), and a delete
only marks its row dead; the dead rows are compacted away in place, in order, once they are as
many as the live ones, so every row costs O(1) amortized and the rows stay in insertion order.
Views of the rows (`view()`) are for the length of a call: compaction rewrites the arrays.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from cqlstream.cql.types import DataType
from cqlstream.engine.batch import Batch

MIN_ROOM = 256  # rows of the first arrays
MIN_DEAD = 64  # dead rows below which they are never compacted away (a few cost less than a compaction)


class LiveRows:
    """Rows in insertion order, some of them dead: `view()` is every row held (positions are
    stable until the next `compact`), `live()` the positions of the live ones."""

    def __init__(self, types: Sequence[DataType]) -> None:
        self.types = list(types)
        self.room: Batch = Batch.empty(self.types)  # arrays with spare capacity; rows [0, n) are held
        self.dtypes = [c.dtype for c in self.room.cols]
        self.n = 0
        self.dead: np.ndarray | None = None  # per room row, whether deleted (None: none ever was)
        self.n_dead = 0
        self._view: Batch | None = None

    def __len__(self) -> int:
        """The live rows."""
        return self.n - self.n_dead

    def __getstate__(self) -> dict[str, Any]:
        """Pickled (checkpoints) as the live rows alone, without spare capacity."""
        return {"types": self.types, "rows": self.batch()}  # (no spare capacity, no dead rows)

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["types"])  # type: ignore[misc]
        self.append(state["rows"])

    def view(self) -> Batch:
        """Every row held, live and dead (views of the room; made once per change)."""
        if self._view is None:
            self._view = self.room.slice(0, self.n)
        return self._view

    def ids(self) -> np.ndarray:
        """The ids of the rows of `view()`."""
        return self.room.id[: self.n]

    def live(self) -> np.ndarray:
        """Positions of the live rows in `view()`, ascending."""
        if not self.n_dead:
            return np.arange(self.n)
        assert self.dead is not None
        return (~self.dead[: self.n]).nonzero()[0]

    def alive(self, pos: np.ndarray) -> np.ndarray:
        """The positions of `pos` (rows of `view()`) that are live, in their order."""
        if not self.n_dead or not len(pos):
            return pos
        assert self.dead is not None
        return pos.take((~self.dead.take(pos)).nonzero()[0])

    def batch(self) -> Batch:
        """The live rows (a copy: the arrays held are rewritten in place by `compact_if_due`)."""
        return self.view().take(self.live())

    def nbytes(self) -> int:
        return self.view().nbytes()

    def append(self, b: Batch, at: np.ndarray | None = None) -> None:
        """Writes the rows of `b` (those at positions `at`, when given) after the last ones."""
        k = len(b) if at is None else len(at)
        if not k:
            return
        room = self.room
        full = self.n + k > len(room)
        if full or ([c.dtype for c in b.cols] != self.dtypes and self._wider(b)):
            # full, or a column that needs a wider dtype: new arrays
            self._regrow(self.n + k, b)
            room = self.room
        to = slice(self.n, self.n + k)
        for dst, src in zip((*room.cols, room.ts, room.sign, room.id), (*b.cols, b.ts, b.sign, b.id)):
            dst[to] = src if at is None else src.take(at)
        for c, mask in enumerate(b.nulls):
            held = room.nulls[c]
            if mask is not None and held is None:  # the first NULL of the column: its mask now
                held = room.nulls[c] = np.zeros(len(room), bool)
            if held is not None:
                if mask is None:
                    held[to] = False
                else:
                    held[to] = mask if at is None else mask.take(at)
        self.n += k
        self._view = None

    def _wider(self, b: Batch) -> bool:
        """Whether a column of `b` needs a wider dtype than the one held."""
        return any(np.result_type(r, c) != r.dtype for r, c in zip(self.room.cols, b.cols))

    def kill(self, pos: np.ndarray) -> None:
        """Marks the (live, distinct) rows at positions `pos` of `view()` dead."""
        if not len(pos):
            return
        if self.dead is None:
            self.dead = np.zeros(len(self.room), bool)
        self.dead[pos] = True
        self.n_dead += len(pos)

    def compact_if_due(self) -> bool:
        """Drops the dead rows (keeping the live ones' order) once they are as many as the live
        ones (and at least `MIN_DEAD`); positions from `view()` change. Whether it did."""
        if not self.n_dead or self.n_dead < max(len(self), MIN_DEAD):
            return False
        live = self.live()
        k = len(live)
        if len(self.room) > 8 * k + (MIN_ROOM << 4):  # (a room left by a burst shrinks)
            self._regrow(k, None, compact=True)
            return True
        room = self.room
        # in place: the live rows move to the front (a gather, then one write per array);
        # nothing outside holds views of the rows between calls (`batch()` copies)
        for arr in (*room.cols, room.ts, room.sign, room.id):
            arr[:k] = arr[: self.n].take(live)
        for m in room.nulls:
            if m is not None:
                m[:k] = m[: self.n].take(live)
        assert self.dead is not None
        self.dead[: self.n] = False
        self.n, self.n_dead, self._view = k, 0, None
        return True

    def _regrow(self, need: int, incoming: Batch | None, compact: bool = False) -> None:
        """New arrays with room for `need` rows and spare capacity (dtypes wide enough for
        `incoming` too), holding the rows held so far; `compact`: only the live ones (positions
        change), else all of them at the same positions."""
        rows = self.view() if not compact or not self.n_dead else self.view().take(self.live())
        k = len(rows)
        cap = max(MIN_ROOM, 2 * need)
        cols: list[np.ndarray] = []
        nulls: list[np.ndarray | None] = []
        for c, col in enumerate(rows.cols):
            dt = col.dtype if incoming is None else np.result_type(col, incoming.cols[c])
            new = np.empty(cap, dt)
            new[:k] = col
            cols.append(new)
            m = rows.nulls[c]
            if m is None:
                nulls.append(None)
            else:
                mask = np.zeros(cap, bool)
                mask[:k] = m
                nulls.append(mask)
        parts = []
        for arr in (rows.ts, rows.sign, rows.id):
            new = np.empty(cap, arr.dtype)
            new[:k] = arr
            parts.append(new)
        self.room = Batch(cols, nulls, parts[0], parts[1], parts[2])
        self._view = None
        self.dtypes = [c.dtype for c in cols]
        if compact or self.dead is None:
            self.n, self.dead, self.n_dead = k, None, 0
        else:
            dead = np.zeros(cap, bool)
            dead[:k] = self.dead[:k]
            self.dead = dead
