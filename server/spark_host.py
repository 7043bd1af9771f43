"""The server's Spark sources: a Spark session embedded in `cqlstream serve` (started on the first
source, so a server without Spark sources never pays for it), the sources given on the command
line started in the background once the server runs, the HTTP API's calls, and a clean stop at
shutdown. Every source pushes through the engine host's lock and publishes like an HTTP push."""

from __future__ import annotations

import json
import logging
import os
import shutil
import tempfile
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cqlstream.cql.catalog import SourceDef
from cqlstream.io.decoders import ArrowStream
from cqlstream.server.control import plain
from cqlstream.server.problems import ProblemError
from cqlstream.spark_bridge.errors import SparkSourceError
from cqlstream.spark_bridge.prepare import Prepared
from cqlstream.spark_bridge.sinks import Applied, Sink, StreamInfo, stream_info
from cqlstream.spark_bridge.spec import SourceSpec

if TYPE_CHECKING:
    from cqlstream.server.host import EngineHost
    from cqlstream.spark_bridge.manager import SparkSources
    from cqlstream.spark_bridge.source import SparkSource

log = logging.getLogger("cqlstream.spark")


class HostSink(Sink):
    """Micro-batches of the embedded Spark sources into the host: the path of an HTTP push with
    `late=drop`, `heartbeat=` the batch's watermark and the idempotency key `spark:<run>:<batch>`,
    so they are counted, published and remembered like any push."""

    where = "this server"

    def __init__(self, host: EngineHost) -> None:
        self.host = host

    def stream_info(self, stream: str) -> StreamInfo:
        with self.host.lock:
            source = self.host.d.catalog.get(stream)
            if not isinstance(source, SourceDef) or source.name.lower() not in self.host.d.inputs:
                source = None
            return stream_info(source, stream, self.where)

    def apply(self, stream: str, run_id: str, batch: Prepared) -> Applied:
        target = self.stream_info(stream).target  # the shape `batch.table` was prepared in
        parsed = ArrowStream().decode_table(batch.table, target)
        try:
            out = self.host.apply(
                stream, target, parsed, drop_late=True, heartbeat=batch.mark, key=f"spark:{run_id}:{batch.batch_id}"
            )
        except ProblemError as e:
            raise SparkSourceError(f"the server refused batch {batch.batch_id} of '{stream}': {e}") from None
        return Applied(out["accepted"], out["late"], out["replayed"])


