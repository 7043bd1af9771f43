"""The `Dsms` facade: the one entry point of the engine (server, Spark bridge, CLI and tests use it).

Register streams, relations, views and queries; push input; heartbeat; run; subscribe to results;
deregister; explain. Input is accepted or rejected whole, with the offending row named.
"""
from __future__ import annotations

import itertools
import time
from dataclasses import dataclass, field

import numpy as np

from cql import ast
from cql.analyzer import AnalyzeOptions
from cql.catalog import UNIT_MS, Catalog, SourceDef, ViewDef
from cql.errors import CqlError
from cql.frontend import CompiledQuery, compile_query
from cql.functions import FunctionRegistry
from cql.parser import parse_script
from engine.batch import Batch, from_rows
from engine.exprs import Evaluator
from engine.inputs import InputError, RelationInput, StreamInput, rows_to_batch
from engine.operators.base import IdSource
from engine.planner import EngineOptions, PhysicalPlan
from engine.queues import Queue, Reader
from engine.scheduler import RoundRobin


@dataclass
class QueryHandle:
    """A registered continuous query."""

    id: int
    text: str
    compiled: CompiledQuery
    queue: Queue
    name: str | None = None
    active: bool = True
    weight: float = 1.0

    @property
    def kind(self) -> str:
        return self.compiled.kind

    @property
    def schema(self):
        return self.compiled.schema

    def explain(self) -> str:
        return self.compiled.explain()


@dataclass
class Subscription:
    """A cursor on a query's result queue; `poll()` returns the results made final since last call."""

    query: QueryHandle
    reader: Reader
    closed: bool = field(default=False)

    def poll(self) -> Batch:
        """Results that are final (ts ≤ the queue's watermark) and not yet returned."""
        wm = self.query.queue.watermark
        if wm is None:
            return Batch.empty([a.type for a in self.query.schema])
        return self.reader.take(wm)

    @property
    def final_through(self) -> int | None:
        return self.query.queue.watermark


