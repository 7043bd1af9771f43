"""Routes for streams and relations: register (DDL text or JSON schema), list, describe, drop;
push tuples (JSON, NDJSON, CSV, Arrow IPC); heartbeats."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Literal

from fastapi import APIRouter, Depends, Header, Path, Query, Request, Response
from pydantic import ValidationError
from starlette.concurrency import run_in_threadpool

from cqlstream.io.formats import INGEST_FORMATS
from cqlstream.server.bodies import content_type, is_json, json_model, request_body
from cqlstream.server.idempotency import KEY_HEADER, KEY_MAX_LENGTH, REPLAYED_HEADER
from cqlstream.server.models import NAME_PATTERN, DdlIn, HeartbeatIn, HeartbeatOut, PushResult, SourceIn, SourceOut
from cqlstream.server.problems import ProblemError, responses, validation_problem

if TYPE_CHECKING:
    from cqlstream.server.host import EngineHost

SourceName = Path(pattern=NAME_PATTERN, max_length=128, description="stream or relation name (case-insensitive)")

_SOURCE_BODY = {
    "required": True,
    "content": {
        "application/json": {
            "schema": {"oneOf": [{"$ref": "#/components/schemas/SourceIn"}, {"$ref": "#/components/schemas/DdlIn"}]}
        },
        "text/plain": {
            "schema": {
                "type": "string",
                "minLength": 1,
                "example": "register stream S (A integer, B float) with (slack = 2)",
            }
        },
    },
}


def _push_body() -> dict[str, Any]:
    """The push's OpenAPI requestBody: one content entry per registered ingest format."""
    return {"required": True, "content": {f.media_type: f.openapi for f in INGEST_FORMATS}}


def ddl_of(src: SourceIn) -> str:
    """A JSON source description as DDL text."""
    parts = [f"{a.name} {a.type}" for a in src.attrs]
    parts += ["key (" + ", ".join(k) + ")" for k in src.keys]
    opts = []
    if src.options is not None:
        if src.options.unit is not None:
            opts.append(f"unit = {src.options.unit}")
        if src.options.slack is not None:
            opts.append(f"slack = {src.options.slack}")
        if src.options.timestamp is not None:
            opts.append(f"timestamp = {src.options.timestamp}")
    for k in src.keys:
        for c in k:
            if not c.replace("_", "a").isalnum():
                raise ProblemError(422, "invalid_name", f"key column '{c}' is not a name", field="keys")
    text = f"register {'static ' if src.static else ''}{src.kind} {src.name} ({', '.join(parts)})"
    text += f" with ({', '.join(opts)})" if opts else ""
    if any(";" in c for c in src.constraints):
        raise ProblemError(422, "invalid_request", "a constraint is one clause, without ';'", field="constraints")
    return text + (f" with constraints ({', '.join(src.constraints)})" if src.constraints else "")


def ddl_of_body(body: bytes, ctype: str) -> str:
    """The DDL text of a source registration body (parsed in a worker thread, server/bodies.py): DDL
    text, JSON `{ddl}` or a JSON description `{name, kind, attrs, options}`."""
    if ctype in ("text/plain", "application/sql", "text/x-cql") or (
        not ctype and body.lstrip()[:1] not in (b"{", b"[")
    ):
        try:
            ddl = body.decode("utf-8")
        except UnicodeDecodeError:
            raise ProblemError(400, "malformed_body", "DDL text must be UTF-8") from None
        if not ddl.strip():
            raise ProblemError(422, "invalid_request", "empty DDL text")
        return ddl
    if not is_json(ctype):
        raise ProblemError(
            415,
            "unsupported_media_type",
            f"unsupported Content-Type '{ctype}'; send DDL as text/plain or a JSON description as application/json",
        )
    try:
        data = json.loads(body)
    except (ValueError, UnicodeDecodeError) as e:
        raise ProblemError(400, "malformed_body", f"malformed JSON: {e}") from None
    except RecursionError:
        raise ProblemError(422, "too_deep", "JSON nested too deeply") from None
    if not isinstance(data, dict):
        raise ProblemError(422, "invalid_request", "expected a JSON object: {name, kind, attrs} or {ddl}")
    try:
        return DdlIn.model_validate(data).ddl if "ddl" in data else ddl_of(SourceIn.model_validate(data))
    except ValidationError as e:
        raise validation_problem(e) from None


