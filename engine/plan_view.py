"""The global plan as people and UIs see it: EXPLAIN of every operator, store and query (text,
or a graph whose nodes are control tables and whose edges are queues), and `peek` at the tuples
in a queue, window or store."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from cqlstream.cql.logical.explain import node_label
from cqlstream.engine import column_pruning
from cqlstream.engine.control import PlanEntity, _attached_table, _plan_entities, _sources, entity_id, tables
from cqlstream.engine.errors import EngineError

if TYPE_CHECKING:
    from cqlstream.engine.dsms import Dsms
    from cqlstream.engine.queues import Queue


def explain_plan(d: Dsms, fmt: str = "text") -> str | dict[str, Any]:
    ents = _plan_entities(d)
    if fmt == "json":
        nodes = [t for t in tables(d) if t["kind"] in ("operator", "store", "source", "query") or t["id"] in d.attached]
        edges: list[dict[str, Any]] = []
        for t in nodes:  # an attached entity (a Spark source) feeds its source: an edge without a queue
            if t["id"] in d.attached and t.get("feeds"):
                src = next((f"src:{i.d.name}" for _, i in _sources(d) if i.d.name.lower() == t["feeds"].lower()), None)
                if src is not None:
                    edges.append({"queue": None, "from": t["id"], "to": src, "queries": t["queries"]})
        for eid, (kind, q, pn, users) in ents.items():
            if kind != "queue" or pn is None:  # every queue has its plan node
                continue
            src = pn.op.eid if pn.op is not None else f"src:{q.name}"
            for op in d.plan.operators:
                if any(r.q is q for r in op.readers):
                    edges.append({"queue": eid, "from": src, "to": op.eid, "queries": users})
            for h in d.queries.values():
                if h.pnode is pn:
                    edges.append({"queue": eid, "from": src, "to": f"query:{h.id}", "queries": [h.id]})
            for st in d.plan.stores.values():
                if st.queue is q:
                    edges.append({"queue": eid, "from": src, "to": st.eid, "queries": users})
        return {"nodes": nodes, "edges": edges}
    if fmt != "text":
        raise EngineError("invalid_argument", "fmt is 'text' or 'json'")
    lines = [
        f"Global plan: {len(d.queries)} queries, {len(d.plan.operators)} operators, "
        f"{len(d.plan.nodes)} queues, stores: {sum(1 for e in ents.values() if e[0] == 'store')}"
    ]
    for op in d.plan.operators:
        pn, users = ents[entity_id(op.eid)][2:]
        ins = ", ".join(_input_label(ents, q) for q in op.inputs)
        lines.append(f"  {op.eid:<7} {op.kind:<12} {node_label(op.node) if op.node is not None else ''}")
        lines.append(
            f"          in: {ins}  out: {op.output.eid}  queries: {users}  "
            f"tuples {op.counters.tuples_in}→{op.counters.tuples_out}  state {op.state_bytes()} B"
            + (f"  [{pn.note}]" if pn is not None and pn.note else "")
        )
        lines.extend(f"          {line}" for line in op.explain_detail())
        pruned = None if pn is None else column_pruning.explain_line(pn)
        if pruned is not None:
            lines.append(f"          {pruned}")
    for eid, (kind, st, _pn, users) in ents.items():
        if kind == "store":
            lines.append(
                f"  {eid:<7} {st.kind:<12} on {st.queue.eid}: {len(st)} rows, {st.nbytes()} B, queries: {users}"
            )
    for eid in d.attached:
        t = _attached_table(d, eid)
        counters = "  ".join(f"{k} {v}" for k, v in t.get("counters", {}).items())
        lines.append(f"  {eid:<7} {t['kind']:<12} → {t.get('feeds') or '-'}  {t.get('state', '')}  {counters}")
    for h in d.queries.values():
        cf = h.completeness()
        state = "active" if h.active else "inactive"
        lines.append(
            f"  query:{h.id} ({state}, weight {h.weight:g}) → "
            f"{h.pnode.queue.eid if h.pnode else '-'}"
            + (f"  complete from {cf['complete_from']}" if cf["complete_from"] is not None and h.active else "")
            + ("" if cf["complete"] or not h.active else "  (started late: results reflect data since registration)")
        )
    return "\n".join(lines)


def _input_label(ents: dict[str, PlanEntity], q: Queue) -> str:
    """An operator's input queue, with the source's name when a source feeds it."""
    eid = entity_id(q.eid)
    e = ents.get(eid)
    from_source = e is not None and e[2] is not None and e[2].op is None
    return eid + (f" ({q.name})" if q.name and from_source else "")


def peek(d: Dsms, eid: str, n: int = 20) -> dict[str, Any]:
    """Recent tuples entering a queue, or a store's / window's current contents (for the UI)."""
    n = max(0, min(int(n), 1000))
    ents = _plan_entities(d)
    if eid.startswith("src:"):
        inp = next((i for _, i in _sources(d) if i.d.name.lower() == eid[4:].lower()), None)
        if inp is None:
            raise EngineError("unknown_entity", f"no entity '{eid}'")
        eid = entity_id(inp.queue.eid)
    e = ents.get(eid)
    if e is None:
        raise EngineError("unknown_entity", f"no entity '{eid}'")
    kind, obj, _pn, _users = e
    if kind == "queue":
        b = obj.recent_rows(n)
        what = "recent tuples entering the queue"
    elif kind == "store":
        b = obj.peek()
        what = "current contents"
    else:
        what, b = obj.peek(n)
    if _pn is not None and _pn.op is not None and _pn.op.produced is not None:
        # column pruning: the others hold NULL placeholders, which a reader must not take for data
        unread = [a.name for c, a in enumerate(_pn.node.schema) if c not in _pn.op.produced]
        what += f" (column pruning: nothing reads {', '.join(unread)}, which may show NULL)"
    if b is None:
        return {"id": eid, "what": what, "tuples": []}
    b = b.slice(max(len(b) - n, 0), len(b))
    return {"id": eid, "what": what, "tuples": [{"ts": t, "sign": s, "row": list(r)} for t, s, r in b.elements()]}


__all__ = ["explain_plan", "peek"]
