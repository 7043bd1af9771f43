"""`SparkSource`: a Spark streaming DataFrame feeding one stream or relation of a `Dsms`, in process.

Each micro-batch reaches the driver through `foreachBatch` as an Arrow table, goes through the
server's Arrow ingest path (`ArrowStream().decode_table`: the same checks and casts as an HTTP
push), is sorted by event time with numpy and pushed whole; then the stream's time advances to
(max event time − watermark delay) and the engine runs. Exactly once: Spark re-delivers a batch
with the same id after a failure (from its checkpoint); a batch id not above the last applied one
is skipped.
"""

from __future__ import annotations

import math
import threading
import time
import weakref
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame
from pyspark.sql.streaming import StreamingQuery

from cqlstream.cql.catalog import SourceDef
from cqlstream.engine.dsms import Dsms
from cqlstream.io.decoders import ArrowStream, Target
from cqlstream.spark_bridge.config import MICROS_PER_SECOND, SparkSourceConfig
from cqlstream.spark_bridge.errors import SparkSourceError
from cqlstream.spark_bridge.schema import ColumnMap, map_columns

_LOCKS: weakref.WeakKeyDictionary[Dsms, threading.RLock] = weakref.WeakKeyDictionary()
_LOCKS_GUARD = threading.Lock()


def dsms_lock(dsms: Dsms) -> threading.RLock:
    """The lock every Spark source of `dsms` takes around its pushes (callbacks of two streaming
    queries run concurrently on driver threads; the engine is single-threaded)."""
    with _LOCKS_GUARD:
        lock = _LOCKS.get(dsms)
        if lock is None:
            lock = _LOCKS[dsms] = threading.RLock()
        return lock


