"""A Python client for the cqlstream HTTP API (httpx).

    from cqlstream.client import Client

    with Client("http://127.0.0.1:8000") as c:
        c.register_stream("register stream S (A integer, B float)")
        q = c.register_query("select A, count(*) from S [Range 10] group by A")
        c.push("S", [{"ts": 1, "A": 1, "B": 0.5}, {"ts": 2, "A": 1, "B": 1.5}])
        c.heartbeat("S", 10)
        for e in c.subscribe(q["id"], snapshot=True, follow=False):
            print(e.ts, e.sign, e.row)

Errors come back as exceptions carrying the server's problem document: `InvalidInput` (422, with
`row`/`field`, or `line`/`column`/`excerpt` for CQL), `BadRequest` (400), `NotFound` (404),
`Conflict` (409; `SnapshotUnavailable` and `QueryInactive` are kinds of it), `Unauthorized` (401),
`PayloadTooLarge` (413), `HistoryGone` (410, a resume older than what the server retains); `Lagged` ends a subscription whose consumer fell too far behind.
`subscribe(qid, snapshot="if_available")` falls back to the changes from now on when the engine
cannot snapshot the query.

The plan manager: `plan()` (the global plan as a graph, or `plan("text")`), `entities()`,
`entity(id)`, `set_knobs(id, **knobs)`, `peek(id, n)`.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal, NamedTuple, TypeAlias

import httpx

if TYPE_CHECKING:
    import pyarrow as pa

    # what a push takes: rows (dicts or lists), an Arrow table or record batch, or a body already encoded
    PushRows: TypeAlias = Iterable[Mapping[str, Any] | Sequence[Any]] | pa.Table | pa.RecordBatch | bytes | bytearray


class CqlstreamError(Exception):
    """An error reply; `problem` is the whole RFC 7807 document."""

    def __init__(self, status: int, problem: dict[str, Any]) -> None:
        self.status = status
        self.problem = problem
        self.code = problem.get("code", "error")
        self.detail = problem.get("detail", "")
        self.row = problem.get("row")
        self.field = problem.get("field")
        self.line = problem.get("line")
        self.column = problem.get("column")
        self.excerpt = problem.get("excerpt")
        msg = f"{status} {self.code}: {self.detail}"
        if self.excerpt:
            msg += "\n" + self.excerpt
        super().__init__(msg)


class BadRequest(CqlstreamError):
    pass


class Unauthorized(CqlstreamError):
    pass


class NotFound(CqlstreamError):
    pass


class Conflict(CqlstreamError):
    pass


class PayloadTooLarge(CqlstreamError):
    pass


class InvalidInput(CqlstreamError):
    pass


class SnapshotUnavailable(Conflict):
    """`snapshot=True` on a query whose plan shape the engine cannot snapshot in line with its results;
    subscribe without a snapshot for its changes from now on."""


class QueryInactive(Conflict):
    """The query is inactive: activate it (`set_active(qid, True)`) to stream its results."""


class HistoryGone(CqlstreamError):
    """`after=T` older than the results the server retains (410; `problem["oldest"]` is the smallest
    instant a resume may start after): resubscribe with `snapshot=True`."""


class Lagged(CqlstreamError):
    """The subscription fell too far behind and the server disconnected it."""


class ServerError(CqlstreamError):
    pass


_BY_STATUS = {
    400: BadRequest,
    401: Unauthorized,
    404: NotFound,
    409: Conflict,
    410: HistoryGone,
    413: PayloadTooLarge,
    415: BadRequest,
    422: InvalidInput,
}
_BY_CODE = {"snapshot_unavailable": SnapshotUnavailable, "query_inactive": QueryInactive}


class Element(NamedTuple):
    """One result element: timestamp, sign (+1 insert, -1 delete) and the tuple's values."""

    ts: int
    sign: int
    row: tuple[Any, ...]