class SparkHost:
    """Spark sources feeding the host's engine (in process: the `EngineSink` under the host's lock)."""

    def __init__(self, host: EngineHost) -> None:
        self.host = host
        self._sources: SparkSources | None = None
        self._made = threading.Lock()
        self._starter: threading.Thread | None = None
        self._temp_root: Path | None = None
        self._api: dict[str, SourceSpec] = {}  # stream (lower case) -> a source added over the API

    @property
    def active(self) -> bool:
        return self._sources is not None

    def checkpoint_root(self) -> Path:
        """Where sources without a checkpoint of their own keep theirs. Without a data dir nothing
        survives a restart: a folder of the temp dir, made by Spark when a source needs it and
        removed at stop."""
        s = self.host.settings
        if s.checkpoint_dir:
            return Path(s.checkpoint_dir)
        if s.data_dir:
            return Path(s.data_dir) / "spark-checkpoints"
        self._temp_root = Path(tempfile.gettempdir()) / f"cqlstream-spark-{os.getpid()}-{id(self):x}"
        return self._temp_root

    def sources(self) -> SparkSources:
        """The process's Spark sources (pyspark is imported here, on first use)."""
        with self._made:
            if self._sources is None:
                from cqlstream.spark_bridge.manager import SparkSources
                from cqlstream.spark_bridge.runtime import SparkRuntime

                host = self.host
                sink = HostSink(host)
                runtime = SparkRuntime(host.settings.spark_master, say=log.warning)
                self._sources = SparkSources(sink, runtime, self.checkpoint_root(), self._attach, self._detach)
            return self._sources

    def _attach(self, src: SparkSource) -> None:
        with self.host.lock:
            self.host.d.attach(src)

    def _detach(self, eid: str) -> None:
        with self.host.lock:
            self.host.d.detach(eid)

    # ------------------------------------------------------------ lifecycle
    def _saved_file(self) -> Path | None:
        """The sources added over the API, kept across restarts under the data dir (like queries)."""
        d = self.host.settings.data_dir
        return Path(d) / "spark-sources.json" if d else None

    def _load_saved(self) -> list[SourceSpec]:
        path = self._saved_file()
        if path is None or not path.exists():
            return []
        try:
            doc = json.loads(path.read_text(encoding="utf-8"))
            return [SourceSpec.of(d, where=f"{path}: source {i + 1}") for i, d in enumerate(doc["sources"])]
        except (OSError, ValueError, KeyError, TypeError, SparkSourceError) as e:
            log.error("Spark sources of %s not restored: %s", path, e)
            return []

    def _save(self) -> None:
        """Write the API's sources (atomically: temp file, fsync, rename)."""
        path = self._saved_file()
        if path is None:
            return
        doc = {"format": "cqlstream-spark-sources", "version": 1, "sources": [s.to_dict() for s in self._api.values()]}
        tmp = path.with_suffix(".tmp")
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(doc, f, indent=2)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)

    def start(self) -> None:
        """Start the sources of the settings and those added over the API before a restart, in the
        background (Spark takes ~10 s; the API answers meanwhile). A stream given on the command
        line takes its definition from there."""
        given = {s.stream.lower() for s in self.host.settings.sources}
        saved = [s for s in self._load_saved() if s.stream.lower() not in given]
        self._api = {s.stream.lower(): s for s in saved}
        specs = (*self.host.settings.sources, *saved)
        if specs and self._starter is None:
            self._starter = threading.Thread(target=self._start_all, args=(specs,), name="spark-sources", daemon=True)
            self._starter.start()

    def _start_all(self, specs: tuple[SourceSpec, ...]) -> None:
        for spec in specs:
            try:
                self.sources().add(spec)
            except Exception as e:  # a source that cannot start is reported; the server keeps serving
                log.error("Spark source of '%s' not started: %s", spec.stream, e)

    def stop(self) -> None:
        """Stop every streaming query, then the session (each within bounded time)."""
        if self._starter is not None:
            self._starter.join(timeout=60)
        if self._sources is None:
            return
        for problem in self._sources.stop_all():
            log.error("Spark source did not stop cleanly: %s", problem)
        self._sources.runtime.stop()
        if self._temp_root is not None:
            shutil.rmtree(self._temp_root, ignore_errors=True)

    # ------------------------------------------------------------ the API's calls
    def _out(self, src: SparkSource) -> dict[str, Any]:
        with self.host.lock:
            table = plain(src.control_table())
        spec = self._sources.specs.get(src.config.stream.lower()) if self._sources else None
        return {"id": src.eid, "stream": src.config.stream, **table, "spec": spec.to_dict() if spec else None}

    def add(self, spec: SourceSpec) -> dict[str, Any]:
        out = self._out(self.sources().add(spec))
        with self._made:
            self._api[spec.stream.lower()] = spec
            self._save()
        return out

    def list(self) -> list[dict[str, Any]]:
        return [self._out(s) for s in self._sources.all()] if self._sources else []

    def get(self, stream: str) -> dict[str, Any]:
        return self._out(self.sources().get(stream))

    def remove(self, stream: str) -> None:
        self.sources().remove(stream)
        with self._made:
            if self._api.pop(stream.lower(), None) is not None:
                self._save()

    def metrics(self) -> dict[str, dict[str, Any]]:
        """Counters per Spark source (stream name -> counters), for /metrics."""
        if self._sources is None:
            return {}
        return {s.config.stream: {**s.counters(), "state": s.state()} for s in self._sources.all()}
