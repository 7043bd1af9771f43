"""Queues between operators: appended delta batches, a watermark, and one cursor per reader.

A queue is *complete through* its watermark: no element with ts ≤ watermark will be appended
later. `start` is the first instant of the data flowing through it (docs/semantics.md).
A reader attached while data flows can start at another reader's position and carry a
*prefix* (a snapshot of the relation so far, as inserts) that it returns before the queue's
own elements: that is how a query registered late starts from shared state (docs/plan-manager.md).
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Iterable, Iterator

from cqlstream.cql.types import DataType
from cqlstream.engine.batch import Batch, concat

RECENT = 32  # elements kept per queue for `peek` (the UI's "recent tuples")

# Readers of one queue may run on several threads at once (the parallel scheduler,
# engine/parallel_pass.py): a reader looks at the queue's batches (`cut`, `take`) and moves its
# cursor, dropping what every reader has passed (`_moved`), holding the queue's lock. A few
# locks striped over the queues: no lock per queue object (queues are pickled in checkpoints).
_LOCKS = tuple(threading.Lock() for _ in range(64))


def lock_of(q: Queue) -> threading.Lock:
    """The lock a reader of `q` holds while it looks at `q`'s batches or moves its cursor."""
    return _LOCKS[(id(q) >> 4) % len(_LOCKS)]


class Queue:
    # the rows several readers took last as one concatenation of several parts, keyed by their
    # span (first batch, row, end batch, row; absolute indices): the next reader taking the same
    # span gets the same batch instead of copying the parts again (a stream read by four
    # operators whose instant was split across two pushes: one copy instead of four). Dropped
    # with the batches it was cut from. A class default: queues of older checkpoints lack it.
    joined: tuple[tuple[int, int, int, int], Batch] | None = None

    def __init__(self, types: Iterable[DataType], name: str = "", recent: bool = True) -> None:
        """`recent`: keep the last rows pushed (`recent_rows`, what a UI peeks at); False: none."""
        self.types = list(types)
        self.name = name
        self.batches: list[Batch] = []
        self.base = 0  # absolute index of batches[0]
        self.watermark: int | None = None
        self.start: int | None = None
        self.last_ts: int | None = None  # largest ts appended
        self.ended = False
        self.readers: list[Reader] = []
        self.tuples_in = 0
        self.recent: deque[Batch] | None = deque(maxlen=4) if recent else None
        self.eid: str | None = None  # entity id in the control tables
        self.at: dict[int, int] = {}  # absolute batch index → readers positioned in it

    def push(self, batch: Batch | None, watermark: int | None = None) -> None:
        if batch is not None:
            ts = batch.ts
            n = len(ts)
            if n:
                if self.readers:  # a reader created later starts at the end: with none, keep nothing
                    self.batches.append(batch)
                self.tuples_in += n
                if self.start is None:
                    self.start = int(ts[0])
                self.last_ts = int(ts[-1])
                if self.recent is not None:  # a copy: a slice would be a view pinning the whole batch
                    self.recent.append(batch.copy_range(max(n - RECENT, 0), n))
        if watermark is not None and (self.watermark is None or watermark > self.watermark):
            self.watermark = watermark

    def reader(self, at: Reader | None = None, prefix: Batch | None = None) -> Reader:
        r = Reader(self, at, prefix)
        self.readers.append(r)
        self.at[r.batch] = self.at.get(r.batch, 0) + 1
        return r

    def detach(self, r: Reader) -> None:
        """Remove a reader (its consumer is gone); batches only it still needed are freed."""
        with lock_of(self):
            self._detach(r)

    def _detach(self, r: Reader) -> None:
        if r in self.readers:
            self.readers.remove(r)
            self._moved(r.batch, None)
            if not self.readers:
                self.base += len(self.batches)
                self.batches.clear()
                self.at.clear()
                self.joined = None

    def _moved(self, old: int, new: int | None) -> None:
        """A reader moved from batch `old` to `new` (None: it left): drop the batches every reader
        has passed. Readers are counted per batch index, so this is O(1) amortized however many
        readers share the queue (100s of queries reading one window). The caller holds
        `lock_of(self)`."""
        if not self._count(old, new) and old == self.base:
            self.trim()

    def _count(self, old: int, new: int | None) -> int:
        """Move one reader's count from batch `old` to `new`; the readers left in `old`."""
        at = self.at
        left = at[old] - 1
        if left:
            at[old] = left
        else:
            del at[old]
        if new is not None:
            at[new] = at.get(new, 0) + 1
        return left

    def trim(self) -> None:
        """Drop the leading batches no reader is positioned in (with no reader: keep them, a
        reader attached later starts at the end anyway and `detach` cleared them)."""
        if not self.readers:
            return
        at = self.at
        low = self.base
        end = self.base + len(self.batches)
        while low < end and low not in at:
            low += 1
        if low > self.base:
            del self.batches[: low - self.base]
            self.base = low
            if self.joined is not None and self.joined[0][0] < low:
                self.joined = None

    def length(self) -> int:
        """Elements not yet consumed by the slowest reader."""
        if not self.readers:
            return sum(len(b) for b in self.batches)
        return max(r.pending_count() for r in self.readers)

    def nbytes(self) -> int:
        return sum(b.nbytes() for b in self.batches)

    def recent_rows(self, n: int) -> Batch:
        """The last n elements appended (at most RECENT; none in a queue keeping no tail)."""
        if self.recent is None:
            return Batch.empty(self.types)
        b = concat(list(self.recent), self.types)
        return b.slice(max(len(b) - n, 0), len(b))


