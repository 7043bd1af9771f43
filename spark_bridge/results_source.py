"""A registered query's results as a Spark streaming DataFrame: the Python data source `cqlstream`.

    from cqlstream.spark_bridge.results_source import CqlResultsSource
    spark.dataSource.register(CqlResultsSource)
    df = (spark.readStream.format("cqlstream")
          .option("url", "http://127.0.0.1:8000").option("query", "big_orders").load())
    df.writeStream.format("parquet").option("path", out).option("checkpointLocation", ckpt).start()

Rows are `ts` (long), `sign` (int: +1 insert, -1 delete), then the query's output columns
(result_schema.py maps their types). A relation-valued query starts, by default, with its current
contents (`+` elements stamped with the instant they are final through), then its changes; a
stream-valued query gives its elements from the moment the stream starts.

How it reads: Spark's simple stream reader runs on the driver. Its first call opens one NDJSON
subscription, which a daemon thread reads into memory (results_subscription.py); an offset is the
number of elements of that subscription, a micro-batch a range of them, served as one Arrow record
batch and kept until Spark commits it.

`spark.read.format("cqlstream")` (a batch read) gives a relation-valued query's current contents
instead (results_batch.py).

Spark runs a Python data source in worker processes it starts with `PYSPARK_PYTHON` (default
`python3`): that interpreter needs cqlstream installed.

Restarts: the buffer is in memory, so a restarted Spark query (same checkpoint) does not resume
from its checkpointed offset. It subscribes anew and continues with the query's current snapshot
(relations) or its elements from then on (streams); a micro-batch that was planned but not
committed before the restart is replayed empty. Exact resumption needs a server that can resume a
subscriber from an instant.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import httpx
from pyspark.sql.datasource import DataSource, SimpleDataSourceStreamReader
from pyspark.sql.types import StructType

from cqlstream.spark_bridge.result_schema import arrow_schema, results_schema
from cqlstream.spark_bridge.results_batch import CqlSnapshotReader
from cqlstream.spark_bridge.results_http import QueryInfo, ResultsSourceError, describe_query
from cqlstream.spark_bridge.results_subscription import ResultsSubscription

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

SNAPSHOT_CHOICES = ("true", "false", "if_available")


def _positive_int(name: str, text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        n = 0
    if n <= 0:
        raise ValueError(f"option '{name}' must be a positive integer, not {text!r}")
    return n


def _positive_float(name: str, text: str) -> float:
    try:
        x = float(text)
    except ValueError:
        x = 0.0
    if not x > 0:
        raise ValueError(f"option '{name}' must be a positive number of seconds, not {text!r}")
    return x


def _snapshot(name: str, text: str) -> str:
    v = text.strip().lower()
    if v not in SNAPSHOT_CHOICES:
        raise ValueError(f"option '{name}' is one of {', '.join(SNAPSHOT_CHOICES)}, not {text!r}")
    return v


def _text(name: str, text: str) -> str:
    return text


# option (as Spark passes it, case-insensitively) -> (field of ResultsOptions, parser)
_OPTIONS: dict[str, tuple[str, Callable[[str, str], Any]]] = {
    "url": ("url", _text),
    "query": ("query", _text),
    "api_key": ("api_key", _text),
    "api_key_header": ("api_key_header", _text),
    "snapshot": ("snapshot", _snapshot),
    "maxrowspertrigger": ("max_rows_per_trigger", _positive_int),
    "maxbufferedrows": ("max_buffered_rows", _positive_int),
    "timeout": ("timeout", _positive_float),
    "tscolumn": ("ts_column", _text),
    "signcolumn": ("sign_column", _text),
}


@dataclass(frozen=True)
class ResultsOptions:
    """The options of a `cqlstream` read.

    - `url` (required): the cqlstream server; `query` (required): a query id or registered name.
    - `api_key`, `api_key_header`: sent with every request when the server wants a key.
    - `snapshot`: `true` (relations start with their current contents; refused when the engine cannot
      snapshot the query), `false` (changes from now on), `if_available` (a snapshot when possible).
    - `maxRowsPerTrigger`: at most this many elements per micro-batch (default: all that arrived).
    - `maxBufferedRows`: elements held before the reading thread waits for Spark to commit.
    - `timeout`: seconds any request may take to connect or answer (the stream itself may idle).
    - `tsColumn`, `signColumn`: the names of the time and sign columns.
    """

    url: str
    query: str
    api_key: str | None = None
    api_key_header: str = "X-API-Key"
    snapshot: str = "true"
    max_rows_per_trigger: int | None = None
    max_buffered_rows: int = 1_000_000
    timeout: float = 10.0
    ts_column: str = "ts"
    sign_column: str = "sign"

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> ResultsOptions:
        """From Spark's options; a ValueError names a missing, unknown or malformed one."""
        fields: dict[str, Any] = {}
        unknown = []
        for key, value in options.items():
            entry = _OPTIONS.get(key.lower())
            if entry is None:
                unknown.append(key)
                continue
            fields[entry[0]] = entry[1](key, str(value))
        if unknown:
            raise ValueError(
                f"unknown option(s) of the cqlstream source: {', '.join(unknown)} (known: {', '.join(_OPTIONS)})"
            )
        for required in ("url", "query"):
            if not fields.get(required, "").strip():
                raise ValueError(f"the cqlstream source needs the option '{required}'")
        fields["url"] = fields["url"].strip().rstrip("/")
        return cls(**fields)

    def batch_schema(self, info: QueryInfo, schema: StructType) -> pa.Schema:
        """The Arrow schema of the batches for `schema`, or an error naming the query and the server."""
        try:
            return arrow_schema(schema, info.columns)
        except ValueError as e:
            raise ResultsSourceError(f"query '{self.query}' at {self.url}: {e}") from e

    def headers(self) -> dict[str, str]:
        return {self.api_key_header: self.api_key} if self.api_key else {}

    def client(self) -> httpx.Client:
        return httpx.Client(base_url=self.url, headers=self.headers(), timeout=self.timeout)

    def subscription_params(self) -> tuple[dict[str, str], dict[str, str] | None]:
        """The results request's parameters, and those to retry with when no snapshot can be had."""
        base = {"format": "ndjson", "follow": "true"}
        if self.snapshot == "false":
            return {**base, "snapshot": "false"}, None
        fallback = {**base, "snapshot": "false"} if self.snapshot == "if_available" else None
        return {**base, "snapshot": "true"}, fallback


