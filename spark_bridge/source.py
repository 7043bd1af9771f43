"""`SparkSource`: a Spark streaming DataFrame feeding one stream or relation, in this process or on
a server.

Each micro-batch reaches the driver through `foreachBatch` as an Arrow table, is prepared for the
stream (columns renamed, event time in ticks, sorted by event time with numpy: spark_bridge/prepare.py)
and handed to a sink: `EngineSink` pushes it into a `Dsms` here through the server's Arrow ingest
path, `HttpSink` posts it as Arrow IPC to a server, which takes the same path. Exactly once: Spark
re-delivers a batch with the same id after a failure (from its checkpoint); the sink skips a batch
id of this streaming query it has applied already.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

import pyarrow as pa
from pyspark.sql import DataFrame
from pyspark.sql.streaming import StreamingQuery

from cqlstream.engine.dsms import Dsms
from cqlstream.engine.errors import KnobError
from cqlstream.spark_bridge.config import SparkSourceConfig
from cqlstream.spark_bridge.errors import SparkSourceError
from cqlstream.spark_bridge.prepare import prepare
from cqlstream.spark_bridge.schema import ColumnMap, map_columns
from cqlstream.spark_bridge.sinks import EngineSink, Sink, StreamInfo

START_WAIT = 60.0  # seconds a first callback waits for start() to hand over the streaming query
IDLE_WAIT = 5.0  # seconds stop() waits for the micro-batch under way to end


class SparkSource:
    """Binds `df` (a streaming DataFrame) to `config.stream` of `into`: a `Dsms` (then an `EngineSink`
    over it, under `lock`: default the engine's one lock, shared by every source into it) or any `Sink`.
    `on_applied(batch_id, table)` is called after a batch was
    applied, with the Arrow table Spark delivered. `label` says where the rows come from (for the
    control table: "csv:/data/orders", ...)."""

    def __init__(
        self,
        into: Dsms | Sink,
        df: DataFrame,
        config: SparkSourceConfig,
        *,
        lock: AbstractContextManager[Any] | None = None,
        on_applied: Callable[[int, pa.Table], None] | None = None,
        label: str = "DataFrame",
    ) -> None:
        self.sink: Sink = into if isinstance(into, Sink) else EngineSink(into, lock)
        self.df = df
        self.config = config
        self.on_applied = on_applied
        self.label = label
        self.query: StreamingQuery | None = None
        self._started = threading.Event()  # set once start() has (or failed to have) a streaming query
        self._starting = False
        self._run_id: str | None = None
        self._progress_cache: dict[str, Any] = {}
        self._progress_at = -1e9
        self._columns: ColumnMap | None = None
        self._info: StreamInfo | None = None
        self._guard = threading.Lock()  # the counters
        self.last_batch_id = -1  # the last batch applied (of the current streaming query)
        self.batches = 0
        self.rows = 0
        self.accepted = 0
        self.late_rows = 0
        self.skipped_replays = 0
        self.last_batch_seconds = 0.0
        self.last_applied_at: float | None = None  # wall clock
        self.last_mark: int | None = None
        self.error: str | None = None  # why the source stopped, when it failed

    # ------------------------------------------------------------ the entity (engine/attached.py)
    @property
    def eid(self) -> str:
        return f"spark:{self.config.stream}"

    @property
    def feeds(self) -> str:
        return self.config.stream

    # ------------------------------------------------------------ lifecycle
    def check(self) -> ColumnMap:
        """Match the DataFrame's schema to the stream's (a `SparkSourceError` names the columns at fault)."""
        info = self.sink.stream_info(self.config.stream)
        self._columns = map_columns(
            self.df.schema, info.target, self.config.time_column, self.config.sign_column, dict(self.config.columns)
        )
        self._info = info
        return self._columns

    def start(self) -> StreamingQuery:
        """Check the schema, then start the streaming query (again after a failure: Spark resumes from
        the checkpoint and re-delivers the unfinished batch)."""
        if self.query is not None and self.query.isActive:
            raise SparkSourceError(
                f"the Spark source of '{self.config.stream}' is already running", code="source_exists"
            )
        cols = self.check()
        cfg = self.config
        self._started.clear()
        self._starting = True
        self._run_id = None
        self.error = None
        writer = (
            self.df.select(*[self.df[c] for c in cols.spark_columns()])
            .writeStream.foreachBatch(self._on_batch)
            .option("checkpointLocation", cfg.checkpoint)
            .queryName(f"cqlstream_{cfg.stream}")
        )
        if cfg.available_now:
            writer = writer.trigger(availableNow=True)
        elif cfg.trigger_interval is not None:
            writer = writer.trigger(processingTime=cfg.trigger_interval)
        try:
            self.query = writer.start()
        except Exception as e:  # Spark's analysis errors: a missing path, a bad option, ...
            raise SparkSourceError(f"Spark cannot start the source of '{cfg.stream}': {_first_line(e)}") from None
        finally:
            self._started.set()
        return self.query

    def await_termination(self, timeout: float) -> bool:
        """Wait at most `timeout` seconds for the query to end; True if it did (a failed query raises)."""
        if self.query is None:
            return True
        return bool(self.query.awaitTermination(math.ceil(timeout)))

    def stop(self) -> None:
        """Stop the streaming query, waiting at most `config.stop_timeout` seconds; between two
        micro-batches when one ends soon (stopping in the middle of one cancels its Spark job, which
        Spark and py4j report with stack traces)."""
        query = self.query
        if query is None:
            return
        _await_idle(query, min(IDLE_WAIT, self.config.stop_timeout / 2))
        stopper = threading.Thread(target=query.stop, name=f"stop-spark-{self.config.stream}", daemon=True)
        stopper.start()
        stopper.join(self.config.stop_timeout)
        if stopper.is_alive():
            raise TimeoutError(
                f"the Spark source of '{self.config.stream}' did not stop in {self.config.stop_timeout} s"
            )

    def state(self) -> str:
        """starting | running | finished | stopped | failed (then `error` says why)."""
        q = self.query
        if q is None:
            return "failed" if self.error else "starting"
        if q.isActive:
            return "running"
        exc: BaseException | None
        try:
            exc = q.exception()
        except Exception as e:  # the JVM side is gone (session stopped)
            exc = e
        if exc is not None:
            self.error = self.error or _first_line(exc)
            return "failed"
        return "finished" if self.config.available_now else "stopped"

    # ------------------------------------------------------------ control table
    def counters(self) -> dict[str, Any]:
        """Batches and rows applied, rows accepted and dropped as late, replayed batches skipped, the
        last batch id and how long it took here, Spark's own duration of its last trigger and input
        rate, and the lag of event time behind the wall clock (for TIMESTAMP event times)."""
        with self._guard:
            out: dict[str, Any] = {
                "batches": self.batches,
                "rows": self.rows,
                "accepted": self.accepted,
                "late_rows": self.late_rows,
                "skipped_replays": self.skipped_replays,
                "last_batch_id": self.last_batch_id,
                "last_batch_seconds": self.last_batch_seconds,
            }
            mark, at = self.last_mark, self.last_applied_at
        progress = self._progress()
        out["spark_batch_ms"] = progress.get("durationMs", {}).get("triggerExecution")
        out["input_rows_per_second"] = progress.get("inputRowsPerSecond")
        cols, info = self._columns, self._info
        lag = None
        if mark is not None and cols is not None and cols.time_is_timestamp and info is not None:
            tick = self.config.tick_micros or info.tick_micros
            lag = round(time.time() - (mark + self.config.watermark_delay) * tick / 1e6, 3)
        out["lag_seconds"] = lag
        out["idle_seconds"] = None if at is None else round(time.time() - at, 3)
        return out

    def _progress(self) -> dict[str, Any]:
        """Spark's last progress report, asked of the JVM at most once a second (~4 ms a call)."""
        q, now = self.query, time.monotonic()
        if q is not None and now - self._progress_at >= 1.0:
            try:
                p = q.lastProgress
            except Exception:  # the session is stopping
                p = None
            self._progress_cache, self._progress_at = (dict(p) if p else {}), now
        return self._progress_cache

    def control_table(self) -> dict[str, Any]:
        return {
            "kind": "spark_source",
            "name": self.config.stream,
            "source": self.label,
            "state": self.state(),
            "error": self.error,
            "sink": self.sink.where,
            "counters": self.counters(),
            "knobs": {},
        }

    def set_knob(self, knob: str, value: Any) -> None:
        raise KnobError(f"a Spark source has no knobs (its trigger and options are set when it starts); not '{knob}'")

    # ------------------------------------------------------------ one micro-batch
    def _on_batch(self, batch_df: DataFrame, batch_id: int) -> None:
        started = time.perf_counter()
        try:
            self.apply(int(batch_id), batch_df.toArrow(), started)
        except Exception as e:
            self.error = _first_line(e)
            raise

    def run_id(self) -> str:
        """The streaming query's id: the same across restarts from one checkpoint, new for a new one
        ("direct" for batches handed to `apply` by hand, without Spark)."""
        if not self._starting:
            return "direct"
        if self._run_id is None:  # asked of the JVM once per start (a few ms each time)
            if not self._started.wait(START_WAIT) or self.query is None:
                raise SparkSourceError(f"the Spark source of '{self.config.stream}' has no streaming query")
            self._run_id = str(self.query.id)
        return self._run_id

    def apply(self, batch_id: int, table: pa.Table, started: float | None = None, run_id: str | None = None) -> None:
        """Prepare one micro-batch (`table`: the selected Spark columns) and hand it to the sink; it
        counts as applied (and `on_applied` sees it) once the sink has applied it."""
        started = time.perf_counter() if started is None else started
        cols, info = self._columns, self._info
        assert cols is not None and info is not None, "check() first"
        tick = self.config.tick_micros or info.tick_micros
        prepared = prepare(batch_id, table, cols, info.target, tick, self.config.watermark_delay)
        done = self.sink.apply(self.config.stream, run_id or self.run_id(), prepared)
        with self._guard:
            if done.replayed:
                self.skipped_replays += 1
                return
            self.last_batch_id = batch_id
            self.batches += 1
            self.rows += prepared.rows
            self.accepted += done.accepted
            self.late_rows += done.late
            self.last_batch_seconds = time.perf_counter() - started
            self.last_applied_at = time.time()
            if prepared.mark is not None:
                self.last_mark = prepared.mark
        if self.on_applied is not None:
            self.on_applied(batch_id, table)


def _await_idle(query: StreamingQuery, timeout: float) -> None:
    """Return once no trigger of `query` runs, or after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if not query.isActive or not query.status.get("isTriggerActive"):
                return
        except Exception:  # the session is going away
            return
        time.sleep(0.01)


def _first_line(e: BaseException) -> str:
    """An exception's message without the JVM stack trace Spark appends."""
    text = str(e).strip() or type(e).__name__
    return text.splitlines()[0][:500]
