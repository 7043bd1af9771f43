"""Synopses shared between operators (STREAM's stores and stubs, IEEE DE Bulletin §2.2).

A `RelationStore` holds the live instances of one relation-valued queue with their lifetimes
[ins, del), so every operator that needs that relation's state (e.g. two joins over the same
window) reads one copy "as of" its own progress instead of keeping its own. Instances are purged
once no reader can see them any more.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from cqlstream.engine import knobs as K
from cqlstream.engine.batch import Batch, concat, match_deletes
from cqlstream.engine.errors import EngineError
from cqlstream.engine.queues import Queue

if TYPE_CHECKING:
    from cqlstream.engine.operators.base import Operator

INF = np.iinfo(np.int64).max


class Synopsis(ABC):
    """What every shared store answers for in the plan: its control table and knobs, what a UI
    shows of it, and letting go of its queue when the plan drops it."""

    kind = "store"
    KNOBS: ClassVar[tuple[K.Knob, ...]] = (K.MEMORY_LIMIT,)
    memory_limit: int | None = None  # knob: flagged in the control table when exceeded
    queue: Queue
    reader: Any  # the queue's Reader (None for a view, which reads nothing itself)
    eid: str | None
    through: int | None

    if TYPE_CHECKING:  # read-only here: a store keeps them in an attribute or derives them (window stores)

        @property
        def users(self) -> list[Any]:
            """The operators reading the store (their progress bounds purging)."""

    def cursors(self) -> list[Any]:
        """The queue readers whose positions the store's advancing moves: its queue's reader (none
        for a view, which reads nothing itself)."""
        return [] if self.reader is None else [self.reader]

    @abstractmethod
    def __len__(self) -> int:
        """Rows the store holds."""

    @abstractmethod
    def nbytes(self) -> int:
        """Bytes the store holds."""

    def alive_at(self, t: int | None) -> Batch:
        """The rows alive at instant `t` (None: now), with their own ts: the relation a store on a
        queue holds. A stream's window store has no one relation (each window reads its own
        extent through `WindowRelation`), so it does not answer this."""
        raise TypeError(f"{type(self).__name__} holds no single relation to read at an instant")

    @abstractmethod
    def advance(self, bound: int) -> None:
        """Take in the queue's elements through `bound` (a reading join calls it first)."""

    def control_table(self, extra_users: int = 0) -> dict[str, Any]:
        """The store's part of its control table (`extra_users`: users besides operators, e.g. a
        query's result)."""
        limit = self.memory_limit
        return {
            "name": self.kind,
            "queue": self.queue.eid,
            "counters": {
                "rows": len(self),
                "bytes": self.nbytes(),
                "users": len(self.users) + extra_users,
                "through": self.through,
                "over_memory_limit": bool(limit is not None and self.nbytes() > limit),
            },
            "knobs": K.values(self, self.KNOBS),
        }

    def set_knob(self, name: str, value: object) -> None:
        K.set_one(self, self.KNOBS, name, value, f"store {self.eid or ''}")

    def peek(self) -> Batch | None:
        """The store's current contents."""
        return self.alive_at(self.through) if self.through is not None else None

    def release(self) -> None:
        """Stop reading the queue (the plan drops the store)."""
        self.queue.detach(self.reader)

    def backing(self) -> list[Synopsis]:
        """The stores this one reads its contents from (a view: the store it slices), which an
        operator reading it shares with their other holders (`Operator.shared_stores`)."""
        return []


class RelationStore(Synopsis):
    def __init__(self, queue: Queue, eid: str | None = None, kind: str = "relation store"):
        self.queue = queue
        self.reader = queue.reader()
        self.rows = Batch.empty(queue.types)
        self.ins = np.zeros(0, np.int64)
        self.dels = np.zeros(0, np.int64)
        self.through: int | None = None  # deltas applied through this instant
        self.users: list[Operator] = []  # operators reading the store (their progress bounds purging)
        self.eid = eid  # entity id in the control tables
        self.kind = kind

    def start_from(self, prefix: Batch) -> None:
        """Read the queue from its end, after `prefix` (a snapshot of the relation so far)."""
        self.queue.detach(self.reader)
        self.reader = self.queue.reader(prefix=prefix)

    def __len__(self) -> int:
        return len(self.rows)

    def nbytes(self) -> int:
        return self.rows.nbytes() + self.ins.nbytes + self.dels.nbytes

    def advance(self, bound: int) -> None:
        """Apply the queue's deltas through `bound`: inserts open a lifetime, a delete closes the
        oldest open lifetime with its id (at the delete's instant)."""
        if self.through is not None and bound <= self.through:
            return
        d = self.reader.take(bound)
        self.through = bound
        if len(d):
            plus = d.sign > 0
            new = d.take(plus)
            self.rows = concat([self.rows, new])
            self.ins = np.concatenate([self.ins, new.ts])
            self.dels = np.concatenate([self.dels, np.full(len(new), INF, np.int64)])
            if not plus.all():
                self._close(d.take(~plus))
        self._purge()

    def _close(self, deletes: Batch) -> None:
        """The k-th delete of an id closes the k-th open instance of that id (insertion order)."""
        open_idx = np.nonzero(self.dels == INF)[0]
        cand, dpos = match_deletes(self.rows.id[open_idx], deletes.id)
        self.dels[open_idx[cand]] = deletes.ts[dpos]

    def _purge(self) -> None:
        done = [b for u in self.users if (b := u.done_through) is not None]
        if len(done) < len(self.users):
            return
        low = min(done) if done else self.through  # no readers: keep only the current relation
        if low is None:
            return
        keep = self.dels > low
        if not keep.all():
            self.rows, self.ins, self.dels = self.rows.take(keep), self.ins[keep], self.dels[keep]

    def alive_at(self, t: int | None) -> Batch:
        """The instances in the relation at instant t (inserted at or before t, deleted after t)."""
        if t is None or not len(self.rows):
            return Batch.empty(self.queue.types)
        if self.through is None or t > self.through:
            raise EngineError("internal", f"store has deltas only through {self.through}, asked for {t}")
        mask = (self.ins <= t) & (self.dels > t)
        n = int(np.count_nonzero(mask))
        if n == len(mask):
            return self.rows
        if mask[:n].all():
            # the alive rows are a prefix (a reader behind the store's newest inserts, nothing
            # deleted): views of it, not a copy of the whole relation on every call (Linear
            # Road's two joins over MinSegStr read it one instant behind its other reader)
            return self.rows.slice(0, n)
        return self.rows.take(mask)
