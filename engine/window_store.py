"""One store of a stream's elements for every plain window over it (STREAM's shared window
synopsis, IEEE DE Bulletin §2.2; docs/plan-manager.md), and the view through which joins read a
window's relation from it."""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import numpy as np

from cqlstream.engine.batch import Batch
from cqlstream.engine.operators.base import Operator
from cqlstream.engine.operators.window import WindowOp
from cqlstream.engine.operators.window_logic import emit_slices
from cqlstream.engine.queues import Queue
from cqlstream.engine.synopses import Synopsis


class WindowStore(Synopsis):
    """The elements of one stream held once for every plain Range (or every plain Rows) window
    over it, whatever their sizes (STREAM's shared window synopsis, IEEE DE Bulletin §2.2): each
    window reads its own extent. A Range window of life L at bound b inserts the elements with
    τ in (p, b] and deletes those with τ + L in (p, b] (p: its previous bound); a Rows N window
    deletes element j when element j + N arrives. Both are slices of one ts-sorted buffer.
    Elements are dropped once no member can still need them. Which windows it serves is their
    kind's `store_mode`; each reads its `extent()` (life in instants, or rows)."""

    kind = "window store"
    room: Batch | None = None  # (class defaults: checkpoints of before the room lack them)
    lo = end = 0

    def __init__(self, queue: Queue, mode: str, eid: str | None = None, held_from: int | None = None) -> None:
        """`held_from`: a store started while its stream flowed holds the elements from there on."""
        self.queue = queue
        self.mode = mode
        self.reader = queue.reader()
        self.buf = Batch.empty(queue.types)
        self.first = 0  # global arrival index of buf[0]
        self.count = 0  # elements appended
        self.through: int | None = None
        self.members: list[WindowOp] = []
        self.done: dict[int, int] = {}  # id(member) → elements it has consumed (Rows)
        self.eid = eid
        # completeness: every element with τ ≥ held_from (Range) / index ≥ first (Rows) is held;
        # a store started while its stream flowed misses what came before (`partial`)
        self.partial = held_from is not None
        self.held_from: int | None = held_from
        self.views: list[WindowRelation] = []  # members' relations read by joins
        # `buf` is a view of rows [lo, end) of `room`, arrays with spare capacity after them, so
        # an append writes only the new rows (a concat copied the whole held window every call);
        # rows once written are never overwritten (readers may hold views of them): a full room
        # is replaced by a new one, twice the live rows, and the old stays with its viewers
        self.room: Batch | None = None
        self.lo = self.end = 0

    def __getstate__(self) -> dict[str, Any]:
        """Pickling (server checkpoints): `done` is keyed by id(member); it travels by member
        position. The room (spare capacity) is left out: the first append after a restore makes one."""
        state = self.__dict__.copy()
        state["done"] = [(i, self.done[id(m)]) for i, m in enumerate(self.members) if id(m) in self.done]
        state["room"], state["lo"], state["end"] = None, 0, 0
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        state["done"] = {id(state["members"][i]): c for i, c in state["done"]}
        self.__dict__.update(state)

    def __len__(self) -> int:
        return len(self.buf)

    def nbytes(self) -> int:
        return self.buf.nbytes()

    @property
    def users(self) -> list[WindowOp]:
        return self.members

    def peek(self) -> Batch | None:
        return self.buf

    def join(self, op: WindowOp) -> None:
        """Add a member (through `WindowOp.join_store`); one joining while data flows starts at
        the store's position."""
        self.members.append(op)
        if self.through is not None:
            self.done[id(op)] = self.count

    def leave(self, op: WindowOp) -> None:
        if op in self.members:
            self.members.remove(op)
            self.done.pop(id(op), None)
            self._purge()  # what only the leaving window needed goes now

    def complete_from(self, op: WindowOp) -> float | None:
        """From which instant `op`'s window is exact given what the store holds (None: from the
        start; math.inf: never, a Rows window that missed elements)."""
        if self.mode == "range":
            return None if self.held_from is None else self.held_from + op.window.extent() - 1
        c = self.done.get(id(op), self.count)
        if self.partial or (self.first > 0 and c - op.window.extent() < self.first):
            return math.inf
        return None

    def advance(self, bound: int) -> None:
        if self.through is not None and bound <= self.through:
            return
        d = self.reader.take(bound)
        self.through = bound
        if len(d):
            self._append(d)
            self.count += len(d)

    def _append(self, d: Batch) -> None:
        """`buf` + `d`: written after `buf` in the room when it has space (and the NULL masks
        agree), else both copied into a new room with spare capacity."""
        room, n, k = self.room, len(self.buf), len(d)
        fits = (
            room is not None
            and self.end + k <= len(room) <= 8 * (n + k) + (1 << 16)  # (a room left by a burst shrinks)
            and not any(r is None and m is not None for r, m in zip(room.nulls, d.nulls))
        )
        if not fits:
            cap = max(2 * (n + k), 1024)
            room = Batch(
                [np.empty(cap, c.dtype) for c in d.cols],
                [None if m is None and h is None else np.zeros(cap, bool) for m, h in zip(d.nulls, self.buf.nulls)],
                np.empty(cap, np.int64),
                np.empty(cap, np.int8),
                np.empty(cap, np.uint64),
            )
            b = self.buf
            for dst, src in zip((*room.cols, room.ts, room.sign, room.id), (*b.cols, b.ts, b.sign, b.id)):
                dst[:n] = src
            for mask, held in zip(room.nulls, b.nulls):
                if mask is not None and held is not None:
                    mask[:n] = held
            self.room, self.lo, self.end = room, 0, n
        assert room is not None
        e = self.end
        for dst, src in zip((*room.cols, room.ts, room.sign, room.id), (*d.cols, d.ts, d.sign, d.id)):
            dst[e : e + k] = src
        for mask, new in zip(room.nulls, d.nulls):
            if mask is not None:
                mask[e : e + k] = False if new is None else new
        self.end = e + k
        self.buf = room.slice(self.lo, self.end)

    def _readers(self) -> Iterator[tuple[WindowOp, int | None]]:
        """(window, its progress) for every member and every operator reading a member's relation
        through a `WindowRelation` view (a join lagging behind its window keeps elements here)."""
        for m in self.members:
            yield m, m.done_through
        for v in self.views:
            for u in v.users:
                yield v.window, u.done_through

    def _purge(self) -> None:
        readers = list(self._readers())
        progress = [(w, p) for w, p in readers if p is not None]
        if not self.members or len(progress) < len(readers):
            return
        if self.mode == "range":
            low = min(p - w.window.extent() for w, p in progress)  # keep τ > low
            k = int(self.buf.ts.searchsorted(low, side="right"))
        else:
            # keep j ≥ low: a member needs the N before what it consumed; a view reader the N
            # before the count at its progress
            low = min(self.done.get(id(m), 0) - m.window.extent() for m in self.members)
            for v in self.views:
                for u in v.users:
                    assert u.done_through is not None  # every reader has progress (checked above)
                    low = min(low, self.count_through(u.done_through) - v.window.window.extent())
            k = max(0, min(low - self.first, len(self.buf)))
        if k > 0:
            if self.mode == "range":
                self.held_from = max(self.held_from if self.held_from is not None else low + 1, low + 1)
            self.buf = self.buf.slice(k, len(self.buf))
            self.first += k
            self.lo += k

    def deltas(self, op: WindowOp, bound: int) -> Batch:
        """`op`'s output elements for instants (op.done_through, bound]."""
        self.advance(bound)
        p = op.done_through
        ts = self.buf.ts
        if self.mode == "range":
            L = op.window.extent()
            lo = 0 if p is None else int(ts.searchsorted(p, side="right"))
            hi = int(ts.searchsorted(bound, side="right"))
            dlo = 0 if p is None else int(ts.searchsorted(p - L, side="right"))
            dhi = int(ts.searchsorted(bound - L, side="right"))
            out = emit_slices(self.buf, lo, hi, dlo, dhi, ts[dlo:dhi], L)
        else:
            n = op.window.extent()
            c0 = self.done.get(id(op), 0)
            c1 = self.first + int(ts.searchsorted(bound, side="right"))
            j0, j1 = max(c0 - n, self.first), max(c1 - n, self.first)
            f = self.first
            out = emit_slices(self.buf, c0 - f, c1 - f, j0 - f, j1 - f, ts[j0 + n - f : j1 + n - f])
            self.done[id(op)] = c1
        op.done_through = bound  # (step sets it too) the purge below must see this member's progress
        self._purge()
        return out

    def count_through(self, t: int) -> int:
        """Global index one past the last element with ts ≤ t."""
        return self.first + int(self.buf.ts.searchsorted(t, side="right"))

    def contents(self, op: WindowOp, t: int | None = None) -> Batch | None:
        """The elements in op's window at instant t (default: its last processed instant), with
        their own ts; t must not be later than what the store has taken in."""
        t = op.done_through if t is None else t
        if t is None:
            return None
        ts = self.buf.ts
        if self.mode == "range":
            lo = int(ts.searchsorted(t - op.window.extent(), side="right"))
            hi = int(ts.searchsorted(t, side="right"))
            return self.buf.slice(lo, hi)
        c = self.count_through(t)
        return self.buf.slice(max(c - op.window.extent() - self.first, 0), c - self.first)


