"""Routes for control tables (STREAM §6.1): every plan entity's counters and knobs."""
from __future__ import annotations

from fastapi import APIRouter, Depends, Path
from starlette.concurrency import run_in_threadpool

from server.models import Entity, EntityPatch
from server.problems import responses

EntityId = Path(min_length=1, max_length=256, description="entity id, e.g. `op:3`, `query:1`, `source:S`")


def router(host, auth) -> APIRouter:
    r = APIRouter(tags=["control tables"])

    @r.get("/entities", response_model=list[Entity], summary="All control tables",
           description="Operators, queues, stores, queries and sources with their live counters (tuples in/out, "
                       "memory, ...) and settable knobs (active, weight, memory limit, ...).")
    async def list_entities():
        return await run_in_threadpool(host.entities)

    @r.get("/entities/{entity_id}", response_model=Entity, summary="One control table",
           responses=responses(404, 422))
    async def get_entity(entity_id: str = EntityId):
        return await run_in_threadpool(host.entity, entity_id)

    @r.patch("/entities/{entity_id}", response_model=Entity, dependencies=[Depends(auth)],
             summary="Set knobs of an entity", description="`{\"knobs\": {\"weight\": 2}}`; unknown knobs and "
             "bad values are rejected with 422 and nothing is changed by the rejected knob.",
             responses=responses(400, 401, 404, 413, 422))
    async def patch_entity(body: EntityPatch, entity_id: str = EntityId):
        return await run_in_threadpool(host.set_knobs, entity_id, body.knobs)

    return r