class SparkSource:
    """Binds `df` (a streaming DataFrame) to `config.stream` of `dsms`. `lock` is shared with every
    other caller of that Dsms (default: `dsms_lock(dsms)`); `on_applied(batch_id, table)` is called
    after a batch reached the engine, with the Arrow table Spark delivered."""

    def __init__(
        self,
        dsms: Dsms,
        df: DataFrame,
        config: SparkSourceConfig,
        *,
        lock: AbstractContextManager[Any] | None = None,
        on_applied: Callable[[int, pa.Table], None] | None = None,
    ) -> None:
        self.dsms = dsms
        self.df = df
        self.config = config
        self.lock = lock if lock is not None else dsms_lock(dsms)
        self.on_applied = on_applied
        self.query: StreamingQuery | None = None
        self._columns: ColumnMap | None = None
        self._target: Target | None = None
        self.last_batch_id = -1  # the last batch applied to the engine (in memory)
        self.batches = 0
        self.rows = 0
        self.late_rows = 0
        self.skipped_replays = 0
        self.last_batch_seconds = 0.0

    # ------------------------------------------------------------ lifecycle
    def check(self) -> ColumnMap:
        """Match the DataFrame's schema to the stream's (a `SparkSourceError` names the columns at fault)."""
        with self.lock:
            source = self.dsms.catalog.get(self.config.stream)
            if not isinstance(source, SourceDef) or source.name.lower() not in self.dsms.inputs:
                raise SparkSourceError(f"no stream or relation named '{self.config.stream}' to feed")
            target = Target.of(source)
        if target.system_ts:
            raise SparkSourceError(f"'{target.name}' is system-timestamped: a Spark source gives event time")
        self._columns = map_columns(self.df.schema, target, self.config.time_column, self.config.sign_column)
        self._target = target
        return self._columns

    def start(self) -> StreamingQuery:
        """Check the schema, then start the streaming query (again after a failure: Spark resumes from
        the checkpoint and re-delivers the unfinished batch)."""
        if self.query is not None and self.query.isActive:
            raise SparkSourceError(f"the Spark source of '{self.config.stream}' is already running")
        cols = self.check()
        cfg = self.config
        writer = (
            self.df.select(*[self.df[c] for c in cols.spark_columns()])
            .writeStream.foreachBatch(self._on_batch)
            .option("checkpointLocation", cfg.checkpoint)
        )
        if cfg.available_now:
            writer = writer.trigger(availableNow=True)
        elif cfg.trigger_interval is not None:
            writer = writer.trigger(processingTime=cfg.trigger_interval)
        self.query = writer.start()
        return self.query

    def await_termination(self, timeout: float) -> bool:
        """Wait at most `timeout` seconds for the query to end; True if it did (a failed query raises)."""
        if self.query is None:
            return True
        return bool(self.query.awaitTermination(math.ceil(timeout)))

    def stop(self) -> None:
        """Stop the streaming query, waiting at most `config.stop_timeout` seconds."""
        query = self.query
        if query is None:
            return
        stopper = threading.Thread(target=query.stop, name=f"stop-spark-{self.config.stream}", daemon=True)
        stopper.start()
        stopper.join(self.config.stop_timeout)
        if stopper.is_alive():
            raise TimeoutError(
                f"the Spark source of '{self.config.stream}' did not stop in {self.config.stop_timeout} s"
            )

    # ------------------------------------------------------------ counters
    def counters(self) -> dict[str, int | float]:
        """Counters for a control table: batches and rows applied, the last batch id and its duration,
        late rows dropped, and replayed batches skipped."""
        with self.lock:
            return {
                "batches": self.batches,
                "rows": self.rows,
                "last_batch_id": self.last_batch_id,
                "last_batch_seconds": self.last_batch_seconds,
                "late_rows": self.late_rows,
                "skipped_replays": self.skipped_replays,
            }

    # ------------------------------------------------------------ one micro-batch
    def _on_batch(self, batch_df: DataFrame, batch_id: int) -> None:
        started = time.perf_counter()
        with self.lock:
            if batch_id <= self.last_batch_id:  # re-delivered after a restart: already applied
                self.skipped_replays += 1
                return
        self.apply(int(batch_id), batch_df.toArrow(), started)

    def apply(self, batch_id: int, table: pa.Table, started: float | None = None) -> None:
        """Push one micro-batch (`table`: the selected Spark columns) into the engine and run it; the
        batch counts as applied (and `on_applied` sees it) under the same lock as the push."""
        started = time.perf_counter() if started is None else started
        cols, target = self._columns, self._target
        assert cols is not None and target is not None, "check() first"
        n = table.num_rows
        batch = None
        top = None
        if n:
            ticks = self._ticks(table.column(cols.time))
            order = np.argsort(ticks, kind="stable")
            ticks = ticks[order]
            top = int(ticks[-1])
            idx = pa.array(order)
            data = {target.ts_field: pa.array(ticks)}
            if cols.sign is not None:
                data[target.sign_field] = table.column(cols.sign).take(idx)
            for field, col in cols.fields:
                data[field] = table.column(col).take(idx)
            batch = ArrowStream().decode_table(pa.table(data), target).batch()
        name = target.name
        with self.lock:
            if batch_id <= self.last_batch_id:
                self.skipped_replays += 1
                return
            before = self.dsms.input_time(name)
            late = 0
            if batch is not None and top is not None:
                slack = before.slack
                # rows older than the stream's time (its slack's floor, or its largest ts) are late:
                # dropped and counted by the input
                self.dsms.push_batch(name, batch, drop_late=True)
                after = self.dsms.input_time(name)
                late += after.late - before.late
                # Spark's watermark rule: the stream is complete below (max event time − delay). Without
                # a slack a push already completes it below its largest ts; with one, the input holds
                # rows back for its slack and the heartbeat releases them up to the watermark instead.
                mark = top - self.config.watermark_delay
                now = after.floor if slack else after.max_ts
                if now is None or mark > now:
                    self.dsms.heartbeat(name, mark)
            self.dsms.run()
            self.last_batch_id = batch_id
            self.batches += 1
            self.rows += n
            self.late_rows += late
            self.last_batch_seconds = time.perf_counter() - started
            if self.on_applied is not None:
                self.on_applied(batch_id, table)

    def _ticks(self, column: pa.ChunkedArray) -> np.ndarray:
        """Event times as int64 ticks of the stream: TIMESTAMPs scaled, integers as they are."""
        arr = column.combine_chunks()
        if arr.null_count:
            raise SparkSourceError(
                f"column '{self.config.time_column}' has a null event time (row {_first_null(arr)} of the batch)"
            )
        if pa.types.is_timestamp(arr.type):
            micros = pc.cast(arr, pa.timestamp("us", arr.type.tz)).cast(pa.int64()).to_numpy()
            return micros // (MICROS_PER_SECOND // self.config.ticks_per_second)
        return np.asarray(pc.cast(arr, pa.int64()).to_numpy(), np.int64)


def _first_null(arr: pa.Array) -> int:
    return int(np.argmax(~np.asarray(arr.is_valid().to_numpy(zero_copy_only=False), bool)))
