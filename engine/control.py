"""Control tables (STREAM §6.1; docs/plan-manager.md): every operator, queue, synopsis,
source and query is an *entity* with live counters and settable knobs, read and written through
one API (the server, the web UI, SysStream and the re-optimizer all use it).

Entity ids: `op:N`, `q:N`, `syn:N` (plan entities, numbered in creation order), `src:NAME`,
`query:N`, and `engine` (scheduler and sharing knobs). Operators and stores give their own
tables and declare, validate and set their own knobs (`control_table`, `KNOBS`, `set_knob` in
engine/operators/base.py and engine/synopses.py); this module finds the entities and adds what
only the plan knows (the queries using each one).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from cqlstream.engine import adaptive, parallel
from cqlstream.engine import knobs as K
from cqlstream.engine.adaptive import config as AC
from cqlstream.engine.approx import knobs as AK
from cqlstream.engine.errors import EngineError, KnobError
from cqlstream.engine.operators.summary_mode import query_summaries

if TYPE_CHECKING:
    from cqlstream.engine.dsms import Dsms, QueryHandle
    from cqlstream.engine.inputs import RelationInput, StreamInput
    from cqlstream.engine.planner import PNode
    from cqlstream.engine.queues import Queue

# A plan entity: (kind, object, PNode | None, ids of the queries using it). The object is an
# operator, a filter hub, a queue or a store, as `kind` says; each kind's table function knows which.
PlanEntity = tuple[str, Any, "PNode | None", list[int]]
Table = dict[str, Any]


# ---------------------------------------------------------------- the entities
def entity_id(eid: str | None) -> str:
    """A planned entity's id: the planner numbers every queue, operator and store it creates
    (`eid` is None only before that)."""
    assert eid is not None, "a plan entity without an id"
    return eid


def _queries(users: Iterable[object]) -> list[int]:
    return sorted(u for u in users if isinstance(u, int))


def _plan_entities(d: Dsms) -> dict[str, PlanEntity]:
    """eid → (kind, object, PNode | None, users)."""
    out: dict[str, PlanEntity] = {}
    for pn in d.plan.nodes.values():
        users = _queries(pn.users)
        out[entity_id(pn.queue.eid)] = ("queue", pn.queue, pn, users)
        if pn.op is not None:
            out[entity_id(pn.op.eid)] = ("operator", pn.op, pn, users)
        if pn.store is not None:
            out[entity_id(pn.store.eid)] = ("store", pn.store, pn, users)
    for hub in d.plan.filter_hubs.values():
        users = sorted({u for pn in d.plan.nodes.values() if pn.op in hub.members for u in _queries(pn.users)})
        out[entity_id(hub.eid)] = ("operator", hub, None, users)
    for st in list(d.plan.stores.values()) + list(d.plan.window_stores.values()) + d.plan.late_stores:
        users = sorted(
            {u for op in st.users for pn in d.plan.nodes.values() if pn.op is op for u in _queries(pn.users)}
        )
        out[entity_id(st.eid)] = ("store", st, None, users)
    return out


plan_entities = _plan_entities  # the plan's entities, for the query limits (engine/limits.py)


def _op_table(op: Any, pn: PNode | None, users: list[int]) -> Table:
    return {"kind": "operator", **op.control_table(), "queries": users, "note": pn.note if pn is not None else ""}


def _queue_table(q: Queue, pn: PNode | None, users: list[int]) -> Table:
    producer = pn.op.eid if pn is not None and pn.op is not None else (f"src:{q.name}" if q.name else None)
    return {
        "kind": "queue",
        "name": q.name,
        "producer": producer,
        "counters": {
            "length": q.length(),
            "bytes": q.nbytes(),
            "tuples_in": q.tuples_in,
            "readers": len(q.readers),
            "watermark": q.watermark,
        },
        "knobs": {},
        "queries": users,
    }


def _store_table(st: Any, pn: PNode | None, users: list[int]) -> Table:
    return {"kind": "store", **st.control_table(extra_users=pn is not None), "queries": users}


def _source_table(d: Dsms, name: str, inp: StreamInput | RelationInput) -> Table:
    q = inp.queue
    return {
        "kind": "source",
        "name": inp.d.name,
        "type": inp.d.kind,
        "queue": q.eid,
        "counters": {
            "accepted": inp.accepted,
            "late": inp.late,
            "shed": inp.shed,
            "refused": inp.refused,
            "max_ts": inp.max_ts,
            "queue_length": q.length(),
            "watermark": q.watermark,
        },
        "knobs": {"sampling_rate": inp.sampling_rate},
        "queries": sorted(h.id for h in d.queries.values() if name in h.reads),
    }


def _query_table(d: Dsms, h: QueryHandle, attr: dict[int, dict[str, float]]) -> Table:
    a = attr.get(h.id, {"memory_bytes": 0, "cpu_seconds": 0.0})
    counters = {
        "memory_bytes": a["memory_bytes"],
        "cpu_seconds": a["cpu_seconds"],
        "subscribers": len(h.subscriptions),
        **h.completeness(),
        "state": h.state,
        "suspended": h.suspended,
        "memory_limit": d.guard.limit_of(h),
        "cpu_limit": d.guard.cpu_limit_of(h),
    }
    pn = h.pnode
    if pn is not None:
        counters["results"] = pn.queue.tuples_in
        counters["watermark"] = pn.queue.watermark
    if d.approx is not None:  # rows admission control refused on the sources it reads
        counters["refused_rows"] = d.admission.by_query.get(h.id, 0)
    return {
        "kind": "query",
        "name": h.name or "",
        "text": h.text,
        "result": h.kind,
        "output": None if pn is None else pn.queue.eid,
        "bounded_memory": h.memory_verdict.to_dict(),
        "counters": counters,
        "knobs": {
            "active": h.active,
            "weight": h.weight,
            "share": h.share,
            "memory_limit": h.memory_limit,
            "cpu_limit": h.cpu_limit,
            "synopsis_joins": h.synopsis_joins,
        },
        "queries": [h.id],
        "summaries": query_summaries(h.pnode),
        **({} if d.approx is None else {"approximation": d.approx.of(h.id)}),
    }


def _engine_table(d: Dsms) -> Table:
    s = d.scheduler
    t: Table = {
        "kind": "engine",
        "name": "engine",
        "counters": {
            "operators": len(d.plan.operators),
            "queues": len(d.plan.nodes),
            "stores": len(d.plan.stores)
            + len(d.plan.window_stores)
            + len(d.plan.late_stores)
            + sum(pn.store is not None for pn in d.plan.nodes.values()),
            "queries": len(d.queries),
            "engine_threads": parallel.threads(),  # the scheduler `parallel` runs operators on
            "sys_rows": d.sys.published if d.sys else 0,
            "state_bytes": _state_bytes(d),
        },
        "knobs": {
            "scheduler": s.name,
            "budget": s.budget,
            "share": d.share,
            "adaptive": d.plan.options.adaptive.policy,
            "synopsis_joins": d.plan.options.synopsis_joins,
        },
        "queries": sorted(d.queries),
    }
    t["knobs"].update(AK.values(d))  # the overload controller's (engine/approx/knobs.py)
    if d.approx is not None:
        t["counters"].update(d.approx.table())
    return t


def _state_bytes(d: Dsms) -> int:
    """Operator state plus every store: the engine's memory for windows, joins, aggregates."""
    n = sum(op.state_bytes() for op in d.plan.operators)
    n += sum(
        st.nbytes() for st in list(d.plan.stores.values()) + list(d.plan.window_stores.values()) + d.plan.late_stores
    )
    return n + sum(pn.store.nbytes() for pn in d.plan.nodes.values() if pn.store is not None)