class Dsms:
    def __init__(self, *, compat: bool = False, functions: FunctionRegistry | None = None, scheduler=None,
                 clock=time.time, silence_timeout: float | None = None, skew: int | None = None,
                 binary_joins: bool = False):
        """`clock()` gives wall seconds (system-timestamped streams, silence timeout);
        `silence_timeout`: a source silent that long is advanced to the others' time (CIDR §2.3);
        `skew`: streams are known to be at most this many units apart (thesis §2.2.5), so each
        source is complete through (largest ts on any source) − skew − 1."""
        self.clock = clock
        self.silence_timeout = silence_timeout
        self.skew = skew
        self.notices: list[str] = []
        self._last_seen: dict[str, float] = {}
        self.catalog = Catalog(functions)
        self.compat = compat
        self.ids = IdSource()
        options = EngineOptions(compat=compat, binary_joins=binary_joins)
        self.plan = PhysicalPlan(self.ids, Evaluator(self.catalog.functions), options)
        self.inputs: dict[str, StreamInput | RelationInput] = {}
        self.queries: dict[int, QueryHandle] = {}
        self._next_query = itertools.count(1)
        self.scheduler = scheduler or RoundRobin()
        self.ended = False

    # ------------------------------------------------------------ registration
    def execute(self, text: str) -> list:
        """Run a `;`-separated script of registrations and queries; returns what each created."""
        out = []
        for stmt in parse_script(text):
            try:
                out.append(self._statement(stmt, text))
            except CqlError as e:
                raise e.with_text(text) from None
        return out

    def _statement(self, stmt, text):
        if isinstance(stmt, ast.RegisterSource):
            return self.register_source(stmt)
        if isinstance(stmt, ast.RegisterView):
            return self.catalog.register_view(stmt, text)
        return self.register_query(stmt, text=text)

    def register_source(self, stmt: ast.RegisterSource | str) -> SourceDef:
        if isinstance(stmt, str):
            (stmt,) = parse_script(stmt)
            if not isinstance(stmt, ast.RegisterSource):
                raise CqlError("not_ddl", "expected register stream/relation")
        d = self.catalog.register_source(stmt)
        q = self.plan.source_queue(d.plan())
        if d.kind == "stream":
            self.inputs[d.name.lower()] = StreamInput(d, q, self.ids)
        else:
            self.inputs[d.name.lower()] = RelationInput(d, q, self.ids, clock=self.t0)
        return d

    def register_view(self, text: str) -> ViewDef:
        (stmt,) = parse_script(text)
        return self.catalog.register_view(stmt, text)

    def register_query(self, query: str | ast.Query, *, name: str | None = None, text: str | None = None) -> QueryHandle:
        text = query if isinstance(query, str) else (text or "")
        compiled = compile_query(query, self.catalog, options=AnalyzeOptions(stream_compat=self.compat))
        queue = self.plan.build(compiled.plan)
        h = QueryHandle(next(self._next_query), text, compiled, queue, name)
        self.queries[h.id] = h
        return h

    def deregister(self, query_id: int) -> None:
        self.queries.pop(query_id)

    def subscribe(self, query_id: int) -> Subscription:
        h = self.queries[query_id]
        return Subscription(h, h.queue.reader())

    def explain(self, query: int | str) -> str:
        if isinstance(query, int):
            return self.queries[query].explain()
        return compile_query(query, self.catalog, options=AnalyzeOptions(stream_compat=self.compat)).explain()

    # ------------------------------------------------------------ input
    def _input(self, name: str):
        inp = self.inputs.get(name.lower())
        if inp is None:
            raise InputError(f"unknown stream or relation '{name}'")
        if self.ended:
            raise InputError("input has ended")
        return inp

    def _now_units(self, d: SourceDef) -> int:
        return int(self.clock() * 1000) // UNIT_MS[d.time_unit]

    def push(self, name: str, rows, ts=None, signs=None) -> int:
        """Push Python rows with their timestamps (and signs for relations); all or nothing.

        A system-timestamped stream (`with (timestamp = system)`) takes no `ts`: arrivals are
        stamped with the clock in the stream's time unit."""
        inp = self._input(name)
        if inp.d.timestamp == "system":
            if ts is not None:
                raise InputError(f"stream '{inp.d.name}' is system-timestamped: push rows without timestamps")
            ts = [self._now_units(inp.d)] * len(rows)
        elif ts is None:
            raise InputError(f"'{inp.d.name}' is application-timestamped: every row needs a timestamp")
        ts = np.asarray(ts, dtype=np.int64)
        if len(ts) != len(rows):
            raise InputError(f"{len(rows)} rows but {len(ts)} timestamps")
        if signs is not None and isinstance(inp, StreamInput):
            raise InputError(f"'{inp.d.name}' is a stream: its tuples carry no sign")
        if signs is None and isinstance(inp, RelationInput):
            signs = np.ones(len(rows), np.int8)
        if signs is not None:
            signs = np.asarray(signs)
            if not np.all((signs == 1) | (signs == -1)):
                raise InputError("signs must be +1 or -1", int(np.argmax((signs != 1) & (signs != -1))), "sign")
        n = inp.push(rows_to_batch(rows, inp.types, ts, signs))
        self._after_input(name)
        return n

    def push_batch(self, name: str, batch: Batch) -> int:
        """Push a columnar batch (already typed: the fast path used by file readers and Arrow)."""
        n = self._input(name).push(batch)
        self._after_input(name)
        return n

    def heartbeat(self, name: str, t: int) -> None:
        """Time on source `name` reached t: no element with ts < t will come."""
        self._input(name).heartbeat(int(t))
        self._after_input(name)

    def _after_input(self, name: str) -> None:
        self._last_seen[name.lower()] = self.clock()
        if self.skew is not None:
            top = max((i.max_ts for i in self.inputs.values() if i.max_ts is not None), default=None)
            if top is not None:
                for key, i in self.inputs.items():
                    if key != name.lower() and (i.max_ts is None or i.max_ts < top - self.skew):
                        i.heartbeat(top - self.skew)

    def tick(self) -> None:
        """Clock-driven time: heartbeats for system-timestamped streams, and the silence timeout
        for application-timestamped sources (each advance is recorded in `notices`)."""
        now = self.clock()
        for key, i in self.inputs.items():
            if i.d.timestamp == "system":
                i.heartbeat(self._now_units(i.d))
        if self.silence_timeout is None:
            return
        top = max((i.max_ts for i in self.inputs.values() if i.max_ts is not None), default=None)
        for key, i in self.inputs.items():
            if i.d.timestamp == "system" or top is None:
                continue
            last = self._last_seen.get(key)
            if (last is None or now - last >= self.silence_timeout) and (i.max_ts is None or i.max_ts < top):
                i.heartbeat(top)
                self._last_seen[key] = now
                self.notices.append(f"source '{i.d.name}' silent for {self.silence_timeout:g} s: its time was "
                                    f"advanced to {top}")

    def t0(self) -> int | None:
        firsts = [i.first for i in self.inputs.values() if i.first is not None]
        return min(firsts) if firsts else None

    def end(self) -> None:
        """End of input: every source is complete through the last instant seen; flush results."""
        lasts = [i.max_ts for i in self.inputs.values() if i.max_ts is not None]
        if lasts:
            last = max(lasts)
            for i in self.inputs.values():
                i.end(last)
        self.ended = True
        self.run()

    # ------------------------------------------------------------ execution
    def run(self, max_passes: int | None = None) -> int:
        """Run the scheduler until no operator can make progress."""
        return self.scheduler.run(self.plan.operators, max_passes)

    def rows(self, batch: Batch) -> list[tuple]:
        return batch.rows()


__all__ = ["Dsms", "InputError", "QueryHandle", "Subscription", "from_rows"]
