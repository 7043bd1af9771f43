"""A registered CQL query partitioned across Spark executors (docs/scale-out.md).

The partitioning analysis (cql/logical/partitioning.py) gives the key on which all the query's
state partitions and each input stream's key columns. Every input row is tagged with its stream
and with a hash bucket of its key; Spark shuffles the rows by bucket, and in each bucket the
engine's own operators run the query (`GroupEngine`, one per bucket, inside
`applyInPandasWithState`) with their state serialized into Spark's state store (RocksDB), so
checkpoints and recovery are Spark's. Time is Spark's: the watermark (max event time − delay, as
the bridge's sources advance a stream) is each bucket's heartbeat, and an event-time timeout
wakes every bucket when it advances, so a bucket emits an instant only once it is final.

A query whose state does not partition but whose top aggregate merges from partials (the global
tail) runs its partial aggregates in the buckets and the merge on the driver (`merge_tail`); a
static relation it reads is copied to every bucket. Other queries are refused with the reason.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T
from pyspark.sql.streaming.state import GroupStateTimeout

from cqlstream.cql.catalog import UNIT_MS, Catalog, SourceDef
from cqlstream.cql.ddl import catalog_from_ddl
from cqlstream.cql.frontend import compile_query
from cqlstream.cql.logical import nodes as L
from cqlstream.cql.logical.partial_aggregates import AggregateSplit, NotSplittable, split_aggregate
from cqlstream.cql.logical.partitioning import Partitioning, partitioning
from cqlstream.io.decoders import Target
from cqlstream.spark_bridge.errors import SparkSourceError
from cqlstream.spark_bridge.keyed_engine import GroupEngine, QuerySpec
from cqlstream.spark_bridge.result_schema import spark_type
from cqlstream.spark_bridge.tail_merge import TailState, tail_spec

ROCKSDB = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
STREAM, BUCKET, EVENT_TIME = "__stream", "__bucket", "__event_time"
_STATE = T.StructType([T.StructField("engine", T.BinaryType(), False)])
_NUMERIC = ("int", "float", "timestamp")


@dataclass(frozen=True)
class ScaleOutPlan:
    """What a distributed run needs to know of the query: what each bucket runs, the verdict, each
    input stream's push shape and key columns, and the output columns (deduplicated names)."""

    spec: QuerySpec
    partitioning: Partitioning
    targets: tuple[Target, ...]  # one per stream of spec.streams
    tick_micros: tuple[int, ...]  # each stream's tick in µs (TIMESTAMP event times are floored to it)
    keys: tuple[tuple[str, ...], ...]  # key field names, one tuple per stream
    output: tuple[tuple[str, str], ...]  # (column name, engine type name)
    relation: bool = False  # relation-valued: its results carry sign −1 elements too
    tail: QuerySpec | None = None  # the global tail's merge (then `spec` computes partial aggregates)
    partials: tuple[tuple[str, str], ...] = ()  # with a tail: the columns of the buckets' partials

    @property
    def bucket_output(self) -> tuple[tuple[str, str], ...]:
        """The columns each bucket emits: the query's, or with a global tail the partials'."""
        return self.partials if self.tail is not None else self.output

    def field_column(self, stream_index: int, field: str) -> str:
        """The column of the shuffled union that carries `field` of stream `stream_index`."""
        return f"_{stream_index}_{field}"