def tables(d: Dsms) -> list[Table]:
    """Every entity's control table."""
    attr = attribution(d)
    out = [{"id": "engine", **_engine_table(d)}]
    for name, inp in _sources(d):
        out.append({"id": f"src:{inp.d.name}", **_source_table(d, name, inp)})
    for h in d.queries.values():
        out.append({"id": f"query:{h.id}", **_query_table(d, h, attr)})
    out.extend(_attached_table(d, eid) for eid in list(d.attached))
    for eid, (kind, obj, pn, users) in _plan_entities(d).items():
        out.append({"id": eid, **_TABLE[kind](obj, pn, users)})
    return out


def table(d: Dsms, eid: str) -> Table:
    for t in _one(d, eid):
        return t
    raise EngineError("unknown_entity", f"no entity '{eid}'")


def _one(d: Dsms, eid: str) -> Iterator[Table]:
    if eid == "engine":
        yield {"id": eid, **_engine_table(d)}
    elif eid.startswith("src:"):
        for name, inp in _sources(d):
            if inp.d.name.lower() == eid[4:].lower():
                yield {"id": f"src:{inp.d.name}", **_source_table(d, name, inp)}
    elif eid.startswith("query:"):
        h = _query(d, eid)
        if h is not None:
            yield {"id": eid, **_query_table(d, h, attribution(d))}
    elif eid in d.attached:
        yield _attached_table(d, eid)
    else:
        e = _plan_entities(d).get(eid)
        if e is not None:
            kind, obj, pn, users = e
            yield {"id": eid, **_TABLE[kind](obj, pn, users)}


