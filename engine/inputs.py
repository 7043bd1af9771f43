"""Input managers (thesis §2.2.5): validate pushed tuples, order them, stamp ids and watermarks.

A stream input accepts non-decreasing timestamps; with a declared slack it buffers and re-orders
tuples within the slack and counts (and reports) the ones later than that. A relation input
accepts signed updates and matches each delete to a live insert of the same value. Without a
slack, a pusher may ask for late rows (older than the source's time) to be dropped and counted
instead of rejecting the push (`drop_late`).
"""

from __future__ import annotations

from collections import defaultdict, deque
from collections.abc import Callable, Sequence

import numpy as np
import numpy.typing as npt

from cqlstream.cql.catalog import SourceDef
from cqlstream.cql.types import DataType
from cqlstream.engine.batch import Batch, concat, from_rows
from cqlstream.engine.errors import InputError
from cqlstream.engine.operators.base import IdSource
from cqlstream.engine.queues import Queue


class StreamInput:
    def __init__(self, d: SourceDef, queue: Queue, ids: IdSource) -> None:
        self.d = d
        self.queue = queue
        self.ids = ids
        self.types = [a.type for a in d.attrs]
        self.max_ts: int | None = None  # largest ts accepted
        self.floor: int | None = None  # slack mode: everything below is released; older tuples are late
        self.pending: list[Batch] = []  # slack buffer
        self.late = 0  # tuples dropped for arriving later than the slack (or before max_ts: drop_late)
        self.accepted = 0
        self.first: int | None = None
        self.sampling_rate = 1.0  # knob: load shedding of arrivals (Dsms.push_batch)
        self.offered = 0  # arrivals offered while shedding
        self.shed = 0  # arrivals dropped by shedding
        self.refused = 0  # arrivals refused by admission control (engine/approx/admission.py), in `shed` too

    def in_time(self, batch: Batch) -> npt.NDArray[np.bool_] | None:
        """Mask of the rows of `batch` the input would not refuse as too old (None: all of them).
        Without a slack the late ones are those with ts < max_ts; with a slack every row passes
        here: the input drops and counts its late rows itself on push."""
        return None if self.d.slack else _not_before(batch, self.max_ts)

    def check(self, batch: Batch) -> None:
        """Raise the InputError `push` would for `batch` (out of order without a slack), before
        shedding or admission control drops rows that would have shown it."""
        if self.d.slack == 0 and len(batch):
            self._check_order(batch.ts, self.max_ts)

    def _check_order(self, ts: npt.NDArray[np.int64], floor: int | None) -> None:
        bad = np.nonzero(ts[1:] < ts[:-1])[0]
        if len(bad):
            i = int(bad[0]) + 1
            raise InputError(
                f"timestamp {int(ts[i])} is smaller than the previous one ({int(ts[i - 1])}); "
                f"stream '{self.d.name}' needs non-decreasing timestamps (or declare a slack)",
                i,
                "ts",
            )
        if floor is not None and int(ts[0]) < floor:
            raise InputError(
                f"timestamp {int(ts[0])} is smaller than {floor}, already accepted on stream '{self.d.name}'",
                0,
                "ts",
            )

    def push(self, batch: Batch) -> int:
        """Accept a batch (whole, or not at all when out of order without slack)."""
        n = len(batch)
        if n == 0:
            return 0
        ts = batch.ts
        slack = self.d.slack
        floor = self.max_ts if self.max_ts is not None else None
        if slack == 0:
            self._check_order(ts, floor)
            self._note_first(int(ts[0]))
            batch.id = self.ids.take(n)
            self.max_ts = int(ts[-1])
            self.accepted += n
            self.queue.push(batch, watermark=self.max_ts - 1)
            return n
        # with slack: tuples older than the floor (everything up to it is released) are late
        keep = np.ones(n, bool) if self.floor is None else ts >= self.floor
        self.late += int(n - keep.sum())
        batch = batch.take(keep)
        if not len(batch):
            return 0
        self._note_first(int(batch.ts.min()))
        batch.id = self.ids.take(len(batch))
        self.pending.append(batch)
        self.accepted += len(batch)
        top = int(batch.ts.max())
        self.max_ts = top if self.max_ts is None else max(self.max_ts, top)
        self._release(self.max_ts - slack - 1)
        return len(batch)

    def _note_first(self, t: int) -> None:
        if self.first is None:
            self.first = t

    def _release(self, through: int) -> None:
        """Hand every buffered tuple with ts ≤ through to the queue, in (ts, arrival) order."""
        if self.floor is not None and through < self.floor - 1:
            return
        self.floor = through + 1
        if self.pending:
            allb = concat(self.pending)
            allb = allb.take(np.argsort(allb.ts, kind="stable"))
            k = int(np.searchsorted(allb.ts, through, side="right"))
            out, rest = allb.slice(0, k), allb.slice(k, len(allb))
            self.pending = [rest] if len(rest) else []
            self.queue.push(out, watermark=through)
        else:
            self.queue.push(None, watermark=through)

    def moved_by(self, t: int) -> bool:
        """Whether `heartbeat(t)` would change anything: t is past the largest ts (or, with a slack,
        past what is released). The server's clock skips ticks that would not."""
        if self.max_ts is None or t > self.max_ts:
            return True
        return bool(self.d.slack) and (self.floor is None or t > self.floor)

    def heartbeat(self, t: int) -> None:
        """Time reached t: no tuple with ts < t will come (the input is complete through t−1)."""
        self._note_first(t)
        if self.queue.start is None:
            self.queue.start = t
        self.max_ts = t if self.max_ts is None else max(self.max_ts, t)
        if self.d.slack:
            self._release(t - 1)
        else:
            self.queue.push(None, watermark=t - 1)

    def end(self, last: int) -> None:
        if self.pending:
            self._release(last)
        self.queue.ended = True
        self.queue.push(None, watermark=last)


