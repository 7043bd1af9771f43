"""Binding declared k-constraints to the 2-way joins of a newly registered query.

A join input qualifies when it is a window over a registered stream (through selections and
column-only projections), so its inserts are that stream's arrivals, or a registered relation
(inserts and deletes, as Linear Road's AccSeg joins), and the join has an equality between two
integer columns. The constraints of the streams that speak about those columns are applied (a
relation declares none, but its rows are pruned by the stream side's many-one, CA and OA, whose
arrivals say which relation rows no future insert can meet); the join then keeps private state
(instead of reading the inputs' shared stores) so that it can move rows out of memory. An input
qualifies only while nothing has flowed into it, since private state starts empty. Deletes
of a relation's rows keep exact mode exact like a window's expirations: a delete brings back the
other input's spilled rows of its key, and a spilled row's own delete removes it from the store."""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

from cqlstream.cql.catalog import SourceDef
from cqlstream.cql.logical import expr as X
from cqlstream.cql.logical import nodes as L
from cqlstream.engine.kconstraints.constraints import CA, OA, RIDS, UNDECLARED, Constraint, ManyOne, from_defs
from cqlstream.engine.kconstraints.strategy import KMonConfig, KMonStrategy
from cqlstream.engine.operators.join import JoinOp

if TYPE_CHECKING:
    from cqlstream.cql.catalog import Catalog
    from cqlstream.engine.dsms import Dsms, QueryHandle
    from cqlstream.engine.planner import PNode

INTEGER_KINDS = ("int", "byte", "timestamp")  # join keys k-Mon handles (int64 values)
CONFIG_ATTR = "kconstraints"  # a Dsms attribute holding the KMonConfig new joins get (default exact)


def lineage(plan: L.Plan, col: int) -> tuple[str, str] | None:
    """(source, column) that column `col` of `plan` reads: through a window over a stream, or of
    a relation."""
    windowed = False
    while True:
        if isinstance(plan, L.StreamSource):
            return (plan.name, plan.attrs[col].name) if windowed else None
        if isinstance(plan, L.RelationSource):
            return (plan.name, plan.attrs[col].name)
        if isinstance(plan, L.Window):
            windowed = True
            plan = plan.input
        elif isinstance(plan, L.Filter):
            plan = plan.input
        elif isinstance(plan, L.Project) and isinstance(plan.exprs[col], X.ColRef):
            col = plan.exprs[col].index  # type: ignore[attr-defined]
            plan = plan.input
        else:
            return None


def _same(a: str, b: str) -> bool:
    return a.lower() == b.lower()


def applicable(
    sides: list[tuple[str, str]], declared: list[list[Constraint]]
) -> list[tuple[int, Constraint, str | None]]:
    """(input whose state it prunes, constraint, role) for a join on sides[0] = sides[1]."""
    out: list[tuple[int, Constraint, str | None]] = []
    unique = [any(isinstance(c, ManyOne) and _same(c.column, sides[x][1]) for c in declared[x]) for x in range(2)]
    for x in range(2):
        y = 1 - x
        cx, (sy, cy) = sides[x][1], sides[y]
        for c in declared[y]:
            if isinstance(c, (ManyOne, CA, OA)) and _same(c.column, cy):
                role = None
                if isinstance(c, OA):
                    role = "OAC" if unique[y] else "OAP" if unique[x] else None
                out.append((x, c, role))
        for c in declared[x]:
            if isinstance(c, RIDS) and _same(c.column, cx) and _same(c.ref_stream, sy) and _same(c.ref_column, cy):
                out.append((x, c, None))
    return out


def _is_stream(catalog: Catalog, name: str) -> bool:
    d = catalog.get(name)
    return isinstance(d, SourceDef) and d.kind == "stream"


