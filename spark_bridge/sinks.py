"""Where a Spark source's prepared micro-batches go: into a `Dsms` in this process (`EngineSink`) or
to a `cqlstream serve` over HTTP as Arrow IPC (`HttpSink`). Both apply a batch exactly once: a
batch is identified by (Spark query id, batch id), and one already applied is skipped; the
engine sink remembers it under the engine's lock, the HTTP sink sends it as the push's
idempotency key and the server remembers it."""

from __future__ import annotations

import threading
import time
import weakref
from abc import ABC, abstractmethod
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any

import httpx
import pyarrow as pa

from cqlstream.cql.catalog import UNIT_MS, SourceDef
from cqlstream.cql.types import kind_of_name
from cqlstream.engine.dsms import Dsms
from cqlstream.io.decoders import ArrowStream, Target
from cqlstream.spark_bridge.errors import SparkSourceError
from cqlstream.spark_bridge.prepare import Prepared

ARROW_STREAM = "application/vnd.apache.arrow.stream"


@dataclass(frozen=True)
class StreamInfo:
    """What a source needs to know of the stream it feeds: its push shape and its tick in µs."""

    target: Target
    tick_micros: int


@dataclass(frozen=True)
class Applied:
    """What applying one batch did: rows accepted, rows dropped as late, or skipped as a replay."""

    accepted: int
    late: int
    replayed: bool = False


class Sink(ABC):
    """The last step of a Spark source: the same for every micro-batch, whatever the transport."""

    where: str  # for messages: "this process" or the server's URL

    @abstractmethod
    def stream_info(self, stream: str) -> StreamInfo:
        """The stream's shape (a `SparkSourceError` when there is no such stream or relation)."""

    @abstractmethod
    def apply(self, stream: str, run_id: str, batch: Prepared) -> Applied:
        """Push the batch, advance the stream to `batch.mark`, run: exactly once per (run_id, batch id)."""


def stream_info(source: SourceDef | None, stream: str, where: str) -> StreamInfo:
    """A registered source's info for a Spark source, or the error saying why it cannot feed it."""
    if source is None:
        return _info(None, "second", stream, where)
    return _info(Target.of(source), source.time_unit, stream, where)


def _info(target: Target | None, unit: str, stream: str, where: str) -> StreamInfo:
    """The stream's info, or the error saying why a Spark source cannot feed it."""
    if target is None:
        raise SparkSourceError(f"no stream or relation named '{stream}' to feed in {where}", field="stream")
    if target.system_ts:
        raise SparkSourceError(
            f"'{target.name}' is system-timestamped: a Spark source gives event time "
            "(register it with application timestamps)",
            field="stream",
        )
    return StreamInfo(target, UNIT_MS[unit] * 1000)


_ENGINE_LOCKS: weakref.WeakKeyDictionary[Dsms, threading.RLock] = weakref.WeakKeyDictionary()
_ENGINE_LOCKS_GUARD = threading.Lock()


def engine_lock(dsms: Dsms) -> threading.RLock:
    """The one lock of `dsms` that every EngineSink made without a lock of its own takes: two
    Spark sources into one engine apply their batches from two driver threads, and a `Dsms` is
    not thread-safe (a lock per sink let both run it at once)."""
    with _ENGINE_LOCKS_GUARD:
        lock = _ENGINE_LOCKS.get(dsms)
        if lock is None:
            lock = _ENGINE_LOCKS[dsms] = threading.RLock()
        return lock