def plan_query(ddl: str, query: str, *, compat: bool = False) -> ScaleOutPlan:
    """The plan of a distributed run of `query` over the catalog `ddl` declares; a `SparkSourceError`
    (`not_partitionable`) with the analysis's reason when its state does not partition."""
    from cqlstream.cql.analyzer import AnalyzeOptions

    catalog: Catalog = catalog_from_ddl(ddl) if ddl.strip() else Catalog()
    options = AnalyzeOptions(stream_compat=compat)
    compiled = compile_query(query, catalog, options=options)
    relation = not compiled.plan.is_stream
    relations = _broadcast_relations(compiled.plan)
    verdict = partitioning(compiled.plan, broadcast=frozenset(relations))
    output = _output_columns(compiled.schema)
    keyed, bucket_query, tail = verdict, query, None
    partials: tuple[tuple[str, str], ...] = ()
    if not verdict.partitioned:
        split = _split(query, catalog, verdict, tuple(n for n, _ in output), compat)
        bucket_query, tail = split.prefix, tail_spec(split.partials_ddl, split.tail, compat)
        prefix = compile_query(split.prefix, catalog, options=options)
        partials = _output_columns(prefix.schema)
        below = next(n for n in L.walk(prefix.plan) if isinstance(n, L.Aggregate)).input
        keyed = partitioning(below, broadcast=frozenset(relations))
        if not keyed.partitioned:
            raise SparkSourceError(
                f"this query cannot run partitioned: {keyed.describe()[len('none: ') :]}",
                code="not_partitionable",
                partitioning=verdict.to_dict(),
            )
        compiled = prefix
    leaves = [n for n in L.walk(compiled.plan) if isinstance(n, (L.StreamSource, L.RelationSource))]
    streams: list[str] = []
    for leaf in leaves:
        if isinstance(leaf, L.RelationSource):
            continue  # static, broadcast (checked above)
        if leaf.name.lower() not in (s.lower() for s in streams):
            streams.append(leaf.name)
    by_source = {k.source.lower(): k.names for k in keyed.sources}
    targets, keys, ticks = [], [], []
    for s in streams:
        source = catalog.get(s)
        assert isinstance(source, SourceDef)
        if source.timestamp == "system":
            raise SparkSourceError(f"'{s}' is system-timestamped: a distributed run needs event time")
        targets.append(Target.of(source))
        ticks.append(UNIT_MS[source.time_unit] * 1000)
        keys.append(tuple(by_source.get(s.lower(), ())) or tuple(c for c, _ in Target.of(source).columns))
    spec = QuerySpec(ddl, bucket_query, tuple(streams), compat, relation_names=tuple(relations))
    return ScaleOutPlan(
        spec,
        verdict,
        tuple(targets),
        tuple(ticks),
        tuple(keys),
        output,
        relation=relation,
        tail=tail,
        partials=partials,
    )


def _broadcast_relations(plan: L.Plan) -> list[str]:
    """The relations the query reads, each to be copied whole to every bucket: static ones only,
    since updates to a relation could not be ordered with the streams' rows in every bucket."""
    names: list[str] = []
    for leaf in L.walk(plan):
        if isinstance(leaf, L.RelationSource) and leaf.name.lower() not in (n.lower() for n in names):
            if not leaf.static:
                raise SparkSourceError(
                    f"relation '{leaf.name}' takes updates: a distributed run copies a relation to every bucket "
                    "once, before time starts, and could not order later updates with the streams' rows in every "
                    f"bucket; register it static (register static relation {leaf.name} ...) to broadcast it",
                    code="not_partitionable",
                )
            names.append(leaf.name)
    return names


def _split(query: str, catalog: Catalog, verdict: Partitioning, names: tuple[str, ...], compat: bool) -> AggregateSplit:
    """The query as per-bucket partial aggregates and a merge, or the refusal with both reasons."""
    why = verdict.describe()[len("none: ") :]
    if not verdict.prefix:
        raise SparkSourceError(
            f"this query cannot run partitioned: {why}", code="not_partitionable", partitioning=verdict.to_dict()
        )
    try:
        return split_aggregate(query, catalog, names, compat=compat)
    except NotSplittable as e:
        raise SparkSourceError(
            f"this query cannot run partitioned: {verdict.reason}; its global tail does not merge from partials: {e}",
            code="not_partitionable",
            partitioning=verdict.to_dict(),
        ) from None


def _output_columns(schema: tuple[L.Attribute, ...]) -> tuple[tuple[str, str], ...]:
    """(name, type) per output column; a name seen before gets _2, _3 (a join's `select *`)."""
    seen: dict[str, int] = {"ts": 1, "sign": 1}
    out = []
    for a in schema:
        n = seen.get(a.name.lower(), 0) + 1
        seen[a.name.lower()] = n
        out.append((a.name if n == 1 else f"{a.name}_{n}", str(a.type)))
    return tuple(out)


def output_schema(plan: ScaleOutPlan) -> T.StructType:
    """`ts` (long), `sign` (int), then the query's columns: the schema of the run's results."""
    return _schema(plan.output)


def _schema(columns: tuple[tuple[str, str], ...]) -> T.StructType:
    fields = [T.StructField("ts", T.LongType(), False), T.StructField("sign", T.IntegerType(), False)]
    return T.StructType(fields + [T.StructField(n, spark_type(t), True) for n, t in columns])