class CqlResultsSource(DataSource):
    """The Spark data source `cqlstream`: a registered query's results as a stream (see the module
    docstring for options, rows and what a restart gives). The query is looked up when Spark asks
    for the schema, so an unknown query or an unreachable server fails `load()`."""

    def __init__(self, options: dict[str, str]) -> None:
        super().__init__(options)
        self.config = ResultsOptions.parse(options)
        self.info: QueryInfo | None = None  # travels with the pickled source to Spark's planner

    @classmethod
    def name(cls) -> str:
        return "cqlstream"

    def query_info(self) -> QueryInfo:
        if self.info is None:
            with self.config.client() as client:
                self.info = describe_query(client, self.config.url, self.config.query)
        return self.info

    def schema(self) -> StructType:
        info = self.query_info()
        try:
            return results_schema(info.columns, self.config.ts_column, self.config.sign_column)
        except ValueError as e:
            raise ResultsSourceError(f"query '{self.config.query}' at {self.config.url}: {e}") from e

    def simpleStreamReader(self, schema: StructType) -> CqlResultsReader:
        return CqlResultsReader(self.config, self.query_info(), schema)

    def reader(self, schema: StructType) -> CqlSnapshotReader:
        """`spark.read.format("cqlstream")`: the current contents of a relation-valued query."""
        info = self.query_info()
        if info.kind != "relation":
            raise ResultsSourceError(
                f"query '{self.config.query}' at {self.config.url} is stream-valued: it has no contents to read "
                "as a batch; read its elements with spark.readStream"
            )
        return CqlSnapshotReader(
            self.config.url, self.config.headers(), self.config.timeout, info.id, self.config.batch_schema(info, schema)
        )


