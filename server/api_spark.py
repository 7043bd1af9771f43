"""Routes for Spark sources: start one (a JSON definition or the one-line form), list them with
their states and counters, describe one, stop and remove one."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from fastapi import APIRouter, Depends, Path, Request, Response
from pydantic import ValidationError
from starlette.concurrency import run_in_threadpool

from cqlstream.server.bodies import content_type
from cqlstream.server.models import NAME_PATTERN, SparkSourceIn, SparkSourceOut
from cqlstream.server.problems import ProblemError, responses, validation_problem
from cqlstream.spark_bridge.spec import SourceSpec

if TYPE_CHECKING:
    from cqlstream.server.host import EngineHost

StreamName = Path(pattern=NAME_PATTERN, max_length=128, description="the stream or relation the source feeds")

_BODY = {
    "required": True,
    "content": {
        "application/json": {"schema": {"$ref": "#/components/schemas/SparkSourceIn"}},
        "text/plain": {
            "schema": {"type": "string", "minLength": 1, "example": "Orders=csv:/data/orders?maxFilesPerTrigger=1"}
        },
    },
}


def _spec(body: bytes, ctype: str) -> SourceSpec:
    """The source definition of a body (parsed in a worker thread, server/bodies.py)."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        raise ProblemError(400, "malformed_body", "the body must be UTF-8") from None
    if ctype == "text/plain" or (not ctype and not text.lstrip().startswith("{")):
        return SourceSpec.parse(text)
    if ctype not in ("application/json", "") and not ctype.endswith("+json"):
        raise ProblemError(415, "unsupported_media_type", f"send a JSON definition or a text/plain line, not '{ctype}'")
    try:
        data = json.loads(text)
        model = SparkSourceIn.model_validate(data)
    except ValidationError as e:  # a ValueError too: first
        raise validation_problem(e) from None
    except ValueError as e:
        raise ProblemError(400, "malformed_body", f"malformed JSON: {e}") from None
    return SourceSpec.of(model.model_dump(by_alias=True))


def router(host: EngineHost, auth: Callable[..., Awaitable[None]]) -> APIRouter:
    r = APIRouter(tags=["spark"])
    mutating = [Depends(auth)]

    @r.post(
        "/spark/sources",
        status_code=201,
        response_model=SparkSourceOut,
        dependencies=mutating,
        summary="Start a Spark source",
        description="Feed a registered stream or relation from a Spark Structured Streaming DataFrame read by "
        "the embedded Spark session (started on first use, about 10 s): CSV/JSON/Parquet directories, "
        "socket, rate, or any Spark data source. The stream's schema is checked against the "
        "DataFrame's before the streaming query starts (422 `bad_source` names missing and "
        "mistyped columns); 409 `source_exists` while another source feeds the stream; 503 "
        "`spark_unavailable` when Spark cannot start here.",
        openapi_extra={"requestBody": _BODY},
        responses=responses(400, 401, 404, 409, 413, 415, 422, 503),
    )
    async def create(request: Request) -> Response:
        body, ctype = await request.body(), content_type(request)
        out = await run_in_threadpool(lambda: host.spark.add(_spec(body, ctype)))
        return Response(
            json.dumps(out),
            status_code=201,
            media_type="application/json",
            headers={"Location": f"/spark/sources/{out['stream']}"},
        )

    @r.get("/spark/sources", response_model=list[SparkSourceOut], summary="List Spark sources")
    async def list_sources() -> list[dict[str, Any]]:
        return await run_in_threadpool(host.spark.list)

    @r.get(
        "/spark/sources/{stream}",
        response_model=SparkSourceOut,
        summary="A Spark source's state and counters",
        description="`state` is starting, running, finished (available-now sources that read everything), "
        "stopped or failed; a failed source's `error` says why (a dead socket, a file Spark cannot "
        "parse, a push the engine refused).",
        responses=responses(404, 422),
    )
    async def get_source(stream: str = StreamName) -> dict[str, Any]:
        return await run_in_threadpool(host.spark.get, stream)

    @r.delete(
        "/spark/sources/{stream}",
        status_code=204,
        dependencies=mutating,
        summary="Stop and remove a Spark source",
        description="Its checkpoint stays: starting the same definition again resumes where it stopped.",
        responses=responses(401, 404, 422),
    )
    async def delete_source(stream: str = StreamName) -> Response:
        await run_in_threadpool(host.spark.remove, stream)
        return Response(status_code=204)

    return r