# ---------------------------------------------------------------- the keyed union of the inputs
def _key_column(name: str, kind: str) -> Column:
    """A key column as the hash sees it: numbers as doubles (1 and 1.0 are one key), text as text."""
    return F.col(name).cast("double" if kind in _NUMERIC else "string")


def keyed_input(
    plan: ScaleOutPlan,
    frames: Mapping[str, DataFrame],
    buckets: int,
    *,
    time_columns: Mapping[str, str] | None = None,
    delay: int = 0,
) -> DataFrame:
    """One streaming DataFrame of every input row: `__stream` (index in plan.spec.streams), `ts`
    (ticks), `__bucket` (hash of the key mod `buckets`), `__event_time` with Spark's watermark, and
    `_<i>_<field>` per field of each stream (null in the other streams' rows).

    `frames` maps each stream to its DataFrame: an event-time column (`time_columns`, default `ts`),
    integers in the stream's ticks or a Spark TIMESTAMP, and a column per field, by name
    (case-insensitive)."""
    parts = []
    for i, (stream, target) in enumerate(zip(plan.spec.streams, plan.targets)):
        df = _frame_for(frames, stream)
        cols = {c.lower(): c for c in df.columns}
        tcol = (time_columns or {}).get(stream, "ts")
        missing = [c for c in [tcol, *(f for f, _ in target.columns)] if c.lower() not in cols]
        if missing:
            raise SparkSourceError(
                f"the DataFrame of '{stream}' has no column(s) {', '.join(missing)} (it has {', '.join(df.columns)})",
                tuple(missing),
            )
        kinds = dict(target.columns)
        key = [_key_column(cols[k.lower()], kinds[k]) for k in plan.keys[i]]
        time = F.col(cols[tcol.lower()])
        if isinstance(df.schema[cols[tcol.lower()]].dataType, (T.TimestampType, T.TimestampNTZType)):
            time = F.floor(F.unix_micros(time.cast("timestamp")) / F.lit(plan.tick_micros[i]))
        keyed = df.select(
            F.lit(i).alias(STREAM),
            time.cast("long").alias("ts"),
            F.pmod(F.xxhash64(*key), F.lit(buckets)).cast("int").alias(BUCKET),
            *(F.col(cols[f.lower()]).alias(plan.field_column(i, f)) for f, _ in target.columns),
        )
        # tick t read as millisecond t + 1 of a notional clock (only the order matters): Spark's first
        # watermark is 0 and it drops rows at or before the watermark, so tick 0 must be after it.
        # One watermark per stream: Spark's global one is their minimum, so a slower stream's rows
        # are never late because another stream ran ahead.
        timed = keyed.withColumn(EVENT_TIME, F.timestamp_millis(F.col("ts") + 1))
        parts.append(timed.withWatermark(EVENT_TIME, f"{delay} milliseconds"))
    union = parts[0]
    for p in parts[1:]:
        union = union.unionByName(p, allowMissingColumns=True)
    return union


def _frame_for(frames: Mapping[str, DataFrame], stream: str) -> DataFrame:
    for name, df in frames.items():
        if name.lower() == stream.lower():
            return df
    raise SparkSourceError(f"no DataFrame feeds stream '{stream}' (given: {', '.join(frames) or 'none'})")


# ---------------------------------------------------------------- the run
def scale_out(
    spark: SparkSession,
    plan: ScaleOutPlan,
    frames: Mapping[str, DataFrame],
    *,
    buckets: int | None = None,
    time_columns: Mapping[str, str] | None = None,
    delay: int = 0,
    state_store: str | None = ROCKSDB,
) -> DataFrame:
    """The query's results (`output_schema`) as a streaming DataFrame in append mode: each element
    once, when its instant is final. `buckets` key groups (default: Spark's shuffle partitions);
    `state_store`: the state store provider (RocksDB; None keeps the session's).

    With a global tail (`plan.tail`) these are the buckets' partial aggregates: write them with
    `foreachBatch(merge_tail(plan, folder, write))`, which merges them into the results."""
    if state_store:
        spark.conf.set("spark.sql.streaming.stateStore.providerClass", state_store)
    n = buckets or int(spark.conf.get("spark.sql.shuffle.partitions") or 2)
    plan = dataclasses.replace(plan, spec=_with_relations(plan.spec, frames))
    rows = keyed_input(plan, frames, n, time_columns=time_columns, delay=delay)
    return rows.groupBy(BUCKET).applyInPandasWithState(
        _bucket_function(plan),
        _schema(plan.bucket_output),
        _STATE,
        "append",
        GroupStateTimeout.EventTimeTimeout,
    )