def _raise_for(r: httpx.Response) -> None:
    if r.status_code < 400:
        return
    try:
        problem = r.json()
        if not isinstance(problem, dict):
            raise ValueError
    except ValueError:
        problem = {"code": "http_error", "detail": r.text[:500]}
    code = problem.get("code")
    cls = (_BY_CODE.get(code) if isinstance(code, str) else None) or _BY_STATUS.get(
        r.status_code, ServerError if r.status_code >= 500 else CqlstreamError
    )
    raise cls(r.status_code, problem)


class Client:
    def __init__(
        self,
        url: str = "http://127.0.0.1:8000",
        *,
        api_key: str | None = None,
        timeout: float = 60.0,
        api_key_header: str = "X-API-Key",
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        headers = {api_key_header: api_key} if api_key else {}
        self.http = httpx.Client(base_url=url.rstrip("/"), headers=headers, timeout=timeout, transport=transport)

    def close(self) -> None:
        self.http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _call(self, method: str, path: str, **kw: Any) -> Any:
        r = self.http.request(method, path, **kw)
        _raise_for(r)
        if r.status_code == 204 or not r.content:
            return None
        if r.headers.get("content-type", "").startswith("application/json"):
            return r.json()
        return r.text

    # ------------------------------------------------------------ streams and relations
    def register_stream(self, ddl_or_schema: str | dict[str, Any]) -> dict[str, Any]:
        """DDL text (`register stream S (A integer) with (slack = 2)`) or a JSON description
        `{name, kind, attrs: [{name, type}], options}`; relations too."""
        if isinstance(ddl_or_schema, str):
            return self._call(
                "POST", "/streams", content=ddl_or_schema.encode(), headers={"content-type": "text/plain"}
            )
        return self._call("POST", "/streams", json=ddl_or_schema)

    register_relation = register_stream

    def streams(self) -> list[dict[str, Any]]:
        return self._call("GET", "/streams")

    def stream(self, name: str) -> dict[str, Any]:
        return self._call("GET", f"/streams/{name}")

    def drop_stream(self, name: str) -> None:
        self._call("DELETE", f"/streams/{name}")

    def push(
        self,
        name: str,
        rows: PushRows,
        *,
        format: str = "ndjson",
        late: Literal["reject", "drop"] = "reject",
        heartbeat: int | None = None,
        idempotency_key: str | None = None,
    ) -> int:
        """Push rows (dicts `{ts, [sign], A, ...}` or lists `[ts, [sign], A, ...]`), a pyarrow
        Table/RecordBatch (sent as Arrow IPC), or bytes already in `format`. Whole push or an
        `InvalidInput` naming the row and field. Returns the number of tuples accepted.

        `late="drop"` drops (and counts) rows older than the stream's time instead of rejecting the
        push; `heartbeat=T` then advances the stream's time to T in the same request; with an
        `idempotency_key` a retry of the same push (same key) is not applied twice. `push_result`
        takes the same arguments and returns the whole reply (`late`, `replayed`)."""
        return int(
            self.push_result(
                name, rows, format=format, late=late, heartbeat=heartbeat, idempotency_key=idempotency_key
            )["accepted"]
        )

    def push_result(
        self,
        name: str,
        rows: PushRows,
        *,
        format: str = "ndjson",
        late: Literal["reject", "drop"] = "reject",
        heartbeat: int | None = None,
        idempotency_key: str | None = None,
    ) -> dict[str, Any]:
        """As `push`, returning the server's reply: `{source, accepted, late, replayed}`."""
        content, ctype = encode_rows(rows, format)
        headers = {"content-type": ctype}
        if idempotency_key is not None:
            headers["Idempotency-Key"] = idempotency_key
        params: dict[str, str] = {}
        if late != "reject":
            params["late"] = late
        if heartbeat is not None:
            params["heartbeat"] = str(int(heartbeat))
        return self._call("POST", f"/streams/{name}/tuples", content=content, headers=headers, params=params)

    def heartbeat(self, name: str, ts: int) -> None:
        self._call("POST", f"/streams/{name}/heartbeat", json={"ts": int(ts)})

    # ------------------------------------------------------------ queries and views
    def register_query(
        self, cql: str, name: str | None = None, seed_from: int | None = None, approximate: Any = None
    ) -> dict[str, Any]:
        """`seed_from` T: as if registered at instant T, from the server's log archive (--retain-log);
        `approximate`: "static" (or {mode, window_fraction, sample_percent}) approves static approximation."""
        body: dict[str, Any] = {"cql": cql}
        if name is not None:
            body["name"] = name
        if seed_from is not None:
            body["seed_from"] = int(seed_from)
        if approximate is not None:
            body["approximate"] = approximate
        return self._call("POST", "/queries", json=body)

    def queries(self) -> list[dict[str, Any]]:
        return self._call("GET", "/queries")

    def query(self, qid: int) -> dict[str, Any]:
        return self._call("GET", f"/queries/{qid}")

    def set_active(self, qid: int, active: bool) -> dict[str, Any]:
        return self._call("PATCH", f"/queries/{qid}", json={"active": bool(active)})

    def set_weight(self, qid: int, weight: float) -> dict[str, Any]:
        return self._call("PATCH", f"/queries/{qid}", json={"weight": float(weight)})

    def deregister(self, qid: int) -> None:
        self._call("DELETE", f"/queries/{qid}")

    def register_view(self, cql: str) -> dict[str, Any]:
        return self._call("POST", "/views", json={"cql": cql})

    def views(self) -> list[dict[str, Any]]:
        return self._call("GET", "/views")

    def drop_view(self, name: str) -> None:
        self._call("DELETE", f"/views/{name}")

    # ------------------------------------------------------------ results
    def subscribe(
        self,
        qid: int,
        *,
        snapshot: bool | str = False,
        follow: bool = True,
        limit: int | None = None,
        until: int | None = None,
        buffer: int | None = None,
        after: int | None = None,
    ) -> Iterator[Element]:
        """Result elements as they become final (NDJSON underneath). Ends when the stream ends
        (`follow=False` after the snapshot, `limit`/`until` reached, query deregistered or
        deactivated); raises `Lagged` if the server dropped this subscriber for falling behind.
        With `snapshot=True` a relation-valued query's stream starts with its current relation as
        `+` elements stamped with one instant, then its changes after that instant; raises
        `SnapshotUnavailable` when the engine cannot give that snapshot for the query;
        `snapshot="if_available"` then subscribes without it (the changes from now on).
        With `after=T` the stream resumes: every element with ts > T (the last instant seen), then the
        live ones; raises `HistoryGone` when the server no longer retains them (resubscribe with
        `snapshot=True`)."""
        params = {"format": "ndjson", "follow": str(bool(follow)).lower()}
        for k, v in (("limit", limit), ("until", until), ("buffer", buffer), ("from", after)):
            if v is not None:
                params[k] = str(v)
        for r in self._results(qid, params, snapshot):
            for line in r.iter_lines():
                if not line:
                    continue
                obj = json.loads(line)
                ev = obj.get("event")
                if ev is None:
                    yield Element(obj["ts"], obj["sign"], tuple(obj["row"]))
                elif ev == "lagged":
                    raise Lagged(200, {"code": "lagged", "detail": obj.get("detail", "lagged")})
                elif ev == "end":
                    return

    def stream_raw(self, qid: int, format: str = "ndjson", **params: Any) -> Iterator[bytes]:
        """The raw result stream in any registered result format (`cqlstream.io.formats.RESULT_FORMATS`:
        ndjson, json, sse, xml, ...), chunk by chunk (`snapshot` as in `subscribe`)."""
        snapshot = params.pop("snapshot", False)
        params = {
            "format": format,
            **{k: (str(v).lower() if isinstance(v, bool) else str(v)) for k, v in params.items()},
        }
        for r in self._results(qid, params, snapshot):
            yield from r.iter_bytes()

    def _results(self, qid: int, params: dict[str, str], snapshot: bool | str) -> Iterator[httpx.Response]:
        """The open results response (once), falling back to no snapshot for `"if_available"`."""
        if snapshot not in (True, False, "if_available"):
            raise ValueError(f"snapshot is True, False or 'if_available', not {snapshot!r}")
        timeout = httpx.Timeout(self.http.timeout.connect, read=None)
        tries = [True, False] if snapshot == "if_available" else [bool(snapshot)]
        for i, snap in enumerate(tries):
            with self.http.stream(
                "GET", f"/queries/{qid}/results", params={**params, "snapshot": str(snap).lower()}, timeout=timeout
            ) as r:
                if r.status_code >= 400:
                    r.read()
                    try:
                        _raise_for(r)
                    except SnapshotUnavailable:
                        if i + 1 < len(tries):
                            continue
                        raise
                yield r
                return

    # ------------------------------------------------------------ Spark sources
    def add_spark_source(self, spec: str | dict[str, Any]) -> dict[str, Any]:
        """Start a Spark source on the server: the one-line form (`Orders=csv:/data/orders`) or a
        JSON definition `{stream, format, path, options, ...}`."""
        if isinstance(spec, str):
            return self._call("POST", "/spark/sources", content=spec.encode(), headers={"content-type": "text/plain"})
        return self._call("POST", "/spark/sources", json=spec)

    def spark_sources(self) -> list[dict[str, Any]]:
        return self._call("GET", "/spark/sources")

    def spark_source(self, stream: str) -> dict[str, Any]:
        return self._call("GET", f"/spark/sources/{stream}")

    def remove_spark_source(self, stream: str) -> None:
        self._call("DELETE", f"/spark/sources/{stream}")

    # ------------------------------------------------------------ control tables, service
    def entities(self) -> list[dict[str, Any]]:
        return self._call("GET", "/entities")

    def entity(self, entity_id: str) -> dict[str, Any]:
        return self._call("GET", f"/entities/{entity_id}")

    def set_knobs(self, entity_id: str, **knobs: Any) -> dict[str, Any]:
        return self._call("PATCH", f"/entities/{entity_id}", json={"knobs": knobs})

    def peek(self, entity_id: str, n: int = 20) -> dict[str, Any]:
        """The last `n` tuples entering a queue or source, a window's or store's contents, or an
        operator's last outputs: `{"id", "what", "tuples": [{"ts", "sign", "row"}]}`."""
        return self._call("GET", f"/entities/{entity_id}/peek", params={"n": n})

    def plan(self, format: str = "json") -> dict[str, Any] | str:
        """The global plan: a graph `{"nodes": [control tables], "edges": [{"queue", "from", "to",
        "queries"}]}`, or EXPLAIN-style text with `format="text"`."""
        return self._call("GET", "/plan", params={"format": format})

    def metrics(self) -> str:
        return self._call("GET", "/metrics")

    def health(self) -> dict[str, Any]:
        return self._call("GET", "/healthz")


def encode_rows(rows: PushRows, format: str = "ndjson") -> tuple[bytes, str]:
    """(body, content type) for a push in a registered ingest format (`format` names it; a pyarrow
    Table/RecordBatch is always sent as Arrow IPC, bytes as they are)."""
    import pyarrow as pa

    from cqlstream.io.decoders import ArrowStream
    from cqlstream.io.formats import INGEST_FORMATS

    if isinstance(rows, (pa.Table, pa.RecordBatch)):
        return ArrowStream().encode_rows(rows), ArrowStream.media_type
    if format not in INGEST_FORMATS:
        raise ValueError(f"unknown format '{format}' ({', '.join(INGEST_FORMATS.names())}; or pass a pyarrow Table)")
    fmt = INGEST_FORMATS[format]
    if isinstance(rows, (bytes, bytearray)):
        return bytes(rows), fmt.media_type
    return fmt.encode_rows(rows), fmt.media_type
