"""Routes for the plan manager (STREAM §6.1): control tables (every plan entity's counters and knobs),
the global plan, and peeking at an entity's tuples."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Literal

from fastapi import APIRouter, Depends, Path, Query, Request
from fastapi.responses import PlainTextResponse
from starlette.concurrency import run_in_threadpool

from cqlstream.server.models import Entity, EntityPatch, Peek, PlanGraph
from cqlstream.server.problems import responses

if TYPE_CHECKING:
    from cqlstream.server.host import EngineHost

EntityId = Path(
    min_length=1, max_length=256, description="entity id, e.g. `engine`, `src:S`, `query:1`, `op:3`, `q:2`, `syn:1`"
)


def router(host: EngineHost, auth: Callable[..., Awaitable[None]]) -> APIRouter:
    r = APIRouter(tags=["plan manager"])
    control = host.control

    @r.get(
        "/entities",
        response_model=list[Entity],
        summary="All control tables",
        description="The engine, sources (`src:NAME`), queries (`query:N`), operators (`op:N`), queues (`q:N`) "
        "and stores (`syn:N`) with their live counters (tuples in/out, memory, CPU, watermarks, ...), "
        "settable knobs and the queries using them.",
    )
    async def list_entities() -> list[dict[str, Any]]:
        return await run_in_threadpool(control.entities)

    @r.get("/entities/{entity_id}", response_model=Entity, summary="One control table", responses=responses(404, 422))
    async def get_entity(entity_id: str = EntityId) -> dict[str, Any]:
        return await run_in_threadpool(control.entity, entity_id)

    @r.patch(
        "/entities/{entity_id}",
        response_model=Entity,
        dependencies=[Depends(auth)],
        summary="Set knobs of an entity",
        description='`{"knobs": {"weight": 2}}`, set in order. Unknown knob names are rejected (422 '
        "`unknown_knob`) before any knob is set; a bad value is rejected (422 `bad_knob_value`) "
        "and leaves that knob unchanged (knobs listed before it stay set). Knobs: engine "
        "`scheduler`, `budget`, `share`, `adaptive`; stream `sampling_rate`; query `active`, `weight`, "
        "`share`, `adaptive`; operator and store `memory_limit`; join `probe_orders`, `index`, `join_order`; selection "
        "`conjunct_order`, `adaptive`, `profile_probability`, `profile_window`, `alpha`.",
        responses=responses(400, 401, 404, 413, 422),
    )
    async def patch_entity(body: EntityPatch, entity_id: str = EntityId) -> dict[str, Any]:
        return await run_in_threadpool(control.set_knobs, entity_id, body.knobs)

    @r.get(
        "/entities/{entity_id}/peek",
        response_model=Peek,
        summary="Peek at an entity's tuples",
        description="The last `n` tuples that entered a queue or a source, a window's or store's current "
        "contents, or the last `n` tuples an operator produced.",
        responses=responses(404, 422),
    )
    async def peek(
        entity_id: str = EntityId,
        n: int = Query(20, ge=0, le=1000, description="at most this many tuples (the latest)"),
    ) -> dict[str, Any]:
        return await run_in_threadpool(control.peek, entity_id, n)

    @r.get(
        "/plan",
        response_model=PlanGraph,
        response_model_by_alias=True,
        summary="The global query plan",
        description="Every registered query merged into one plan (shared operators, queues and stores). "
        "`format=json` (default): a graph whose nodes are the control tables of operators, stores, "
        "sources and queries and whose edges are the queues from producer to consumer; "
        "`format=text`: EXPLAIN-style text (each operator with its queues, queries, counters and "
        "notes; stores; queries with their completeness). Without `format`, `Accept: text/plain` "
        "chooses text.",
        responses={
            200: {
                "description": "the global plan",
                "content": {
                    "application/json": {"schema": {"$ref": "#/components/schemas/PlanGraph"}},
                    "text/plain": {"schema": {"type": "string"}},
                },
            },
            **responses(422),
        },
    )
    async def plan(
        request: Request,
        format: Literal["text", "json"] | None = Query(None, description="`json` (the graph) or `text`"),
    ) -> dict[str, Any] | PlainTextResponse:
        fmt = format
        if fmt is None:
            accept = request.headers.get("accept") or ""
            fmt = "text" if "text/plain" in accept and "application/json" not in accept else "json"
        out = await run_in_threadpool(control.plan, fmt)
        if isinstance(out, str):  # fmt == "text"
            return PlainTextResponse(out + "\n")
        return out

    return r