class WindowRelation(Synopsis):
    """A plain window's relation as a join reads it (the `RelationStore` interface), answered
    from the stream's window store: the window's contents at instant t are a slice of it, so a
    join over windows keeps no copy of their state (STREAM's synopsis stubs over one store)."""

    kind = "window relation (view)"

    def __init__(self, window: WindowOp, eid: str | None = None):
        self.window = window
        assert window.store is not None, "a view reads a window served by a window store"
        self.store: WindowStore = window.store
        self.store.views.append(self)
        self.queue = window.output
        self.reader = None
        self.users: list[Operator] = []
        self.eid = eid

    @property
    def through(self) -> int | None:  # type: ignore[override]  # a view's progress is its window's
        return self.window.done_through

    def __len__(self) -> int:
        c = self.store.contents(self.window)
        return 0 if c is None else len(c)

    def nbytes(self) -> int:
        return 0  # the elements are the window store's

    def advance(self, bound: int) -> None:
        """Nothing to take in: the window has taken its input through `bound` already."""

    def alive_at(self, t: int | None) -> Batch:
        if t is None:
            return Batch.empty(self.queue.types)
        out = self.store.contents(self.window, t)
        assert out is not None  # given an instant, the store always answers
        return out

    def backing(self) -> list[Synopsis]:
        return [self.store]  # sliced at each read: its other members must not change it meanwhile

    def close(self) -> None:
        if self in self.store.views:
            self.store.views.remove(self)

    def release(self) -> None:
        self.close()