_TABLE: dict[str, Callable[[Any, PNode | None, list[int]], Table]] = {
    "operator": _op_table,
    "queue": _queue_table,
    "store": _store_table,
}


def _attached_table(d: Dsms, eid: str) -> Table:
    """An attached entity's own table, with the queries reading the source it feeds."""
    e = d.attached[eid]
    feeds = (e.feeds or "").lower()
    users = sorted(h.id for h in d.queries.values() if feeds and feeds in h.reads)
    return {"id": eid, **e.control_table(), "feeds": e.feeds, "queries": users}


def _sources(d: Dsms) -> list[tuple[str, StreamInput | RelationInput]]:
    items = list(d.inputs.items())
    if d.sys is not None:
        items.append((d.sys.input.d.name.lower(), d.sys.input))
    return items


def _query(d: Dsms, eid: str) -> QueryHandle | None:
    try:
        return d.queries.get(int(eid.split(":", 1)[1]))
    except ValueError:
        return None


# ---------------------------------------------------------------- knobs
def _bool(v: object) -> bool:
    if isinstance(v, bool):
        return v
    raise KnobError(f"expected true or false, got {v!r}")


def set_knob(d: Dsms, eid: str, knob: str, value: Any) -> Table:
    """Set one knob; the entity's table after the change. Unknown entity: EngineError
    `unknown_entity`; unknown knob or bad value: KnobError."""
    if eid in d.attached:  # its knobs are its own business (not kept with the plan's)
        d.attached[eid].set_knob(knob, value)
        return table(d, eid)
    if eid == "engine":
        _engine_knob(d, knob, value)
    elif eid.startswith("query:"):
        h = _query(d, eid)
        if h is None:
            raise EngineError("unknown_entity", f"no entity '{eid}'")
        if knob == "active":
            d.set_active(h.id, _bool(value))
        elif knob == "weight":
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise KnobError(f"weight must be a positive number, got {value!r}")
            d.set_weight(h.id, value)
        elif knob in ("share", "synopsis_joins"):  # a new plan: the query restarts on it
            on = _bool(value)
            if on != getattr(h, knob):
                was = h.active
                if was:
                    d.set_active(h.id, False)
                setattr(h, knob, on)
                if was:
                    d.set_active(h.id, True)
        elif knob == "memory_limit":  # null: the engine's default (query_memory_limit)
            h.memory_limit = K.memory_limit(value)
            d.guard.invalidate()
        elif knob == "cpu_limit":  # null: the engine's default (query_cpu_limit)
            h.cpu_limit = K.cpu_limit(value)
            d.guard.invalidate()
        elif knob == "adaptive":  # every selection of the query (shared ones too)
            adaptive.set_policy(_query_selections(h), value)
        else:
            raise KnobError(
                "query knobs are active, weight, share, memory_limit, cpu_limit, adaptive and synopsis_joins; "
                f"not '{knob}'"
            )
    elif eid.startswith("src:"):
        inp = next((i for _, i in _sources(d) if i.d.name.lower() == eid[4:].lower()), None)
        if inp is None:
            raise EngineError("unknown_entity", f"no entity '{eid}'")
        if knob != "sampling_rate" or inp.d.kind != "stream":
            raise KnobError(f"stream knobs: sampling_rate (load shedding); not '{knob}' on {inp.d.kind} {inp.d.name}")
        inp.sampling_rate = K.sampling_rate(value)
    else:
        e = _plan_entities(d).get(eid)
        if e is None:
            raise EngineError("unknown_entity", f"no entity '{eid}'")
        e[1].set_knob(knob, value)
        for x in getattr(e[1], "released", list)():  # shared synopses the knob made it give up
            d.plan._forget(x)
    d.knobs.setdefault(eid, {})[knob] = value
    return table(d, eid)