class RelationInput:
    """Signed updates; a delete carries the id of a live insert of the same value (FIFO)."""

    def __init__(
        self, d: SourceDef, queue: Queue, ids: IdSource, clock: Callable[[], int | None] | None = None
    ) -> None:
        self.d = d
        self.queue = queue
        self.ids = ids
        self.types = [a.type for a in d.attrs]
        self.live: dict[tuple, deque] = defaultdict(deque)
        self.max_ts: int | None = None
        self.accepted = 0
        self.first: int | None = None
        self.clock = clock  # callable → the engine's t0 (static relations are fixed after it)
        self.tail: list[Batch] = []  # updates accepted at max_ts (not final yet: snapshot(at=watermark) undoes them)
        self.sampling_rate = 1.0  # as on streams (the knob is settable on streams only)
        self.offered = 0
        self.shed = 0
        self.refused = 0
        self.late = 0  # relations have no slack: only drop_late drops (and counts) rows older than max_ts

    def in_time(self, batch: Batch) -> npt.NDArray[np.bool_] | None:
        """Mask of the updates of `batch` not older than max_ts (`push` refuses those); None: all."""
        return _not_before(batch, self.max_ts)

    def push(self, batch: Batch) -> int:
        n = len(batch)
        if n == 0:
            return 0
        ts = batch.ts
        bad = np.nonzero(ts[1:] < ts[:-1])[0]
        if len(bad):
            i = int(bad[0]) + 1
            raise InputError(f"timestamp {int(ts[i])} is smaller than the previous one ({int(ts[i - 1])})", i, "ts")
        if self.max_ts is not None and int(ts[0]) < self.max_ts:
            raise InputError(
                f"timestamp {int(ts[0])} is smaller than {self.max_ts}, already accepted on relation '{self.d.name}'",
                0,
                "ts",
            )
        if self.d.static and self.clock is not None:
            t0 = self.clock()
            if t0 is not None and int(ts[-1]) > t0:
                i = int(np.argmax(ts > t0))
                raise InputError(
                    f"relation '{self.d.name}' is static: updates must not come after time starts (instant {t0})",
                    i,
                    "ts",
                )
        # match deletes to live inserts by value; validate everything before changing state
        rows = batch.rows()
        signs = batch.sign.tolist()
        ids = self.ids.take(n)
        staged: dict[tuple, deque] = {}
        for i, (row, s) in enumerate(zip(rows, signs)):
            q = staged.get(row)
            if q is None:
                q = staged[row] = deque(self.live.get(row, ()))
            if s > 0:
                q.append(int(ids[i]))
            else:
                if not q:
                    raise InputError(f"delete of {row} which is not in relation '{self.d.name}'", i)
                ids[i] = q.popleft()
        for row, q in staged.items():
            if q:
                self.live[row] = q
            else:
                self.live.pop(row, None)
        batch.id = ids
        if self.first is None:
            self.first = int(ts[0])
        top = int(ts[-1])
        at_top = batch.take(ts == top)
        self.tail = [at_top] if self.max_ts is None or top > self.max_ts else self.tail + [at_top]
        self.max_ts = top
        self.accepted += n
        self.queue.push(batch, watermark=self.max_ts - 1)
        return n

    def snapshot(self, at: int | None = None) -> tuple[Batch, int] | None:
        """(the relation at instant `at` as `+` rows with their instance ids, `at`), or None.
        Default: the watermark, the instant operators over the relation are complete through;
        the updates accepted at the latest instant (`tail`, not final yet) are undone: a new
        reader gets them after the snapshot (`reader_prefix`)."""
        top = self.max_ts if self.max_ts is not None else self.queue.watermark
        if top is None:
            return None
        if at is None:
            at = self.queue.watermark if self.queue.watermark is not None else top
        rows, ids = [], []
        for row, q in self.live.items():
            for i in q:
                rows.append(row)
                ids.append(i)
        if at < top:
            if at != self.queue.watermark or at != top - 1:
                return None
            tail = concat(self.tail, self.types) if self.tail else None
            if tail is not None and len(tail):
                # instances inserted at the latest instant were not there yet; those it deleted
                # were, unless they were inserted at that instant too
                undo = set(tail.id[tail.sign > 0].tolist())
                keep = [k for k, i in enumerate(ids) if i not in undo]
                rows, ids = [rows[k] for k in keep], [ids[k] for k in keep]
                gone = tail.take((tail.sign < 0) & ~np.isin(tail.id, np.fromiter(undo, np.uint64, len(undo))))
                rows += gone.rows()
                ids += gone.id.tolist()
        order = np.argsort(np.asarray(ids, np.uint64), kind="stable")
        b = from_rows([rows[i] for i in order], self.types, [at] * len(rows))
        b.id = np.asarray(ids, np.uint64)[order]
        return b, at

    def reader_prefix(self) -> tuple[Batch, int] | None:
        """(what a reader starting at the queue's end must be given first, the instant it is
        exact from): the relation at the watermark, then the updates since (already in the queue)."""
        snap = self.snapshot()
        if snap is None:
            return None
        b, at = snap
        tail = [t for t in self.tail if len(t) and int(t.ts[0]) > at]
        return concat([b] + tail, self.types), at

    def moved_by(self, t: int) -> bool:
        """Whether `heartbeat(t)` would change anything (t past the latest instant)."""
        return self.max_ts is None or t > self.max_ts

    def heartbeat(self, t: int) -> None:
        if self.first is None:
            self.first = t
        if self.queue.start is None:
            self.queue.start = t
        if self.max_ts is None or t > self.max_ts:
            self.tail = []  # the updates at the old max_ts are final now
        self.max_ts = t if self.max_ts is None else max(self.max_ts, t)
        self.queue.push(None, watermark=t - 1)

    def end(self, last: int) -> None:
        self.tail = []
        self.queue.ended = True
        self.queue.push(None, watermark=last)


