"""What binds a Spark streaming DataFrame to an engine stream: a frozen configuration."""

from __future__ import annotations

from dataclasses import dataclass

from cqlstream.spark_bridge.errors import SparkSourceError


@dataclass(frozen=True)
class SparkSourceConfig:
    """One Spark source.

    - `stream`: the engine stream or relation it feeds (registered beforehand).
    - `time_column`: the DataFrame column holding event time. An integer column is taken as the
      stream's ticks; a Spark TIMESTAMP becomes `floor(microseconds / tick_micros)`, where a tick is
      the stream's time unit (`unit = millisecond` → 1000 µs) unless `tick_micros` says otherwise.
    - `watermark_delay`: after each micro-batch the stream's time advances to (max event time −
      delay), in ticks: Spark's own watermark rule, stable when a batch is replayed.
    - `checkpoint`: Spark's checkpoint directory (offsets and commits: what makes replays exact).
    - `trigger_interval` (e.g. "1 second") or `available_now` (process what is there, then stop);
      neither: Spark's default, a micro-batch as soon as the previous one is done.
    - `sign_column`: for a relation, the column of +1/−1 signs.
    - `columns`: (field, Spark column) pairs for fields fed by a column of another name.
    """

    stream: str
    time_column: str
    checkpoint: str
    tick_micros: int | None = None
    watermark_delay: int = 0
    trigger_interval: str | None = None
    available_now: bool = False
    sign_column: str = "sign"
    columns: tuple[tuple[str, str], ...] = ()
    stop_timeout: float = 30.0  # seconds stop() waits for the streaming query to end

    def __post_init__(self) -> None:
        if self.tick_micros is not None and self.tick_micros <= 0:
            raise SparkSourceError(f"tick_micros must be positive (got {self.tick_micros})", field="tick_micros")
        if self.watermark_delay < 0:
            raise SparkSourceError(f"watermark_delay must be ≥ 0 (got {self.watermark_delay})", field="delay")
        if self.trigger_interval is not None and self.available_now:
            raise SparkSourceError("give trigger_interval or available_now, not both", field="trigger")