class EngineSink(Sink):
    """Into `dsms`, under `lock` (shared with every other caller of that engine: callbacks of two
    streaming queries run concurrently on driver threads; default: `engine_lock(dsms)`, shared by
    every sink into that engine). The server has its own sink, which goes through its push path
    (server/spark_host.py)."""

    where = "this process"

    def __init__(
        self,
        dsms: Dsms,
        lock: AbstractContextManager[Any] | None = None,
    ) -> None:
        self.dsms = dsms
        self.lock = lock if lock is not None else engine_lock(dsms)
        self.applied: dict[tuple[str, str], int] = {}  # (stream, run id) -> last batch id applied

    def stream_info(self, stream: str) -> StreamInfo:
        with self.lock:
            source = self.dsms.catalog.get(stream)
            if not isinstance(source, SourceDef) or source.name.lower() not in self.dsms.inputs:
                source = None
            return stream_info(source, stream, self.where)

    def apply(self, stream: str, run_id: str, batch: Prepared) -> Applied:
        target = self.stream_info(stream).target
        engine_batch = ArrowStream().decode_table(batch.table, target).batch() if batch.rows else None
        name = target.name
        key = (name.lower(), run_id)
        with self.lock:
            if batch.batch_id <= self.applied.get(key, -1):
                return Applied(0, 0, replayed=True)
            before = self.dsms.input_time(name)
            accepted = late = 0
            if engine_batch is not None and batch.mark is not None:
                # rows older than the stream's time (its slack's floor, or its largest ts) are late:
                # dropped and counted by the input
                self.dsms.push_batch(name, engine_batch, drop_late=True)
                then = self.dsms.input_time(name)
                late = then.late - before.late
                accepted = len(engine_batch) - late
                # Spark's watermark rule: the stream is complete below (max event time − delay). Without
                # a slack a push already completes it below its largest ts; with one, the input holds
                # rows back for its slack and the heartbeat releases them up to the watermark instead.
                now = then.floor if then.slack else then.max_ts
                if now is None or batch.mark > now:
                    self.dsms.heartbeat(name, batch.mark)
            self.dsms.run()
            self.applied[key] = batch.batch_id
            return Applied(accepted, late)


class HttpSink(Sink):
    """To a `cqlstream serve` at `url`: each batch one Arrow IPC push with `late=drop` and
    `heartbeat=mark`, its idempotency key `spark:<run id>:<batch id>`. Failed requests (connection
    errors, 5xx) are retried with backoff for at most `retry_seconds`; then the error reaches Spark,
    which fails the query (a restart from the checkpoint re-sends the batch under the same key)."""

    def __init__(
        self, url: str, api_key: str | None = None, timeout: float = 30.0, retry_seconds: float = 60.0
    ) -> None:
        self.where = url.rstrip("/")
        headers = {"X-API-Key": api_key} if api_key else {}
        self.client = httpx.Client(base_url=self.where, headers=headers, timeout=timeout)
        self.retry_seconds = retry_seconds

    def stream_info(self, stream: str) -> StreamInfo:
        try:
            r = self.client.get(f"/streams/{stream}")
        except httpx.HTTPError as e:
            raise SparkSourceError(f"cannot reach {self.where}: {e}", code="bad_source", field="url") from None
        if r.status_code == 404:
            return _info(None, "second", stream, self.where)
        if r.status_code != 200:
            raise SparkSourceError(f"{self.where}/streams/{stream} answered {r.status_code}: {r.text[:200]}")
        s = r.json()
        cols = tuple((a["name"], kind_of_name(a["type"])) for a in s["attrs"])
        target = Target(s["name"], s["kind"], cols, s.get("timestamp") == "system")
        return _info(target, s.get("time_unit") or "second", stream, self.where)

    def apply(self, stream: str, run_id: str, batch: Prepared) -> Applied:
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, batch.table.schema) as writer:
            writer.write_table(batch.table)
        body = sink.getvalue().to_pybytes()
        params: dict[str, Any] = {"late": "drop"}
        if batch.mark is not None:
            params["heartbeat"] = batch.mark
        headers = {"Content-Type": ARROW_STREAM, "Idempotency-Key": f"spark:{run_id}:{batch.batch_id}"}
        deadline = time.monotonic() + self.retry_seconds
        delay = 0.2
        while True:
            try:
                r = self.client.post(f"/streams/{stream}/tuples", content=body, params=params, headers=headers)
                if r.status_code < 500:
                    break
                problem = f"{r.status_code}: {r.text[:300]}"
            except httpx.HTTPError as e:
                problem = str(e) or type(e).__name__
            if time.monotonic() + delay > deadline:
                raise SparkSourceError(
                    f"push of batch {batch.batch_id} to {self.where} failed for {self.retry_seconds:g} s: {problem}"
                )
            time.sleep(delay)
            delay = min(delay * 2, 5.0)
        if r.status_code >= 400:
            raise SparkSourceError(f"{self.where} refused batch {batch.batch_id} of '{stream}': {r.text[:300]}")
        out = r.json()
        return Applied(int(out.get("accepted", 0)), int(out.get("late", 0)), bool(out.get("replayed", False)))

    def close(self) -> None:
        self.client.close()
