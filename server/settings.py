"""Server settings: one frozen dataclass, filled from the CLI (`cqlstream serve`) or by tests."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # an annotation only: the Spark bridge is not loaded by every CLI start
    from cqlstream.spark_bridge.spec import SourceSpec

TICK_MIN = 0.001  # s: the smallest clock tick (`serve --tick`)
TICK_MAX = 60.0  # s: the largest one (a system-timestamped instant would wait that long to close)


def check_tick(seconds: float) -> float:
    """The clock tick in seconds, or a ValueError naming its bounds."""
    if not TICK_MIN <= seconds <= TICK_MAX:  # also refuses NaN
        raise ValueError(f"tick_interval must be between {TICK_MIN:g} and {TICK_MAX:g} seconds, not {seconds:g}")
    return seconds


def check_engine_threads(n: object) -> int:
    """The engine's thread count, or a ValueError saying what it takes."""
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"engine_threads must be a whole number of at least 1, not {n!r}")
    return n


@dataclass(frozen=True)
class Settings:
    """What `cqlstream serve` runs with: address, durability, keys, limits, overload control."""

    host: str = "127.0.0.1"
    port: int = 8000
    data_dir: str | None = None  # the write-ahead log, checkpoints and plan.json live here when set
    api_key: str | None = None  # when set, every mutating endpoint needs header `X-API-Key`
    api_key_header: str = "X-API-Key"
    max_body_bytes: int = 256 << 20  # larger request bodies get 413
    subscriber_buffer: int = 1_000_000  # result elements buffered per subscriber before it is lagged out
    result_history: int = 100_000  # published result elements kept per query for subscribers resuming (`from=T`)
    lag_grace_seconds: float = 10.0  # a lagged subscriber that does not read its `lagged` message this long is cut off
    # seconds between clock ticks: they close the instants of system-timestamped streams and drive the
    # silence timeout; event-time results never wait for one (a push or heartbeat publishes them)
    tick_interval: float = 0.1
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
    # limits (README "Limits"): no one query or client takes the server down
    synopsis_joins: bool = True  # bounded joins / aggregates over streams run on synopses (serve --synopsis-joins)
    query_memory_limit: int | None = 1 << 30  # bytes of state a query may hold before it is suspended (None: no limit)
    query_cpu_limit: float | None = 10.0  # s of engine time a query may take in one run before it is suspended
    # the overload controller (docs/approximation.md): off, or on with these limits
    overload_control: bool = False
    overload_queue_memory_limit: int | None = 100 << 20  # bytes in the engine's queues
    overload_cpu_limit: float | None = None  # engine seconds per second
    overload_admission: bool = True  # refuse rows at push time over the queue memory limit
    overload_policy: str = "weighted"  # who loses precision first (engine/approx/shedding.py)
    work_budget: int | None = 100_000  # input elements per operator call, so limits are checked within a run
    # threads the engine runs operators on (`serve --engine-threads`, process-wide): 2 or more start it
    # on the `parallel` scheduler, operators that do not feed each other side by side; same results
    engine_threads: int = 1
    max_pending_pushes: int = 64  # pushes in flight (reading, waiting for the engine, running) before 429
    max_engine_lag: float = 5.0  # s the engine may be busy on one call before pushes get 429 and /readyz 503
    retry_after: int = 1  # seconds, the Retry-After of a 429
    read_key: str | None = None  # when set, reads (results, peek, CQL texts, plan, entities) need it or the api key
    cors_origins: tuple[str, ...] = ()  # origins allowed by CORS (none by default; "*" for any)
    keep_alive_timeout: float = 5.0  # s an idle keep-alive connection stays open
    header_timeout: float = 10.0  # s for a connection to send a request's complete headers
    body_timeout: float = 60.0  # s for a request body to arrive completely (slow uploads get 408)
    max_header_bytes: int = 64 << 10  # a request head still incomplete after this many bytes is refused (400)

    def __post_init__(self) -> None:
        check_tick(self.tick_interval)
        check_engine_threads(self.engine_threads)
