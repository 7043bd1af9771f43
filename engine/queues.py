"""Queues between operators: appended delta batches, a watermark, and one cursor per reader.

A queue is *complete through* its watermark: no element with ts ≤ watermark will be appended
later. `start` is the first instant of the data flowing through it (docs/semantics.md).
"""
from __future__ import annotations

import numpy as np

from engine.batch import Batch, concat


class Queue:
    def __init__(self, types, name: str = ""):
        self.types = list(types)
        self.name = name
        self.batches: list[Batch] = []
        self.base = 0  # absolute index of batches[0]
        self.watermark: int | None = None
        self.start: int | None = None
        self.ended = False
        self.readers: list[Reader] = []
        self.tuples_in = 0

    def push(self, batch: Batch | None, watermark: int | None = None) -> None:
        if batch is not None and len(batch):
            if self.readers:  # a reader created later starts at the end: with none, keep nothing
                self.batches.append(batch)
            self.tuples_in += len(batch)
            if self.start is None:
                self.start = int(batch.ts[0])
        if watermark is not None and (self.watermark is None or watermark > self.watermark):
            self.watermark = watermark

    def reader(self) -> "Reader":
        r = Reader(self)
        self.readers.append(r)
        return r

    def length(self) -> int:
        """Elements not yet consumed by the slowest reader."""
        if not self.readers:
            return sum(len(b) for b in self.batches)
        return max(r.pending_count() for r in self.readers)

    def _gc(self) -> None:
        if not self.readers:
            return
        low = min(r.batch for r in self.readers)
        drop = low - self.base
        if drop > 0:
            del self.batches[:drop]
            self.base = low

    def nbytes(self) -> int:
        return sum(b.nbytes() for b in self.batches)


class Reader:
    """A cursor into a queue: (absolute batch index, row offset)."""

    def __init__(self, q: Queue):
        self.q = q
        self.batch = q.base + len(q.batches)  # new readers see only what arrives from now on
        self.row = 0

    def rewind_to_start(self) -> None:
        self.batch, self.row = self.q.base, 0

    def pending_count(self) -> int:
        n = 0
        for i in range(self.batch - self.q.base, len(self.q.batches)):
            n += len(self.q.batches[i]) - (self.row if i == self.batch - self.q.base else 0)
        return n

    def _pending(self):
        out = []
        for i in range(self.batch - self.q.base, len(self.q.batches)):
            b = self.q.batches[i]
            out.append(b if i != self.batch - self.q.base or self.row == 0 else b.slice(self.row, len(b)))
        return out

    def cut(self, bound: int, budget: int | None) -> int:
        """The largest instant c ≤ bound such that taking every row ≤ c stays near `budget` rows
        (whole instants only: at least the first pending instant)."""
        if budget is None:
            return bound
        seen = 0
        for b in self._pending():
            if seen + len(b) > budget:
                k = max(budget - seen, 0)
                t = int(b.ts[min(k, len(b) - 1)])
                return min(bound, t)
            seen += len(b)
        return bound

    def take(self, bound: int) -> Batch:
        """Every pending row with ts ≤ bound, advancing the cursor."""
        parts = []
        qb = self.q.batches
        while self.batch - self.q.base < len(qb):
            b = qb[self.batch - self.q.base]
            rest = b if self.row == 0 else b.slice(self.row, len(b))
            k = int(np.searchsorted(rest.ts, bound, side="right"))
            if k < len(rest):
                if k:
                    parts.append(rest.slice(0, k))
                self.row += k
                break
            parts.append(rest)
            self.batch += 1
            self.row = 0
        self.q._gc()
        return concat(parts, self.q.types)
