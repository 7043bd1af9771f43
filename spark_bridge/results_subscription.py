"""One subscription to a query's results, read by a daemon thread into memory: the elements arrive as
NDJSON (`GET /queries/{id}/results`) and are kept as Arrow record batches, each element known by its
position in this subscription (0, 1, 2, ...). Positions are the Spark source's offsets: a micro-batch
is a range of positions, served again on request until Spark commits it.

The buffer lives in this process only; `run` (a random token) tells this subscription's positions
from those of an earlier one."""

from __future__ import annotations

import bisect
import json
import threading
import uuid
from typing import Any

import httpx
import pyarrow as pa

from cqlstream.spark_bridge.results_http import ResultsSourceError, problem_text


def decode_elements(block: bytes, schema: pa.Schema) -> tuple[pa.RecordBatch, list[dict[str, Any]]]:
    """Whole NDJSON lines of a results stream as one record batch of `schema` (time, sign, then the
    row's values by position), and the control messages (`{"event": ...}`) among them."""
    objs = json.loads(b"[" + block.rstrip(b"\n").replace(b"\n", b",") + b"]")  # one parse per block
    events: list[dict[str, Any]] = []
    if b'"event"' in block:  # rare: split off control messages (a value may merely contain the word)
        events = [o for o in objs if "event" in o]
        objs = [o for o in objs if "event" not in o]
    width = len(schema) - 2
    rows = [o["row"] for o in objs]
    if any(len(r) != width for r in rows):
        raise ResultsSourceError(f"a result row does not have the {width} columns of the schema {schema.names[2:]}")
    arrays = [
        pa.array([o["ts"] for o in objs], schema.field(0).type),
        pa.array([o["sign"] for o in objs], schema.field(1).type),
        # a comprehension per column (zip(*rows) is several times slower on long blocks)
        *(pa.array([r[i] for r in rows], schema.field(i + 2).type) for i in range(width)),
    ]
    return pa.RecordBatch.from_arrays(arrays, schema=schema), events