def _not_before(batch: Batch, t: int | None) -> npt.NDArray[np.bool_] | None:
    """Mask of the rows with ts >= t (rows at t are still accepted), or None when that is every row.
    Disorder among the kept rows is still the push's to reject."""
    if t is None or not len(batch):
        return None
    keep = batch.ts >= t
    return None if bool(keep.all()) else keep


def rows_to_batch(
    rows: Sequence[Sequence[object]], types: Sequence[DataType], ts: npt.ArrayLike, signs: npt.ArrayLike | None = None
) -> Batch:
    """Python rows → batch, checking width and types; errors name the row and field."""
    out = []
    for i, r in enumerate(rows):
        if len(r) != len(types):
            raise InputError(f"row {i} has {len(r)} values, expected {len(types)}", i)
        out.append(r)
    for i, t in enumerate(types):
        for j, r in enumerate(out):
            v = r[i]
            if v is None:
                continue
            ok = {
                "int": lambda x: isinstance(x, int) and not isinstance(x, bool),
                "timestamp": lambda x: isinstance(x, int) and not isinstance(x, bool),
                "float": lambda x: isinstance(x, (int, float)) and not isinstance(x, bool),
                "bool": lambda x: isinstance(x, bool),
            }.get(t.kind, lambda x: isinstance(x, str))(v)
            if not ok:
                raise InputError(f"row {j} column {i + 1}: {v!r} is not a {t}", j, str(i))
    return from_rows(out, types, ts, signs)
