"""Registering a query as if it had been registered at an earlier moment: its sources' input since
that moment, taken from a replay of the input elsewhere (the server's log archive), is given to the
query's own operators only, as the prefix of their readers; then they read the live queues.

The input since the moment is what an engine with the same sources, fed the same input, appended
to its source queues after it (`mark` at the moment, `SourceSeed.of` at the end): the same elements
in the same order as the live queues got, so prefix + live reads is exactly what a query registered
then would have read. A relation also gives its reader prefix at the moment (its contents then), as
a late registration does. The query is registered unshared (its own operators: nothing of another
query sees the prefix) while its source queues show the state they had at the moment (watermark,
last element), so its windows, stores and completeness are built as they would have been then.

Tuple ids of the replaying engine are not the live engine's: stream elements get ids in a range of
their own (high bit set), relation instances still live at the end take the live ids of the same
instances (both inputs match deletes to inserts by value, oldest first), so later live deletes
retract the right rows of the query's state.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from cqlstream.engine.batch import Batch, concat
from cqlstream.engine.errors import EngineError
from cqlstream.engine.inputs import RelationInput, StreamInput
from cqlstream.engine.queues import Queue, Reader

if TYPE_CHECKING:
    from cqlstream.engine.dsms import Dsms, QueryHandle

OWN_IDS = np.uint64(1 << 63)  # the id range of replayed elements no live instance maps to


@dataclass(frozen=True)
class QueueState:
    """The fields of a source queue a late registration reads (planner `_reader`, `_window_store`)."""

    watermark: int | None
    last_ts: int | None
    start: int | None
    tuples_in: int

    @classmethod
    def of(cls, q: Queue) -> QueueState:
        return cls(q.watermark, q.last_ts, q.start, q.tuples_in)

    def put(self, q: Queue) -> None:
        q.watermark, q.last_ts, q.start, q.tuples_in = self.watermark, self.last_ts, self.start, self.tuples_in


@dataclass(frozen=True)
class Mark:
    """A source of the replaying engine at the seed moment: its queue's state, a reader keeping
    what is appended from then on, and (a relation) the reader prefix a late query got then."""

    state: QueueState
    reader: Reader
    prefix: tuple[Batch, int] | None


def mark(inp: StreamInput | RelationInput) -> Mark:
    prefix = inp.reader_prefix() if isinstance(inp, RelationInput) and _flowed(inp.queue) else None
    return Mark(QueueState.of(inp.queue), inp.queue.reader(), prefix)


def _flowed(q: Queue) -> bool:
    return q.watermark is not None or q.start is not None or q.last_ts is not None


@dataclass(frozen=True)
class SourceSeed:
    """What one source gives a query seeded at the moment: its queue's state then, the relation's
    prefix then (None: a stream, or a relation that had not flowed), every element appended since."""

    state: QueueState
    prefix: tuple[Batch, int] | None
    appended: Batch

    @classmethod
    def of(cls, m: Mark, inp: StreamInput | RelationInput, live: StreamInput | RelationInput) -> SourceSeed:
        """The seed of a replayed source `inp` (marked `m`, now at the live input's position)."""
        appended = m.reader.take(1 << 62)
        inp.queue.detach(m.reader)
        if isinstance(inp, RelationInput):
            if not isinstance(live, RelationInput):
                raise EngineError("internal", f"'{inp.d.name}' is not a relation any more")
            remap = _relation_ids(inp, live)
            prefix = None if m.prefix is None else (remap(m.prefix[0]), m.prefix[1])
            return cls(m.state, prefix, remap(appended))
        return cls(m.state, None, _with_ids(appended, appended.id | OWN_IDS))


def _with_ids(b: Batch, ids: np.ndarray) -> Batch:
    return Batch(b.cols, b.nulls, b.ts, b.sign, ids.astype(np.uint64, copy=False))


def _relation_ids(inp: RelationInput, live: RelationInput) -> Any:
    """id remapping of a replayed relation: instances live at the end → the live engine's ids of the
    same instances (per value, oldest first), every other one into the own range."""
    keys: list[int] = []
    vals: list[int] = []
    for row, mine in inp.live.items():
        theirs = live.live.get(row, ())
        if len(theirs) != len(mine):
            raise EngineError(
                "internal",
                f"relation '{inp.d.name}': the log's replay holds {len(mine)} × {row}, the engine {len(theirs)}",
            )
        keys.extend(mine)
        vals.extend(theirs)
    if len(live.live) != len(inp.live):
        raise EngineError("internal", f"relation '{inp.d.name}': the log's replay differs from the engine")
    k = np.asarray(keys, np.uint64)
    order = np.argsort(k)
    k, v = k[order], np.asarray(vals, np.uint64)[order]

    def remap(b: Batch) -> Batch:
        if not len(k):
            return _with_ids(b, b.id | OWN_IDS)
        i = np.minimum(np.searchsorted(k, b.id), len(k) - 1)
        hit = k[i] == b.id
        return _with_ids(b, np.where(hit, v[i], b.id | OWN_IDS))

    return remap


def _given(prefix: tuple[Batch, int]) -> tuple[Batch, int]:
    return prefix


def register_seeded(d: Dsms, query: str, name: str | None, seeds: dict[str, SourceSeed]) -> QueryHandle:
    """Register `query` (unshared) as it would have been at the seed moment, its readers of the
    sources given what each source appended since (`seeds`, by lower-case source name; every source
    it reads must be there). The caller runs the engine then: the query catches up alone."""
    plan = d.plan
    sources = {}
    for key, pn in plan.nodes.items():
        if pn.op is None and pn.queue.name.lower() in d.inputs:
            sources[pn.queue.name.lower()] = (key, pn)
    if any(i.first is not None for i in d.inputs.values()):
        d._quiesce()  # what registering does first, with the queues as they are
    saved = {low: QueueState.of(pn.queue) for low, (_, pn) in sources.items()}
    before = {low: {id(r) for r in pn.queue.readers} for low, (_, pn) in sources.items()}
    readers_of = dict(plan.source_readers)
    for low, (key, pn) in sources.items():
        seed = seeds.get(low)
        if seed is None:
            continue
        seed.state.put(pn.queue)
        if seed.prefix is not None:  # a relation flowing at the moment: its contents then, and every update since
            full = (concat([seed.prefix[0], seed.appended], pn.queue.types), seed.prefix[1])
            plan.source_readers[key] = functools.partial(_given, full)
    d._quiesce = lambda: None  # type: ignore[method-assign]  # queues show the moment: nothing may run now
    try:
        h = d.register_query(query, name=name, share=False)
    finally:
        del d._quiesce
        plan.source_readers.clear()
        plan.source_readers.update(readers_of)
        for low, (_, pn) in sources.items():
            saved[low].put(pn.queue)
    if h.pnode is None or h.pnode.op is None:
        d.deregister(h.id)
        raise EngineError("nothing_to_seed", "the query is one of its sources as it is: there is no state to seed")
    for low, (_, pn) in sources.items():
        seed = seeds.get(low)
        new = [r for r in pn.queue.readers if id(r) not in before[low]]
        if not new:
            continue
        if seed is None:
            d.deregister(h.id)
            raise EngineError("nothing_to_seed", f"the log holds no input of '{pn.queue.name}'")
        if seed.prefix is None and len(seed.appended):  # relations flowing then got theirs above
            for r in new:
                r.prefix = seed.appended
    return h
