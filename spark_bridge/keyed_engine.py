"""One key group's engine inside a distributed run: a `Dsms` running the query over the rows of one
hash bucket of the partitioning key, fed Arrow tables, advanced to Spark's watermark, and
serialized to bytes between micro-batches (Spark's state store keeps the bytes).

Because every piece of the query's state is keyed by the partitioning key, the union of the
buckets' answers is the whole query's answer. No Spark here: the Spark side (spark_bridge/
scale_out.py) hands this Arrow tables and takes its result batches.
"""

from __future__ import annotations

import io
import pickle
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from cqlstream.cql.functions import FunctionRegistry
from cqlstream.engine.batch import Batch, concat
from cqlstream.engine.dsms import Dsms, Subscription
from cqlstream.io.decoders import ArrowStream, Target

_FUNCTIONS = "functions"  # persistent id of the function registry (code, never pickled)


@dataclass(frozen=True)
class QuerySpec:
    """What every group's engine runs: the catalog's DDL, the query, the streams it reads (in the
    order their rows are tagged with) and whether STREAM's compat semantics apply."""

    ddl: str
    query: str
    streams: tuple[str, ...]
    compat: bool = False
    relation_names: tuple[str, ...] = ()  # static relations every group reads whole
    relations: tuple[pa.Table, ...] = ()  # their rows (columns by name), one table per name


def _at_start(table: pa.Table) -> pa.Table:
    """A relation's rows as insertions at instant 0, before any stream row (the static relation's
    content once time starts)."""
    n = table.num_rows
    return table.append_column("ts", pa.array([0] * n, pa.int64())).append_column("sign", pa.array([1] * n, pa.int8()))


class GroupEngine:
    """The engine of one key group: `push` rows, `advance` to a watermark, `drain` final results."""

    def __init__(self, spec: QuerySpec) -> None:
        self.dsms = Dsms(compat=spec.compat, sys_stream=False)
        self.dsms.execute(spec.ddl)
        self.sub: Subscription = self.dsms.subscribe(self.dsms.register_query(spec.query).id)
        self.streams = spec.streams
        self.held: Batch | None = None  # final elements at or after the watermark, given later
        self.late = 0  # rows older than their stream's time (Spark's watermark filter lets none through)
        self.fixed = spec.relation_names  # broadcast relations: complete through any instant
        for name, table in zip(spec.relation_names, spec.relations):
            self.push(name, _at_start(table))

    def target(self, stream: str) -> Target:
        source = self.dsms.catalog.get(stream)
        return Target.of(source)  # type: ignore[arg-type]  # streams of the spec are registered sources

    def push(self, stream: str, table: pa.Table) -> None:
        """Rows of one stream (columns `ts` and its fields), in any order: sorted by ts, then pushed."""
        if not table.num_rows:
            return
        order = np.argsort(np.asarray(table.column("ts").to_numpy(), np.int64), kind="stable")
        parsed = ArrowStream().decode_table(table.take(pa.array(order)), self.target(stream))
        before = self.dsms.input_time(stream).late
        self.dsms.push_batch(stream, parsed.batch(), drop_late=True)
        self.late += self.dsms.input_time(stream).late - before

    def advance(self, t: int) -> None:
        """Every stream is complete through t − 1 (Spark's watermark: no row with ts < t comes)."""
        for s in (*self.streams, *getattr(self, "fixed", ())):  # (no `fixed` in an older run's state)
            mark = self.dsms.input_time(s).max_ts
            if mark is None or mark < t:
                self.dsms.heartbeat(s, t)

    def drain(self) -> Batch:
        """Run the engine; the result elements that became final since the last drain."""
        self.dsms.run()
        return self.sub.poll()

    def final_before(self, t: int) -> Batch:
        """Run the engine; the result elements with ts < t not given before. Elements the bucket's
        own rows made final at t or later wait here (pickled with the engine), so every bucket gives
        an instant in the same micro-batch and a run's results come in ts order batch by batch."""
        out = self.drain()
        held: Batch | None = getattr(self, "held", None)  # absent in the state of an older run
        if held is not None and len(held):
            out = concat([held, out])
        keep = out.ts < t
        self.held = out.take(np.flatnonzero(~keep))
        return out.take(np.flatnonzero(keep))

    # ------------------------------------------------------------ Spark's state store keeps these bytes
    def dumps(self) -> bytes:
        buf = io.BytesIO()
        _Pickler(buf, self.dsms.catalog.functions).dump(self)
        return buf.getvalue()

    @staticmethod
    def loads(data: bytes) -> GroupEngine:
        engine = _Unpickler(io.BytesIO(data), FunctionRegistry()).load()  # the built-in functions
        assert isinstance(engine, GroupEngine)
        return engine


class _Pickler(pickle.Pickler):
    def __init__(self, f: io.BytesIO, functions: object) -> None:
        super().__init__(f, protocol=pickle.HIGHEST_PROTOCOL)
        self.functions = functions

    def persistent_id(self, obj: object) -> str | None:
        return _FUNCTIONS if obj is self.functions else None


class _Unpickler(pickle.Unpickler):
    def __init__(self, f: io.BytesIO, functions: object) -> None:
        super().__init__(f)
        self.functions = functions

    def persistent_load(self, pid: object) -> object:
        if pid != _FUNCTIONS:
            raise pickle.UnpicklingError(f"unknown persistent id {pid!r}")
        return self.functions
