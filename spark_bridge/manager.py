"""The Spark sources of a process, by the stream each feeds: started from specs (CLI, TOML file,
HTTP API) or from a user's own DataFrame, listed with their control tables, stopped one by one or
all together (the server's shutdown), each within a bounded time."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

from pyspark.sql import DataFrame

from cqlstream.spark_bridge.config import SparkSourceConfig
from cqlstream.spark_bridge.errors import SparkSourceError
from cqlstream.spark_bridge.readers import dataframe
from cqlstream.spark_bridge.runtime import SparkRuntime
from cqlstream.spark_bridge.sinks import Sink
from cqlstream.spark_bridge.source import SparkSource
from cqlstream.spark_bridge.spec import SourceSpec


class SparkSources:
    """Named Spark sources on one runtime, all into one sink. `attach(source)` / `detach(eid)` are
    called when a source comes and goes (the server lists it among the engine's control tables)."""

    def __init__(
        self,
        sink: Sink,
        runtime: SparkRuntime,
        checkpoint_root: str | Path,
        attach: Callable[[SparkSource], None] | None = None,
        detach: Callable[[str], None] | None = None,
    ) -> None:
        self.sink = sink
        self.runtime = runtime
        self.checkpoint_root = Path(checkpoint_root)
        self.attach = attach
        self.detach = detach
        self.sources: dict[str, SparkSource] = {}  # stream (lower case) -> its source
        self.specs: dict[str, SourceSpec] = {}
        self._lock = threading.RLock()

    def add(self, spec: SourceSpec) -> SparkSource:
        """Start a source from its definition: the stream is checked first (no Spark needed for
        that), then Spark builds the DataFrame and the streaming query starts."""
        self._refuse_running(spec.stream)
        info = self.sink.stream_info(spec.stream)
        spec, df = dataframe(self.runtime.session(), spec, info)
        label = f"{spec.format}:{spec.path}" if spec.path else spec.format
        src = self.add_dataframe(df, spec.config(self.checkpoint_root), label=label)
        self.specs[spec.stream.lower()] = spec
        return src

    def add_dataframe(self, df: DataFrame, config: SparkSourceConfig, label: str = "DataFrame") -> SparkSource:
        """Start a source from any streaming DataFrame (a user's own Spark pipeline)."""
        with self._lock:
            self._refuse_running(config.stream)
            src = SparkSource(self.sink, df, config, label=label)
            src.start()  # a SparkSourceError (schema, Spark's analysis) leaves nothing behind
            old = self.sources.get(config.stream.lower())
            if old is not None and self.detach is not None:
                self.detach(old.eid)
            self.sources[config.stream.lower()] = src
            if self.attach is not None:
                self.attach(src)
            return src

    def _refuse_running(self, stream: str) -> None:
        old = self.sources.get(stream.lower())
        if old is not None and old.state() in ("starting", "running"):
            raise SparkSourceError(f"a Spark source already feeds '{stream}' (remove it first)", code="source_exists")

    def get(self, stream: str) -> SparkSource:
        src = self.sources.get(stream.lower())
        if src is None:
            raise SparkSourceError(f"no Spark source feeds '{stream}'", code="unknown_source")
        return src

    def all(self) -> list[SparkSource]:
        return list(self.sources.values())

    def remove(self, stream: str) -> None:
        """Stop the source of `stream` and forget it (its checkpoint stays: adding it again resumes)."""
        with self._lock:
            src = self.get(stream)
            src.stop()
            del self.sources[stream.lower()]
            self.specs.pop(stream.lower(), None)
            if self.detach is not None:
                self.detach(src.eid)

    def stop_all(self) -> list[str]:
        """Stop every streaming query (each within its stop timeout); the problems, one line each."""
        problems = []
        for src in self.all():
            try:
                src.stop()
            except Exception as e:
                problems.append(f"{src.config.stream}: {e}")
        return problems
