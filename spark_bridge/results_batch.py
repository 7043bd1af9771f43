"""`spark.read.format("cqlstream")`: a relation-valued query's current contents, read once.

One request (`snapshot=true&follow=false`) from the Spark task that reads the single partition: the
relation as `+1` rows stamped with the instant its results are final through (none when nothing is
final yet)."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, InputPartition

from cqlstream.spark_bridge.results_http import ResultsSourceError, problem_text
from cqlstream.spark_bridge.results_subscription import decode_elements


class CqlSnapshotReader(DataSourceReader):
    """Reads query `qid`'s snapshot from the server at `url` as record batches of `schema`."""

    def __init__(self, url: str, headers: dict[str, str], timeout: float, qid: int, schema: pa.Schema) -> None:
        self.url = url
        self.headers = headers
        self.timeout = timeout
        self.qid = qid
        self.schema = schema

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        params = {"format": "ndjson", "snapshot": "true", "follow": "false"}
        try:
            with httpx.Client(base_url=self.url, headers=self.headers, timeout=self.timeout) as client:
                r = client.get(f"/queries/{self.qid}/results", params=params)
        except httpx.HTTPError as e:
            raise ResultsSourceError(
                f"cannot read the contents of query {self.qid} at {self.url}: {type(e).__name__}: {e}"
            ) from e
        if r.status_code >= 400:
            raise ResultsSourceError(
                f"the server {self.url} refused the contents of query {self.qid}: {problem_text(r)}"
            )
        if not r.content.strip():
            return
        batch, events = decode_elements(r.content, self.schema)
        if events:
            raise ResultsSourceError(f"the contents of query {self.qid} at {self.url} ended early: {events[0]}")
        yield batch
