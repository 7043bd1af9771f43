"""A query's retained published results, so a subscriber can resume after the instant it last saw."""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence

from cqlstream.cql.types import DataType
from cqlstream.engine.batch import Batch, concat


class HistoryGone(Exception):
    """The elements after the asked instant are no longer all retained; `oldest` is the smallest
    instant a resume may start after."""

    def __init__(self, oldest: int | None) -> None:
        super().__init__(oldest)
        self.oldest = oldest


class ResultHistory:
    """The elements a query published, as the batches they were published in, bounded in elements.

    Results are published when an instant becomes final, so every batch holds whole instants and
    every instant is in one batch: dropping the oldest batches drops the oldest instants whole.
    `floor` is the instant through which elements were dropped (None: nothing dropped), so every
    element with ts > floor is retained and a resume after T >= floor is exact. The newest batch is
    kept even when it alone exceeds the bound, so the history is bounded by `limit` plus one batch.
    """

    def __init__(self, limit: int) -> None:
        self.limit = max(int(limit), 0)
        self.batches: deque[tuple[Batch, int | None]] = deque()
        self.count = 0
        self.floor: int | None = None  # elements with ts <= floor may be gone (None: nothing dropped)

    def add(self, b: Batch, through: int | None) -> None:
        """Retain one published batch (`through`: the instant results were final through)."""
        if not len(b):
            return
        self.batches.append((b, through))
        self.count += len(b)
        self._trim()

    def adopt(self, old: ResultHistory) -> None:
        """Take over a checkpointed history, trimmed to this one's bound."""
        self.batches.extend(old.batches)
        self.count += old.count
        if old.floor is not None:
            self._drop_through(old.floor)
        self._trim()

    def _trim(self) -> None:
        while self.count > self.limit and self.batches:
            if len(self.batches) == 1 and self.limit:
                break
            old, old_through = self.batches.popleft()
            self.count -= len(old)
            self._drop_through(int(old.ts.max()) if old_through is None else old_through)

    def restart(self, through: int | None) -> None:
        """The query's results start over (it was reactivated): nothing before is resumable."""
        self.batches.clear()
        self.count = 0
        if through is not None:
            self._drop_through(through)

    def _drop_through(self, t: int) -> None:
        self.floor = t if self.floor is None else max(self.floor, t)

    def after(self, t: int, types: Sequence[DataType]) -> Batch:
        """Every retained element with ts > t, in publication order; HistoryGone when some may be lost."""
        if self.floor is not None and t < self.floor:
            raise HistoryGone(self.floor)
        parts = []
        for b, _ in self.batches:
            if int(b.ts.max()) <= t:
                continue
            parts.append(b if int(b.ts.min()) > t else b.take(b.ts > t))
        if not parts:
            return Batch.empty(types)
        return parts[0] if len(parts) == 1 else concat(parts, types)
