"""What binds a Spark streaming DataFrame to an engine stream: a frozen configuration."""

from __future__ import annotations

from dataclasses import dataclass

MICROS_PER_SECOND = 1_000_000


@dataclass(frozen=True)
class SparkSourceConfig:
    """One Spark source.

    - `stream`: the engine stream or relation it feeds (registered on the Dsms beforehand).
    - `time_column`: the DataFrame column holding event time. An integer column is taken as the
      stream's ticks; a Spark TIMESTAMP becomes `floor(seconds × ticks_per_second)`.
    - `watermark_delay`: after each micro-batch the stream's time advances to (max event time −
      delay), in ticks: Spark's own watermark rule, stable when a batch is replayed.
    - `checkpoint`: Spark's checkpoint directory (offsets and commits: what makes replays exact).
    - `trigger_interval` (e.g. "1 second") or `available_now` (process what is there, then stop);
      neither: Spark's default, a micro-batch as soon as the previous one is done.
    - `sign_column`: for a relation, the column of +1/−1 signs.
    """

    stream: str
    time_column: str
    checkpoint: str
    ticks_per_second: int = 1
    watermark_delay: int = 0
    trigger_interval: str | None = None
    available_now: bool = False
    sign_column: str = "sign"
    stop_timeout: float = 30.0  # seconds stop() waits for the streaming query to end

    def __post_init__(self) -> None:
        if self.ticks_per_second <= 0 or MICROS_PER_SECOND % self.ticks_per_second:
            raise ValueError(f"ticks_per_second must divide {MICROS_PER_SECOND} (got {self.ticks_per_second})")
        if self.watermark_delay < 0:
            raise ValueError(f"watermark_delay must be ≥ 0 (got {self.watermark_delay})")
        if self.trigger_interval is not None and self.available_now:
            raise ValueError("give trigger_interval or available_now, not both")