def _with_relations(spec: QuerySpec, frames: Mapping[str, DataFrame]) -> QuerySpec:
    """The spec with each broadcast relation's rows, read once on the driver from its (batch, not
    streaming) DataFrame of its columns by name: every bucket's engine starts with them."""
    rows = []
    for name in spec.relation_names:
        df = _frame_for(frames, name)
        if df.isStreaming:
            raise SparkSourceError(f"relation '{name}' is broadcast: give it as a batch DataFrame, not a stream")
        rows.append(df.toArrow())
    return dataclasses.replace(spec, relations=tuple(rows))


def merge_tail(
    plan: ScaleOutPlan, folder: str, write: Callable[[DataFrame, int], None]
) -> Callable[[DataFrame, int], None]:
    """The `foreachBatch` function of a run with a global tail: on the driver, merge a micro-batch's
    partial aggregates (every bucket's changes of the instants it finalized) into the query's
    results, and hand them to `write(results, batch_id)` as a DataFrame of `output_schema`.

    Spark runs one stateful Python operator per query (`applyInPandasWithState` cannot follow
    another), so the merge is not a second Spark stage: its engine's bytes are kept in `folder`
    (beside Spark's checkpoint, on the driver's file system), one file per batch id, and a batch
    Spark replays starts from the state before it; `write` must be idempotent per batch id, as
    any `foreachBatch` sink."""
    assert plan.tail is not None, "merge_tail: the plan has no global tail"
    spec, names, schema = plan.tail, [n for n, _ in plan.output], output_schema(plan)
    states = TailState(folder)

    def run(partials: DataFrame, batch_id: int) -> None:
        merge = states.load(batch_id, spec)
        out = merge.merge(partials.toArrow())
        states.save(batch_id, merge)
        write(partials.sparkSession.createDataFrame(_result_frame(out, names), schema=schema), batch_id)

    return run


def _bucket_function(plan: ScaleOutPlan) -> Any:
    """The function Spark calls per bucket and micro-batch (in its Python workers): restore the
    bucket's engine from the state store, push the rows, advance to the watermark, emit what is
    final, store the engine back, and ask to be woken when the watermark moves."""
    spec, targets = plan.spec, plan.targets
    names = [n for n, _ in plan.bucket_output]
    fields = [[(plan.field_column(i, f), f) for f, _ in t.columns] for i, t in enumerate(targets)]

    def run_bucket(key: Any, frames: Iterator[Any], state: Any) -> Iterator[Any]:
        engine = GroupEngine.loads(state.get[0]) if state.exists else GroupEngine(spec)
        if not state.hasTimedOut:
            for pdf in frames:
                _push_frame(engine, pa.Table.from_pandas(pdf, preserve_index=False), fields)
        mark = int(state.getCurrentWatermarkMs())  # = max tick + 1 − delay; rows at ticks < mark are late
        if mark > 0:  # 0: no watermark yet
            engine.advance(mark)
        out = engine.final_before(mark)  # instants < mark only: every bucket gives them in this batch
        state.update((engine.dumps(),))
        state.setTimeoutTimestamp(max(mark, 1))  # called again once the watermark passes it
        if len(out):
            yield _result_frame(out, names)

    return run_bucket


def _push_frame(engine: GroupEngine, table: pa.Table, fields: list[list[tuple[str, str]]]) -> None:
    """Split a bucket's rows by stream and push each stream's (columnar: one mask per stream)."""
    which = np.asarray(table.column(STREAM).to_numpy(), np.int64)
    for i, cols in enumerate(fields):
        mask = which == i
        if not mask.any():
            continue
        part = table.filter(pa.array(mask))
        engine.push(
            engine.streams[i],
            pa.table({"ts": part.column("ts"), **{f: part.column(c) for c, f in cols}}),
        )


def _result_frame(out: Any, names: list[str]) -> Any:
    """An engine result batch as the pandas frame Spark takes (nulls as None)."""
    import pandas as pd

    data: dict[str, Any] = {"ts": out.ts.astype(np.int64), "sign": out.sign.astype(np.int32)}
    for name, col, nulls in zip(names, out.cols, out.nulls):
        if nulls is not None and nulls.any():
            col = col.astype(object)
            col[nulls] = None
        data[name] = col
    return pd.DataFrame(data)
