"""Routes for continuous queries and views, and the streaming results of a query."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from fastapi import APIRouter, Depends, Header, Path, Query, Request, Response
from starlette.concurrency import run_in_threadpool

from cqlstream.io.formats import RESULT_FORMATS, default_result_format
from cqlstream.server.bodies import content_type, is_json, json_data, json_model, request_body, validated
from cqlstream.server.models import NAME_PATTERN, QueryIn, QueryOut, QueryPatch, ViewIn, ViewOut
from cqlstream.server.problems import ProblemError, responses
from cqlstream.server.results import ResultsResponse

if TYPE_CHECKING:
    from cqlstream.server.host import EngineHost

QueryId = Path(ge=1, le=(1 << 62), description="query id")
ViewName = Path(pattern=NAME_PATTERN, max_length=128, description="view name (case-insensitive)")


E = TypeVar("E", bound=Callable[..., Any])

# Content types whose body is the CQL text itself (the query's name then comes from `?name=`).
CQL_TEXT_TYPES = ("text/plain", "application/sql", "text/x-cql")

_QUERY_BODY = {
    "required": True,
    "content": {
        "application/json": {"schema": QueryIn.model_json_schema()},
        "text/plain": {"schema": {"type": "string", "minLength": 1, "example": "select * from S where A > 10"}},
    },
}


def query_of(body: bytes, ctype: str, params: Mapping[str, str]) -> QueryIn:
    """The registration body (parsed in a worker thread, server/bodies.py): CQL text (`text/plain`,
    name and seed_from from the query string) or JSON `{cql, name, seed_from}`, validated as a typed
    FastAPI body would be (same problem replies)."""
    if ctype in CQL_TEXT_TYPES:
        try:
            text = body.decode("utf-8")
        except UnicodeDecodeError:
            raise ProblemError(400, "malformed_body", "CQL text must be UTF-8") from None
        data: Any = {"cql": text, "name": params.get("name")}
        if "seed_from" in params:
            data["seed_from"] = params["seed_from"]
        if "approximate" in params:
            data["approximate"] = params["approximate"]
    elif is_json(ctype):
        data = json_data(body)
    else:
        raise ProblemError(
            415,
            "unsupported_media_type",
            f"unsupported Content-Type '{ctype}'; send CQL as text/plain or JSON {{cql, name}} as application/json",
        )
    return validated(QueryIn, data)


def _format_choices(endpoint: E) -> E:
    """Type the endpoint's `format` parameter as one of the registered result format names, so
    FastAPI validates it and OpenAPI lists them (read when the app is built)."""
    endpoint.__annotations__["format"] = Literal[RESULT_FORMATS.names()] | None
    return endpoint


def _last_event_id(value: str | None) -> int | None:
    """An SSE `Last-Event-ID` header as the instant to resume after (our event ids are instants)."""
    if value is None or not value.strip():
        return None
    try:
        t = int(value.strip())
    except ValueError:
        raise ProblemError(
            422, "invalid_request", f"Last-Event-ID {value!r} is not an instant (an integer timestamp)"
        ) from None
    if abs(t) > 1 << 62:
        raise ProblemError(422, "invalid_request", f"Last-Event-ID {t} is out of range")
    return t


def router(host: EngineHost, auth: Callable[..., Awaitable[None]]) -> APIRouter:
    r = APIRouter()
    mutating = [Depends(auth)]
    # the result formats as the registry has them when the app is built
    result_content = {f.media_type: f.openapi for f in RESULT_FORMATS}

    # ------------------------------------------------------------ queries
    @r.post(
        "/queries",
        status_code=201,
        response_model=QueryOut,
        response_model_by_alias=True,
        dependencies=mutating,
        tags=["queries"],
        summary="Register a continuous query",
        description="Replies with the query's id, result kind (stream or relation), schema, EXPLAIN text and "
        "completeness: `complete_from` (the instant its results are exact from; null: from the "
        "start) and `complete` (false when it started late over a window needing history nothing "
        "kept). The query merges into the running global plan (`GET /plan`), sharing what it can. "
        "CQL errors carry `line`, `column` and a caret `excerpt`. The body is JSON `{cql, name}`, or the "
        "CQL text itself (`text/plain`) with the optional name as the `name` query parameter. "
        "`seed_from: T` registers the query as if at instant T, from the log archive (a server with "
        "`--data-dir` and `--retain-log`): its windows and state are built from the input since T (relations: "
        "their whole history), its results from T on are retained for `from=` resumes, then it runs live; "
        "409 `no_archive` / `archive_incomplete` without a whole archive, 422 `before_archive` / "
        "`seed_in_future` for a T outside it (the reply names the earliest / latest instant). "
        "`approximate: static` approves static approximation within the query's TOLERATE clauses "
        "(docs/approximation.md); the reply's `static_approximation` lists the rewrites in force.",
        openapi_extra={
            "requestBody": _QUERY_BODY,
            "parameters": [
                {
                    "name": "name",
                    "in": "query",
                    "required": False,
                    "description": "the query's name, with a `text/plain` body",
                    "schema": {"type": "string", "pattern": NAME_PATTERN, "maxLength": 128},
                },
                {
                    "name": "seed_from",
                    "in": "query",
                    "required": False,
                    "description": "with a `text/plain` body: the body field `seed_from`",
                    "schema": {"type": "integer"},
                },
                {
                    "name": "approximate",
                    "in": "query",
                    "required": False,
                    "description": "with a `text/plain` body: the body field `approximate` (`exact` or `static`)",
                    "schema": {"type": "string", "enum": ["exact", "static"]},
                },
            ],
        },
        responses=responses(400, 401, 409, 413, 415, 422),
    )
    async def create_query(request: Request, response: Response) -> dict[str, Any]:
        body, ctype, params = await request.body(), content_type(request), dict(request.query_params)

        def register() -> dict[str, Any]:  # parsed and registered in one worker-thread call
            q = query_of(body, ctype, params)
            return host.register_query(q.cql, q.name, q.seed_from, approximate=q.approximate)

        out = await run_in_threadpool(register)
        response.headers["Location"] = f"/queries/{out['id']}"
        return out

    @r.get(
        "/queries",
        response_model=list[QueryOut],
        response_model_by_alias=True,
        tags=["queries"],
        summary="List queries",
    )
    async def list_queries() -> list[dict[str, Any]]:
        return await run_in_threadpool(host.list_queries)

    @r.get(
        "/queries/{qid}",
        response_model=QueryOut,
        response_model_by_alias=True,
        tags=["queries"],
        summary="Describe a query",
        responses=responses(404, 422),
    )
    async def get_query(qid: int = QueryId) -> dict[str, Any]:
        return await run_in_threadpool(host.get_query, qid)

    @r.patch(
        "/queries/{qid}",
        response_model=QueryOut,
        response_model_by_alias=True,
        dependencies=mutating,
        tags=["queries"],
        summary="Activate/deactivate a query, set its scheduling weight or its memory limit",
        openapi_extra={"requestBody": request_body(QueryPatch)},
        description="A query the engine suspended (`state` `suspended`: its state passed its `memory_limit`) "
        "is activated again with `active: true`, best together with a larger `memory_limit` (set first).",
        responses=responses(400, 401, 404, 413, 422),
    )
    async def patch_query(request: Request, qid: int = QueryId) -> dict[str, Any]:
        raw, ctype = await request.body(), content_type(request)

        def patch() -> dict[str, Any]:
            body = json_model(QueryPatch, raw, ctype)
            limit = (body.memory_limit,) if "memory_limit" in body.model_fields_set else None
            return host.patch_query(qid, body.active, body.weight, limit)

        return await run_in_threadpool(patch)

    @r.delete(
        "/queries/{qid}",
        status_code=204,
        dependencies=mutating,
        tags=["queries"],
        summary="Deregister a query",
        description="Its subscribers receive an `end` message.",
        responses=responses(401, 404, 409, 422),
    )
    async def delete_query(qid: int = QueryId) -> Response:
        await run_in_threadpool(host.delete_query, qid)
        return Response(status_code=204)

    # ------------------------------------------------------------ results
    @r.get(
        "/queries/{qid}/results",
        tags=["results"],
        summary="Stream a query's results",
        response_class=Response,
        description="A chunked stream of result elements, each with its timestamp and sign, as NDJSON "
        '(`{"ts":5,"sign":1,"row":[...]}` per line), a streamed JSON array of the same '
        "objects, Server-Sent Events (`data:` lines) or STREAM-style XML "
        '(`<tuple ts="5" sign="+"><v>1</v>...</tuple>`), chosen by `format` or the Accept '
        "header (default NDJSON). Elements arrive once final. `snapshot=true` starts with the "
        "query's current relation as `+` elements stamped with the instant its results are final "
        "through, followed exactly by the changes after it (the engine's snapshot; when the engine "
        "cannot give one for the query's plan shape the request fails with 409 "
        "`snapshot_unavailable`: subscribe without it for the changes from now on); it is ignored "
        "for stream-valued queries. `follow=false` ends after the snapshot; `limit` and "
        "`until` end the stream after that many elements / once results are final through that "
        "instant. A subscriber that falls `buffer` elements behind receives a `lagged` message "
        "and is disconnected; a deregistered or deactivated query ends its streams with an `end` "
        "message, and an inactive query's results cannot be subscribed to (409 `query_inactive`). "
        "`from=T` resumes: every published element with ts > T (from the server's retained history "
        "of the query's results), then the live ones, with no duplicates and no gaps. Results are "
        "published when an instant becomes final, all elements of an instant together, so resuming "
        "after the last instant a subscriber saw is exact. SSE events carry `id: <ts>` on the last "
        "element of each instant, and a `Last-Event-ID` header is taken as `from` (an EventSource "
        "resumes by itself, even on a `snapshot=true` URL: the header wins, since the client has the "
        "snapshot and the changes through that instant already). A `from` older than the retained history gets 410 `history_gone` "
        "(its `oldest` is the smallest instant a resume may start after): subscribe with "
        "`snapshot=true` instead.",
        responses={
            200: {
                "description": "the result stream",
                "content": result_content,
                "headers": {
                    "X-Snapshot-At": {
                        "description": "with `snapshot=true` on a relation-valued query: the instant "
                        "the snapshot is stamped with (its results are final through it; "
                        "the changes that follow have larger timestamps). Absent when "
                        "nothing is final yet (the snapshot is then empty).",
                        "schema": {"type": "integer"},
                    }
                },
            },
            **responses(404, 406, 409, 410, 422),
        },
    )
    @_format_choices
    async def results(
        request: Request,
        qid: int = QueryId,
        format: str | None = Query(  # typed with the registry's names by _format_choices
            None, description="output format (overrides Accept)"
        ),
        snapshot: bool = Query(False, description="start with the current relation contents"),
        follow: bool = Query(True, description="keep streaming new results (false: snapshot only)"),
        limit: int | None = Query(None, ge=1, le=1 << 40, description="end after this many elements"),
        until: int | None = Query(
            None, ge=-(1 << 62), le=1 << 62, description="end once results are final through this instant"
        ),
        buffer: int | None = Query(None, ge=1, le=1 << 30, description="this subscriber's buffer, in result elements"),
        from_: int | None = Query(
            None,
            alias="from",
            ge=-(1 << 62),
            le=1 << 62,
            description="resume: the published elements with ts > this instant, then the live ones",
        ),
        last_event_id: str | None = Header(
            None, description="SSE resume: taken as `from` when `from` is absent (overrides snapshot=true)"
        ),
    ) -> ResultsResponse:
        fmt = format
        if fmt is None:
            accept = request.headers.get("accept")
            chosen = RESULT_FORMATS.from_accept(accept)
            if chosen is None:
                if accept and not any(
                    a.split(";")[0].strip() in ("*/*", "application/*", "text/*", "") for a in accept.split(",")
                ):
                    raise ProblemError(
                        406,
                        "not_acceptable",
                        f"cannot produce any of '{accept}'; formats: {', '.join(RESULT_FORMATS.media_types())}",
                    )
                chosen = default_result_format()
            fmt = chosen.name
        if from_ is not None and snapshot:
            raise ProblemError(422, "invalid_request", "from and snapshot=true exclude each other")
        after = from_ if from_ is not None else _last_event_id(last_event_id)
        if after is not None:
            snapshot = False  # an EventSource reconnecting to its snapshot URL: it has the snapshot already
        loop = asyncio.get_running_loop()
        kind, schema = await run_in_threadpool(host.query_info, qid)
        sub, snap = await run_in_threadpool(host.subscribe, qid, fmt, loop, snapshot, follow, buffer, after)
        headers = {}
        if snapshot and kind == "relation" and snap.through is not None:
            headers["X-Snapshot-At"] = str(snap.through)
        return ResultsResponse(
            sub,
            fmt,
            RESULT_FORMATS[fmt].header(qid, kind, schema),
            follow=follow,
            limit=limit,
            until=until,
            keepalive=host.settings.keepalive_seconds,
            snapshot_chunk=snap,
            headers=headers,
        )

    # ------------------------------------------------------------ views
    @r.post(
        "/views",
        status_code=201,
        response_model=ViewOut,
        response_model_by_alias=True,
        dependencies=mutating,
        tags=["views"],
        summary="Register a view",
        openapi_extra={"requestBody": request_body(ViewIn)},
        description='`{"cql": "register view V as select ..."}` or `{"name": "V", "query": '
        '"select ..."}`; a view is a named query that other queries and views read like a '
        "stream or relation.",
        responses=responses(400, 401, 409, 413, 422),
    )
    async def create_view(request: Request, response: Response) -> dict[str, Any]:
        raw, ctype = await request.body(), content_type(request)

        def register() -> dict[str, Any]:
            body = json_model(ViewIn, raw, ctype)
            if body.cql is not None and (body.name is None and body.query is None):
                text = body.cql
            elif body.cql is None and body.name is not None and body.query is not None:
                text = f"register view {body.name} as {body.query}"
            else:
                raise ProblemError(
                    422, "invalid_request", "give either 'cql' (a register view statement) or 'name' and 'query'"
                )
            return host.register_view(text)

        out = await run_in_threadpool(register)
        response.headers["Location"] = f"/views/{out['name']}"
        return out

    @r.get("/views", response_model=list[ViewOut], response_model_by_alias=True, tags=["views"], summary="List views")
    async def list_views() -> list[dict[str, Any]]:
        return await run_in_threadpool(host.list_views)

    @r.get(
        "/views/{name}",
        response_model=ViewOut,
        response_model_by_alias=True,
        tags=["views"],
        summary="Describe a view",
        responses=responses(404, 422),
    )
    async def get_view(name: str = ViewName) -> dict[str, Any]:
        return await run_in_threadpool(host.get_view, name)

    @r.delete(
        "/views/{name}",
        status_code=204,
        dependencies=mutating,
        tags=["views"],
        summary="Drop a view",
        description="Refused with 409 while a query or view reads it.",
        responses=responses(401, 404, 409, 422),
    )
    async def drop_view(name: str = ViewName) -> Response:
        await run_in_threadpool(host.drop_view, name)
        return Response(status_code=204)

    return r