class ResultsSubscription:
    """A query's results from the moment `start()` subscribes (with `snapshot`: the query's current
    relation first), buffered until `release()`. The reading thread stops taking data while
    `max_buffered` elements wait unreleased (the server then lags this subscriber if it persists)."""

    def __init__(
        self,
        client: httpx.Client,
        url: str,
        qid: int,
        params: dict[str, str],
        schema: pa.Schema,
        *,
        open_timeout: float,
        max_buffered: int,
        fallback_params: dict[str, str] | None = None,
    ) -> None:
        self.client = client
        self.url = url
        self.qid = qid
        self.params = params
        self.fallback_params = fallback_params  # retried once when the server cannot give a snapshot
        self.schema = schema
        self.open_timeout = open_timeout
        self.max_buffered = max_buffered
        self.run = uuid.uuid4().hex
        self._cond = threading.Condition()
        self._batches: list[pa.RecordBatch] = []
        self._starts: list[int] = []  # position of each batch's first element
        self._received = 0
        self._released = 0
        self._ended: str | None = None  # why the stream ended (nothing more will arrive)
        self._closing = False
        self._opened = threading.Event()
        self._open_error: str | None = None
        self._thread = threading.Thread(target=self._run, name=f"cqlstream-results-{qid}", daemon=True)

    # ------------------------------------------------------------ the caller's side
    def start(self) -> None:
        """Subscribe; a ResultsSourceError if the server refuses or does not answer in `open_timeout` seconds."""
        self._thread.start()
        if not self._opened.wait(self.open_timeout):
            self.close()
            raise ResultsSourceError(
                f"no reply from {self.url} to the results subscription of query {self.qid} "
                f"within {self.open_timeout:g} s"
            )
        if self._open_error is not None:
            raise ResultsSourceError(self._open_error)

    def available(self) -> int:
        """The number of elements received so far (the positions 0 .. available-1)."""
        with self._cond:
            return self._received

    def first_held(self) -> int:
        """The position of the first element not yet released."""
        with self._cond:
            return self._released

    def ended(self) -> str | None:
        """Why the results stream ended, or None while it runs."""
        with self._cond:
            return self._ended

    def slice(self, begin: int, end: int) -> list[pa.RecordBatch]:
        """The elements at positions [begin, end) as one record batch (none when the range is empty)."""
        if end <= begin:
            return []
        with self._cond:
            if begin < self._released or end > self._received:
                raise ResultsSourceError(
                    f"results {begin}..{end} of query {self.qid} are not held (held: {self._released}..{self._received})"
                )
            i = bisect.bisect_right(self._starts, begin) - 1
            pieces = []
            while i < len(self._batches) and self._starts[i] < end:
                b, s = self._batches[i], self._starts[i]
                lo, hi = max(begin - s, 0), min(end - s, b.num_rows)
                pieces.append(b.slice(lo, hi - lo))
                i += 1
        return [pieces[0] if len(pieces) == 1 else pa.concat_batches(pieces)]

    def release(self, upto: int) -> None:
        """Forget the elements before position `upto` (Spark committed them)."""
        with self._cond:
            self._released = max(self._released, min(upto, self._received))
            keep = bisect.bisect_right(self._starts, self._released) - 1  # the first batch still needed
            if keep >= 0 and self._released >= self._starts[keep] + self._batches[keep].num_rows:
                keep += 1
            if keep > 0:
                del self._batches[:keep], self._starts[:keep]
            self._cond.notify_all()

    def close(self) -> None:
        """Stop reading (the thread leaves at its next chunk; the connection closes with it)."""
        with self._cond:
            self._closing = True
            self._cond.notify_all()

    # ------------------------------------------------------------ the reading thread
    def _run(self) -> None:
        try:
            for params in (self.params, self.fallback_params):
                if params is None:
                    break
                if self._subscribe(params):
                    return
        except Exception as e:  # any failure ends the subscription, with its reason
            why = f"the results stream of query {self.qid} at {self.url} failed: {type(e).__name__}: {e}"
            if not self._opened.is_set():
                self._open_error = why
            self._end(why)
        finally:
            self._opened.set()
            self.client.close()

    def _subscribe(self, params: dict[str, str]) -> bool:
        """Read one results response to its end; False when it was refused for want of a snapshot
        and a fallback is to be tried."""
        timeout = httpx.Timeout(self.open_timeout, read=None)  # results may be minutes apart
        with self.client.stream("GET", f"/queries/{self.qid}/results", params=params, timeout=timeout) as r:
            if r.status_code >= 400:
                r.read()
                retry = self.fallback_params is not None and params is not self.fallback_params
                if retry and r.status_code == 409 and "snapshot_unavailable" in r.text:
                    return False
                self._open_error = f"the server {self.url} refused the results of query {self.qid}: {problem_text(r)}"
                self._end(self._open_error)
                return True
            self._opened.set()
            pending = bytearray()
            for data in r.iter_bytes():
                pending += data
                cut = pending.rfind(b"\n")
                if cut < 0:
                    continue
                block = bytes(pending[: cut + 1])
                del pending[: cut + 1]
                if not self._take(block):
                    return True
            self._end(f"the server {self.url} closed the results stream of query {self.qid}")
            return True

    def _take(self, block: bytes) -> bool:
        """Buffer a block of elements; False once the stream is over (a control message, or closing)."""
        batch, events = decode_elements(block, self.schema)
        with self._cond:
            while batch.num_rows and self._received - self._released >= self.max_buffered and not self._closing:
                self._cond.wait(1.0)
            if self._closing:
                return False
            if batch.num_rows:
                self._batches.append(batch)
                self._starts.append(self._received)
                self._received += batch.num_rows
        for ev in events:
            kind = ev.get("event")
            if kind in ("end", "lagged"):
                self._end(
                    f"the results stream of query {self.qid} at {self.url} ended ({kind}): {ev.get('detail', '')}"
                )
                return False
        return True

    def _end(self, why: str) -> None:
        with self._cond:
            if self._ended is None:
                self._ended = why
            self._cond.notify_all()