class Reader:
    """A cursor into a queue: (absolute batch index, row offset), plus an optional prefix."""

    def __init__(self, q: Queue, at: Reader | None = None, prefix: Batch | None = None):
        self.q = q
        if at is None:  # new readers see only what arrives from now on
            self.batch, self.row = q.base + len(q.batches), 0
        else:
            self.batch, self.row = at.batch, at.row
        self.prefix = prefix if prefix is not None and len(prefix) else None
        self.snap_at: int | None = None  # the instant of the snapshot this reader started from

    def pending_count(self) -> int:
        n = 0 if self.prefix is None else len(self.prefix)
        for i in range(self.batch - self.q.base, len(self.q.batches)):
            n += len(self.q.batches[i]) - (self.row if i == self.batch - self.q.base else 0)
        return n

    def oldest_ts(self) -> int | None:
        """The timestamp of the first element not yet taken (None: nothing pending)."""
        for b in self._pending():
            if len(b):
                return int(b.ts[0])
        return None

    def _pending(self) -> Iterator[Batch]:
        """The pending batches, lazily: `cut` stops after its budget, so a long backlog of small
        batches costs nothing per call beyond what it takes."""
        if self.prefix is not None:
            yield self.prefix
        for i in range(self.batch - self.q.base, len(self.q.batches)):
            b = self.q.batches[i]
            yield b if i != self.batch - self.q.base or self.row == 0 else b.slice(self.row, len(b))

    def cut(self, bound: int, budget: int | None) -> int:
        """The largest instant c ≤ bound such that taking every row ≤ c stays near `budget` rows
        (whole instants only: at least the first pending instant)."""
        if budget is None:
            return bound
        with lock_of(self.q):
            return self._cut(bound, budget)

    def _cut(self, bound: int, budget: int) -> int:
        seen = 0
        for b in self._pending():
            if seen + len(b) > budget:
                k = max(budget - seen, 0)
                t = int(b.ts[min(k, len(b) - 1)])
                return min(bound, t)
            seen += len(b)
        return bound

    def take(self, bound: int) -> Batch:
        """Every pending row with ts ≤ bound, advancing the cursor. Readers of one queue share
        the batches they take (operators never change their inputs): rows in several parts are
        copied into one batch once for every reader taking the same span (`Queue.joined`)."""
        q = self.q
        with lock_of(q):
            start = (self.batch, self.row) if self.prefix is None else None
            joined = q.joined  # (before `_take`: the last reader of the span drops it there)
            parts = self._take(bound)
            if len(parts) < 2:
                return parts[0] if parts else Batch.empty(q.types)
            span = None if start is None else (*start, self.batch, self.row)
            if joined is not None and joined[0] == span:
                return joined[1]
        out = concat(parts, q.types)  # outside the lock: the parts are this reader's now
        if span is not None:
            with lock_of(q):
                if span[0] >= q.base:  # (its first batch may have been dropped meanwhile)
                    q.joined = (span, out)
        return out

    def _take(self, bound: int) -> list[Batch]:
        parts = []
        if self.prefix is not None:
            k = int(self.prefix.ts.searchsorted(bound, side="right"))
            if k:
                parts.append(self.prefix.slice(0, k))
            self.prefix = self.prefix.slice(k, len(self.prefix)) if k < len(self.prefix) else None
            if self.prefix is not None:
                return parts
        q = self.q
        qb = q.batches
        old = self.batch
        i = old - q.base
        while i < len(qb):
            b = qb[i]
            ts = b.ts
            if ts[-1] <= bound:  # the whole rest of the batch (the usual case: no search, no slice)
                parts.append(b if self.row == 0 else b.slice(self.row, len(ts)))
                i += 1
                self.row = 0
                continue
            k = int(ts.searchsorted(bound, side="right"))  # > self.row - 1: rows before it were taken
            if k > self.row:
                parts.append(b.slice(self.row, k))
                self.row = k
            break
        self.batch = i + q.base
        if self.batch != old:
            q._moved(old, self.batch)
        return parts