def strategy_for(catalog: Catalog, op: JoinOp, node: L.Plan, config: KMonConfig) -> KMonStrategy | None:
    if not isinstance(node, L.Join) or op.n != 2:
        return None
    for e in op.equi:
        if not (isinstance(e.ea, X.ColRef) and isinstance(e.eb, X.ColRef)):
            continue
        if not all(c.type.kind in INTEGER_KINDS for c in (e.ea, e.eb)):
            continue
        cols = {e.a: e.ea.index, e.b: e.eb.index}
        sides = [lineage(node.inputs_[x], cols[x]) for x in range(2)]
        if sides[0] is None or sides[1] is None:
            continue
        declared: list[list[Constraint]] = []
        for s, _ in sides:  # type: ignore[misc]
            d = catalog.get(s)
            declared.append(from_defs(d.name, d.constraints) if isinstance(d, SourceDef) else [])
        if config.detect:  # candidates the monitors may find (k = -1: not declared, starts at ∞)
            for x in range(2):
                if not _is_stream(catalog, sides[x][0]):  # type: ignore[index]
                    continue  # constraints describe stream arrivals
                (sx, cx), (sy, cy) = sides[x], sides[1 - x]  # type: ignore[misc]
                have = {(type(c), c.column.lower()) for c in declared[x]}
                for kind in (CA, OA):
                    if (kind, cx.lower()) not in have:
                        declared[x].append(kind(sx, cx, UNDECLARED))
                if not any(isinstance(c, RIDS) and _same(c.column, cx) for c in declared[x]):
                    declared[x].append(RIDS(sx, cx, sy, cy, UNDECLARED))
        applied = applicable(sides, declared)  # type: ignore[arg-type]
        if applied:
            exprs = (e.ea, e.eb) if e.a == 0 else (e.eb, e.ea)
            return KMonStrategy(op, exprs, applied, config)
    return None


def _fresh(op: JoinOp) -> bool:
    """Nothing has reached the join's input stores yet (a relation's earlier contents, or rows a
    shared window already holds): its private state, which starts empty, would miss them."""
    for st in op.stores or ():
        q = st.queue
        if len(st) or q.watermark is not None or q.start is not None or q.last_ts is not None:
            return False
        if getattr(st.reader, "prefix", None) is not None:
            return False
    return True


def _private_state(d: Dsms, op: JoinOp) -> None:
    """Stop reading the shared stores (the join starts before any data, so its state is empty)."""
    for st in op.leave_stores():
        d.plan._forget(st)
    op.stores = None


def _joins(pn: PNode) -> list[tuple[PNode, JoinOp]]:
    """The join operators under `pn` (operators say what they are by their `kind`)."""
    out, todo, seen = [], [pn], set()
    while todo:
        p = todo.pop()
        if id(p) in seen:
            continue
        seen.add(id(p))
        if p.op is not None and p.op.kind == JoinOp.kind:
            out.append((p, cast("JoinOp", p.op)))
        todo.extend(p.inputs)
    return out


def bind(d: Dsms, h: QueryHandle) -> list[KMonStrategy]:
    """Attach a strategy to each fresh 2-way join of `h` that declared constraints apply to."""
    for eid, ent in list(d.attached.items()):  # strategies of joins no longer in the plan
        if isinstance(ent, KMonStrategy) and all(o is not ent.join for o in d.plan.operators):
            d.detach(eid)
    config = getattr(d, CONFIG_ATTR, None) or KMonConfig()
    if config.mode == "off" or h.pnode is None:
        return []
    out = []
    for pn, op in _joins(h.pnode):
        if op.kmon is not None or op.counters.calls or pn.flowed or pn.users - {h.id} or not _fresh(op):
            continue
        s = strategy_for(d.catalog, op, pn.node, config)
        if s is None:
            continue
        _private_state(d, op)
        op.kmon = s
        d.attach(s)
        out.append(s)
    return out


def explain_lines(h: QueryHandle) -> list[str]:
    """The k-constraint lines of a query's EXPLAIN (one per join using constraints)."""
    if h.pnode is None:
        return []
    return [op.kmon.summary() for _, op in _joins(h.pnode) if op.kmon is not None]
