"""`spark-run --sink server:URL/STREAM`: each micro-batch of a distributed run's results pushed into a
stream registered on a cqlstream server through `HttpSink` (one Arrow IPC push per batch, idempotency
key `spark:<query id>:<batch id>`, so a batch Spark replays is applied once), where the server's
subscribers and queries over that stream see them. A relation-valued query's elements keep their
sign in an int column `sign` the target stream must declare; a stream-valued query's may omit it."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from cqlstream.spark_bridge.errors import SparkSourceError
from cqlstream.spark_bridge.prepare import Prepared
from cqlstream.spark_bridge.scale_out import ScaleOutPlan
from cqlstream.spark_bridge.sinks import HttpSink

PREFIX = "server:"
START_WAIT = 120.0  # seconds a batch waits for the streaming query's id (set just after it starts)


@dataclass(frozen=True)
class ServerTarget:
    """Where results go: the server's URL and the stream's name (`server:http://host:port/Stream`)."""

    url: str
    stream: str

    @classmethod
    def parse(cls, sink: str) -> ServerTarget:
        url, _, stream = sink[len(PREFIX) :].rstrip("/").rpartition("/")
        if not url.startswith(("http://", "https://")) or not stream:
            raise SparkSourceError(f"'{sink}' is not server:URL/STREAM (e.g. server:http://127.0.0.1:8000/Totals)")
        return cls(url, stream)


def push_fields(plan: ScaleOutPlan, fields: tuple[str, ...], where: str) -> tuple[str, ...]:
    """The target stream's fields, each one a result column (or `sign`), or the error saying what
    does not match: the stream declares exactly the query's columns, plus `sign` when relation-valued."""
    have = {f.lower() for f in fields}
    want = {n.lower() for n, _ in plan.output}
    if plan.relation and "sign" not in have:
        raise SparkSourceError(
            f"the query is relation-valued (its results delete with sign -1): declare an int column "
            f"'sign' on {where} to receive them"
        )
    extra, missing = sorted(have - want - {"sign"}), sorted(want - have)
    if extra or missing:
        problems = [f"{what} {', '.join(names)}" for what, names in (("missing", missing), ("extra", extra)) if names]
        columns = ", ".join(n for n, _ in plan.output)
        raise SparkSourceError(f"{where} does not match the query's columns ({columns}): {'; '.join(problems)}")
    return fields


class ServerResultSink:
    """A `foreachBatch` function: a batch's result rows sorted by ts, pushed with heartbeat max ts + 1
    (every bucket emits an instant in the same micro-batch, so the last instant of a batch is final)."""

    def __init__(self, plan: ScaleOutPlan, target: ServerTarget, api_key: str | None = None) -> None:
        self.target = target
        self.http = HttpSink(target.url, api_key=api_key)
        info = self.http.stream_info(target.stream)  # a missing stream or a server that does not answer: now
        if info.target.relation:
            raise SparkSourceError(f"'{target.stream}' on {target.url} is a relation: results go into a stream")
        where = f"stream '{target.stream}' on {target.url}"
        self.fields = push_fields(plan, tuple(c for c, _ in info.target.columns), where)
        self.columns = {n.lower(): n for n, _ in plan.output} | {"sign": "sign"}
        self._query: Any = None
        self._started = threading.Event()
        self.pushed = 0  # batches applied (not replays)

    def started(self, query: Any) -> None:
        """The streaming query writing here: its id names the batches."""
        self._query = query
        self._started.set()

    def __call__(self, df: Any, batch_id: int) -> None:
        table = df.toArrow()
        if not table.num_rows:
            return
        if not self._started.wait(START_WAIT) or self._query is None:
            raise SparkSourceError("the results' streaming query did not start")
        ts = np.asarray(table.column("ts").to_numpy(), np.int64)
        order = pa.array(np.argsort(ts, kind="stable"))
        data = {"ts": pa.array(ts).take(order)}
        for f in self.fields:
            data[f] = table.column(self.columns[f.lower()]).take(order)
        prepared = Prepared(int(batch_id), pa.table(data), int(ts.max()) + 1)
        done = self.http.apply(self.target.stream, str(self._query.id), prepared)
        if done.late:  # a result row older than the stream's time there: it did not arrive
            raise SparkSourceError(
                f"{self.target.url} dropped {done.late} result row(s) of batch {batch_id} as late: "
                f"'{self.target.stream}' was fed past ts {int(ts.min())} by another producer"
            )
        if not done.replayed:
            self.pushed += 1

    def close(self) -> None:
        self.http.close()