def _offset(run: str, n: int) -> dict[str, Any]:
    return {"run": run, "n": n}


class CqlResultsReader(SimpleDataSourceStreamReader):
    """Offsets `{"run": token, "n": count}`: the first `n` elements of the subscription `run`. Spark
    may build this reader in processes that never read (its executors, to replay after a restart):
    the subscription opens at the first offset asked for, and is not pickled."""

    def __init__(self, config: ResultsOptions, info: QueryInfo, schema: StructType) -> None:
        self.config = config
        self.info = info
        self.arrow_schema: pa.Schema = config.batch_schema(info, schema)
        self._sub: ResultsSubscription | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_sub": None}

    def subscription(self) -> ResultsSubscription:
        if self._sub is None:
            params, fallback = self.config.subscription_params()
            sub = ResultsSubscription(
                self.config.client(),
                self.config.url,
                self.info.id,
                params,
                self.arrow_schema,
                open_timeout=self.config.timeout,
                max_buffered=self.config.max_buffered_rows,
                fallback_params=fallback,
            )
            sub.start()
            self._sub = sub
        return self._sub

    def initialOffset(self) -> dict[str, Any]:
        return _offset(self.subscription().run, 0)

    def _position(self, offset: dict[str, Any], sub: ResultsSubscription) -> int:
        """Where `offset` stands in this subscription: an offset of an earlier run (a restarted
        Spark query) stands at the first element not yet committed (at a fresh start: the first)."""
        if offset.get("run") == sub.run:
            return int(offset["n"])
        log.warning(
            "query %s at %s: offset %s is from an earlier subscription; continuing with a new one "
            "(a relation restarts with its current snapshot)",
            self.info.id,
            self.config.url,
            offset,
        )
        return sub.first_held()

    def read(self, start: dict[str, Any]) -> tuple[Iterator[Any], dict[str, Any]]:
        sub = self.subscription()
        begin = self._position(start, sub)
        end = sub.available()
        if self.config.max_rows_per_trigger is not None:
            end = min(end, begin + self.config.max_rows_per_trigger)
        if end <= begin:
            why = sub.ended()
            if why is not None and begin >= sub.available():
                raise ResultsSourceError(why)
            return iter([]), start if start.get("run") == sub.run else _offset(sub.run, begin)
        # a list iterator: Spark copies it (copy.copy) to serve the batch more than once
        return iter(sub.slice(begin, end)), _offset(sub.run, end)

    def readBetweenOffsets(self, start: dict[str, Any], end: dict[str, Any]) -> Iterator[Any]:
        sub = self._sub
        if sub is None or end.get("run") != sub.run:
            log.warning(
                "query %s at %s: the results %s..%s were held by an earlier subscription and are gone; "
                "the batch is replayed empty",
                self.info.id,
                self.config.url,
                start,
                end,
            )
            return iter([])
        begin = int(start["n"]) if start.get("run") == sub.run else sub.first_held()
        return iter(sub.slice(begin, int(end["n"])))

    def commit(self, end: dict[str, Any]) -> None:
        if self._sub is not None and end.get("run") == self._sub.run:
            self._sub.release(int(end["n"]))

    def stop(self) -> None:
        if self._sub is not None:
            self._sub.close()


def register(spark: SparkSession) -> None:
    """Make `spark.readStream.format("cqlstream")` available in this Spark session."""
    spark.dataSource.register(CqlResultsSource)


__all__ = ["CqlResultsReader", "CqlResultsSource", "ResultsOptions", "ResultsSourceError", "register"]