def _engine_knob(d: Dsms, knob: str, value: Any) -> None:
    from cqlstream.engine.scheduler import SCHEDULERS, Weighted

    if knob == "scheduler":
        if value not in SCHEDULERS:
            raise KnobError(f"scheduler must be one of {sorted(SCHEDULERS)}, got {value!r}")
        budget = d.scheduler.budget
        d.scheduler = (
            Weighted(budget, weights=lambda: _op_weights(d)) if value == "weighted" else SCHEDULERS[value](budget)
        )
    elif knob == "budget":
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise KnobError(f"budget must be a positive integer or null, got {value!r}")
        d.scheduler.budget = value
    elif knob == "share":
        d.share = _bool(value)
    elif knob == "adaptive":  # the default of new selections, and every selection now
        d.plan.options = replace(d.plan.options, adaptive=AC.with_policy(d.plan.options.adaptive, value))
        adaptive.set_policy(d.plan.operators, value)
    elif knob == "synopsis_joins":  # the default of queries registered from now on
        d.plan.options = replace(d.plan.options, synopsis_joins=_bool(value))
    elif not AK.set_knob(d, knob, value):
        knobs = ", ".join(["scheduler", "budget", "share", "adaptive", "synopsis_joins", *AK.KNOBS])
        raise KnobError(f"engine knobs are {knobs}; not '{knob}'")


def _query_selections(h: QueryHandle) -> list[Any]:
    """The operators computing query `h` (its plan node and everything below it)."""
    out, todo, seen = [], [h.pnode], set()
    while todo:
        pn = todo.pop()
        if pn is None or id(pn) in seen:
            continue
        seen.add(id(pn))
        if pn.op is not None:
            out.append(pn.op)
        todo.extend(pn.inputs)
    return out


def _op_weights(d: Dsms) -> dict[int, float]:
    """id(operator) → the largest weight of the queries using it."""
    out: dict[int, float] = {}
    for pn in d.plan.nodes.values():
        ws = [d.queries[u].weight for u in pn.users if u in d.queries]
        if pn.op is not None and ws:
            out[id(pn.op)] = max(ws)
    return out


# ---------------------------------------------------------------- attribution
def attribution(d: Dsms) -> dict[int, dict[str, float]]:
    """Each query's share of memory (whole bytes, rounded) and CPU (seconds): an entity's cost is
    split equally among the queries using it (IEEE DE Bulletin §4.2)."""
    out = {qid: {"memory_bytes": 0.0, "cpu_seconds": 0.0} for qid in d.queries}
    for _eid, (kind, obj, _pn, users) in _plan_entities(d).items():
        users = [u for u in users if u in out]
        if not users:
            continue
        if kind == "operator":
            mem, cpu = obj.state_bytes(), obj.counters.cpu  # its threads' own CPU time
        elif kind == "queue":
            mem, cpu = obj.nbytes(), 0.0
        else:
            mem, cpu = obj.nbytes(), 0.0
        for u in users:
            out[u]["memory_bytes"] += mem / len(users)
            out[u]["cpu_seconds"] += cpu / len(users)
    for a in out.values():
        a["memory_bytes"] = round(a["memory_bytes"])  # whole bytes: a share of a byte means nothing
    return out


__all__ = ["attribution", "set_knob", "table", "tables"]
