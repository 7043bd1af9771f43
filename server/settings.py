"""Server settings: one frozen dataclass, filled from the CLI (`cqlstream serve`) or by tests."""

from __future__ import annotations

from dataclasses import dataclass

from cqlstream.spark_bridge.spec import SourceSpec


@dataclass(frozen=True)
class Settings:
    host: str = "127.0.0.1"
    port: int = 8000
    data_dir: str | None = None  # the write-ahead log, checkpoints and plan.json live here when set
    api_key: str | None = None  # when set, every mutating endpoint needs header `X-API-Key`
    api_key_header: str = "X-API-Key"
    max_body_bytes: int = 256 << 20  # larger request bodies get 413
    subscriber_buffer: int = 1_000_000  # result elements buffered per subscriber before it is lagged out
    lag_grace_seconds: float = 10.0  # a lagged subscriber that does not read its `lagged` message this long is cut off
    tick_interval: float = 0.1  # seconds between clock ticks (system-timestamped streams)
    keepalive_seconds: float = 15.0  # SSE comment / XML-JSON whitespace when a result stream is idle
    ts_field: str = "ts"  # name of the timestamp field in pushed rows
    sign_field: str = "sign"  # name of the sign field in pushed relation updates
    compat: bool = False  # STREAM 0.6 behaviour (see `cqlstream run --stream-compat`)
    silence_timeout: float | None = None  # a source silent this long (s) is advanced to the others' time
    ddl: tuple[str, ...] = ()  # streams, relations and views registered at start (kept when the data dir has them)
    sources: tuple[SourceSpec, ...] = ()  # Spark sources started with the server
    spark_master: str = "local[*]"  # the embedded Spark session's master
    checkpoint_dir: str | None = None  # Spark checkpoints (default: DATA_DIR/spark-checkpoints, else a temp dir)
    idempotency_keys: int = 10_000  # Idempotency-Key values of pushes remembered per source (oldest forgotten first)
    fsync: str = "interval"  # when the log reaches the disk: always (before each reply), interval, off (the OS decides)
    fsync_interval_ms: float = 100.0  # the `interval` policy's period
    checkpoint_records: int | None = 10_000  # a checkpoint after this many log records (None: not by count)
    checkpoint_seconds: float | None = None  # ... or this many seconds after the last one (None: not by time)
    retain_log: bool = False  # keep the log segments a checkpoint covers (an archive) instead of deleting them
    segment_bytes: int = 64 << 20  # a log segment is rolled at this size