def router(host: EngineHost, auth: Callable[..., Awaitable[None]]) -> APIRouter:
    r = APIRouter(tags=["streams"])
    mutating = [Depends(auth)]

    @r.post(
        "/streams",
        status_code=201,
        response_model=SourceOut,
        dependencies=mutating,
        summary="Register a stream or relation",
        description='Either DDL text (`text/plain`, or JSON `{"ddl": ...}`) such as '
        "`register stream S (A integer, B float) with (slack = 2, unit = second)` / "
        "`register relation R (A integer)`, or a JSON schema "
        "`{name, kind, attrs: [{name, type}], options: {unit, slack, timestamp}}`.",
        openapi_extra={"requestBody": _SOURCE_BODY},
        responses=responses(400, 401, 409, 413, 415, 422),
    )
    async def create_source(request: Request) -> Response:
        body, ctype = await request.body(), content_type(request)
        out = await run_in_threadpool(lambda: host.register_source(ddl_of_body(body, ctype)))
        return Response(
            json.dumps(out),
            status_code=201,
            media_type="application/json",
            headers={"Location": f"/streams/{out['name']}"},
        )

    @r.get("/streams", response_model=list[SourceOut], summary="List streams and relations")
    async def list_sources() -> list[dict[str, Any]]:
        return await run_in_threadpool(host.list_sources)

    @r.get(
        "/streams/{name}",
        response_model=SourceOut,
        summary="Describe a stream or relation",
        responses=responses(404, 422),
    )
    async def get_source(name: str = SourceName) -> dict[str, Any]:
        return await run_in_threadpool(host.get_source, name)

    @r.delete(
        "/streams/{name}",
        status_code=204,
        dependencies=mutating,
        summary="Drop a stream or relation",
        description="Refused with 409 while a query or view reads it.",
        responses=responses(401, 404, 409, 422),
    )
    async def drop_source(name: str = SourceName) -> Response:
        await run_in_threadpool(host.drop_source, name)
        return Response(status_code=204)

    @r.post(
        "/streams/{name}/tuples",
        response_model=PushResult,
        dependencies=mutating,
        summary="Push tuples (all or nothing)",
        description="Rows as a JSON array (objects `{ts, [sign], A, B}` or arrays `[ts, [sign], A, B]`), NDJSON "
        "(one object per line), CSV (header line naming the fields) or an Arrow IPC stream. "
        "Each row carries its timestamp in `ts` unless the stream is system-timestamped; "
        "relation updates carry `sign` (1 / -1, or '+' / '-'). Timestamps must not decrease "
        "(unless the stream declares a slack). A rejected push changes nothing; the problem names "
        "the offending `row` (0-based) and `field`.\n\n"
        "Safe retries and micro-batches: `late=drop` drops (and counts, in the reply's `late`) rows older "
        "than the source's time instead of rejecting the push; `heartbeat=T` then advances the source's "
        "time to T in the same step, so one request carries a micro-batch and its watermark. With an "
        f"`{KEY_HEADER}` header the push applies at most once: a retry with the same key changes nothing "
        f"and gets the first reply back with `replayed: true` and the response header `{REPLAYED_HEADER}: "
        "true`, whatever its body (bodies are not compared). The server remembers the last keys of each "
        "source (a setting, 10 000 by default) in memory; a rejected push records no key.",
        openapi_extra={"requestBody": _push_body()},
        responses=responses(400, 401, 404, 409, 413, 415, 422),
    )
    async def push(
        request: Request,
        response: Response,
        name: str = SourceName,
        late: Literal["reject", "drop"] = Query(
            "reject",
            description="rows older than the source's time (its largest timestamp; a stream with a slack drops "
            "rows later than the slack itself): `reject` the whole push, or `drop` them and count them in "
            "the reply's `late`",
        ),
        heartbeat: int | None = Query(
            None,
            ge=-(1 << 62),
            le=1 << 62,
            description="after the rows, advance the source's time to this instant (no element with a smaller "
            "timestamp will come: results through heartbeat-1 become final); a heartbeat at or below the "
            "source's time changes nothing",
        ),
        idempotency_key: str | None = Header(
            None,
            alias=KEY_HEADER,
            min_length=1,
            max_length=KEY_MAX_LENGTH,
            description="a key naming this push (unique per source): a retry with the same key is not "
            "applied again and gets the first push's reply",
        ),
    ) -> dict[str, Any]:
        body = await request.body()
        out = await run_in_threadpool(
            host.push,
            name,
            body,
            request.headers.get("content-type"),
            drop_late=late == "drop",
            heartbeat=heartbeat,
            key=idempotency_key,
        )
        if out["replayed"]:
            response.headers[REPLAYED_HEADER] = "true"
        return out

    @r.post(
        "/streams/{name}/heartbeat",
        response_model=HeartbeatOut,
        dependencies=mutating,
        summary="Advance a source's time",
        description="Time on the source reached `ts`: no element with a smaller timestamp will come, so "
        "results through ts-1 become final.",
        openapi_extra={"requestBody": request_body(HeartbeatIn)},
        responses=responses(400, 401, 404, 413, 422),
    )
    async def heartbeat(request: Request, name: str = SourceName) -> dict[str, Any]:
        raw, ctype = await request.body(), content_type(request)

        def beat() -> dict[str, Any]:  # parsed in the worker-thread call of the heartbeat itself
            return host.heartbeat(name, json_model(HeartbeatIn, raw, ctype).ts)

        return await run_in_threadpool(beat)

    return r
