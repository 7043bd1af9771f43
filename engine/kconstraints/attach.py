"""Binding declared k-constraints to the 2-way joins of a newly registered query.

A join input qualifies when it is a window over a registered stream (through selections and
column-only projections), so its inserts are that stream's arrivals, or a registered relation
(inserts and deletes, as Linear Road's AccSeg joins), and the join has an equality between two
integer columns. The constraints of the streams that speak about those columns are applied (a
relation declares none, but its rows are pruned by the stream side's many-one, CA and OA, whose
arrivals say which relation rows no future insert can meet). A derived relation qualifies too
(a DISTINCT or an aggregate over such an input, as the paper's CurActiveCars): its inserts are not
the stream's arrivals, so no declared constraint applies to it, but when its plan makes the key
column unique at every instant (the only DISTINCT column, or the only group key) many-one holds
at every instant by construction. The paper's many-one (a row meets at most one insert of the key)
can still fail when the key is deleted and inserted again while a row of the other input lives: the
row then meets a second insert and withdraws the rule, as for a declared key; exact mode stays exact
either way. A join's output qualifies as well (the paper's AccSeg joins CurCarSeg, itself a join,
with AccCars): its column is a key when the join keeps one (`_join_keeps_unique`), and between a
derived relation and a partner with a unique key RIDS(0) is assumed (`assumed_rids`), since no
DDL can declare it, and withdrawn by its monitor if a row meets its partner later. The join then keeps private state
(instead of reading the inputs' shared stores) so that it can move rows out of memory. An input
qualifies only while nothing has flowed into it, since private state starts empty. Deletes
of a relation's rows keep exact mode exact like a window's expirations: a delete brings back the
other input's spilled rows of its key, and a spilled row's own delete removes it from the store."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING, cast

from cqlstream.cql.catalog import SourceDef
from cqlstream.cql.logical import expr as X
from cqlstream.cql.logical import nodes as L
from cqlstream.engine.column_reads import read_columns
from cqlstream.engine.kconstraints.columns import ColumnChoice, conjunct_columns, split_reads
from cqlstream.engine.kconstraints.constraints import CA, OA, RIDS, UNDECLARED, Constraint, ManyOne, from_defs
from cqlstream.engine.operators.join import JoinOp, classify

if TYPE_CHECKING:
    from cqlstream.cql.catalog import Catalog
    from cqlstream.engine.dsms import Dsms, QueryHandle
    from cqlstream.engine.kconstraints.config import KMonConfig
    from cqlstream.engine.kconstraints.strategy import KMonStrategy
    from cqlstream.engine.planner import PNode

INTEGER_KINDS = ("int", "byte", "timestamp")  # join keys k-Mon handles (int64 values)
CONFIG_ATTR = "kconstraints"  # a Dsms attribute holding the KMonConfig new joins get (default exact)


@dataclass(frozen=True)
class Side:
    """Where one join input's key column comes from. `arrivals`: the input's inserts are the
    source stream's arrivals (windows, selections, column projections only), so the stream's
    declared constraints speak about them. `unique`: why the column holds each value at most once
    at every instant (a derived relation's key), or None. `shape`: the derivation nearest the join
    when the input is a derived relation (`distinct`, `group by`, `join`), else empty."""

    source: str
    column: str
    arrivals: bool = True
    unique: str | None = None
    shape: str = ""


def unique_reason(plan: L.Plan, col: int) -> str | None:
    """Why column `col` of relation `plan` holds each value at most once at every instant: the
    only column of a DISTINCT, the only group key of an aggregate, or a join that keeps a column
    unique (`_join_keeps_unique`). Selections and column projections keep it. (A
    `[Partition By col Rows 1]` window's key is unique at every instant too, but it is inserted
    again at every arrival of its value, so a row of the other input would meet many inserts of
    it: not many-one in the paper's sense.)"""
    while True:
        if isinstance(plan, L.Distinct):
            return "distinct" if len(plan.schema) == 1 else None
        if isinstance(plan, L.Aggregate):
            return "group by" if len(plan.keys) == 1 and col == 0 else None
        if isinstance(plan, L.Join):
            return "join" if _join_keeps_unique(plan, col) else None
        step = _through(plan, col)
        if step is None:
            return None
        plan, col = step


def _owner(join: L.Join, col: int) -> tuple[int, int]:
    """(input, column of that input) that output column `col` of a join is."""
    offs = join.offsets()
    i = max(k for k, o in enumerate(offs) if o <= col)
    return i, col - offs[i]


def _join_keeps_unique(join: L.Join, col: int) -> bool:
    """Output column `col` of a join, read from input i, is unique at every instant when it is
    unique in input i and every other input is reached from i through equalities whose far side
    is a unique column of that input: a row of i then joins at most one row of each other input
    (the join is many-one from i), so it is in at most one output row. Example: a DISTINCT joined
    on its key with a GROUP BY on its key; not LastRep ⋈ CurActiveCars read from LastRep, whose
    partitioned window is not taken as a key (above)."""
    i, ci = _owner(join, col)
    if unique_reason(join.inputs_[i], ci) is None:
        return False
    widths = [len(p.schema) for p in join.inputs_]
    equi = classify(join.predicate, join.offsets(), widths)[0]
    covered, grew = {i}, True
    while grew:
        grew = False
        for e in equi:
            for near, far, ef in ((e.a, e.b, e.eb), (e.b, e.a, e.ea)):
                if (
                    near in covered
                    and far not in covered
                    and isinstance(ef, X.ColRef)
                    and unique_reason(join.inputs_[far], ef.index) is not None
                ):
                    covered.add(far)
                    grew = True
    return len(covered) == len(join.inputs_)


def _through(plan: L.Plan, col: int) -> tuple[L.Plan, int] | None:
    """Column `col` of `plan` followed through a selection or a plain column of a projection."""
    if isinstance(plan, L.Filter):
        return plan.input, col
    if isinstance(plan, L.Project) and isinstance(plan.exprs[col], X.ColRef):
        return plan.input, plan.exprs[col].index  # type: ignore[attr-defined]
    return None


def lineage(plan: L.Plan, col: int) -> Side | None:
    """The source column that column `col` of `plan` reads: through a window over a stream, of a
    relation, or (not as the stream's arrivals) through a DISTINCT, an aggregate's group key or a
    join (the input the column comes from). `shape` names the derivation met first."""
    top, top_col = plan, col
    windowed, arrivals, shape = False, True, ""
    while True:
        if isinstance(plan, L.StreamSource):
            if not windowed:
                return None
            return Side(plan.name, plan.attrs[col].name, arrivals, unique_reason(top, top_col), shape)
        if isinstance(plan, L.RelationSource):
            return Side(plan.name, plan.attrs[col].name, arrivals, unique_reason(top, top_col), shape)
        if isinstance(plan, L.Window):
            windowed = True
            plan = plan.input
        elif isinstance(plan, L.Distinct):
            arrivals, shape = False, shape or "distinct"
            plan = plan.relation_input  # (a window read by lifetimes: the window)
        elif isinstance(plan, L.Aggregate) and col < len(plan.keys) and isinstance(plan.keys[col], X.ColRef):
            arrivals, shape = False, shape or "group by"
            col = plan.keys[col].index  # type: ignore[attr-defined]
            plan = plan.input
        elif isinstance(plan, L.Join):
            arrivals, shape = False, shape or "join"
            i, col = _owner(plan, col)
            plan = plan.inputs_[i]
        else:
            step = _through(plan, col)
            if step is None:
                return None
            plan, col = step


def _same(a: str, b: str) -> bool:
    return a.lower() == b.lower()


def applicable(sides: list[Side], declared: list[list[Constraint]]) -> list[tuple[int, Constraint, str | None]]:
    """(input whose state it prunes, constraint, role) for a join on sides[0] = sides[1]."""
    out: list[tuple[int, Constraint, str | None]] = []
    unique = [any(isinstance(c, ManyOne) and _same(c.column, sides[x].column) for c in declared[x]) for x in range(2)]
    for x in range(2):
        y = 1 - x
        cx, sy, cy = sides[x].column, sides[y].source, sides[y].column
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


def constraints_of(catalog: Catalog, side: Side) -> list[Constraint]:
    """The constraints that hold on one join input's key: the source stream's declared ones when
    the input's inserts are its arrivals, and many-one when the plan makes the key unique."""
    d = catalog.get(side.source)
    out = from_defs(d.name, d.constraints) if side.arrivals and isinstance(d, SourceDef) else []
    if side.unique is not None and not any(isinstance(c, ManyOne) and _same(c.column, side.column) for c in out):
        out.append(ManyOne(side.source, side.column, derived=side.unique))
    return out


def assumed_rids(x: Side, y: Side, declared_y: list[Constraint]) -> RIDS | None:
    """RIDS(0) from a derived relation X to a partner Y whose key is unique (many-one X → Y),
    assumed rather than declared: no DDL can speak about a relation the plan computes, and a join of
    two relations derived from the same arrivals often meets its partner at the instant the row is
    born or never (the paper's AccSeg: a car's CurCarSeg row is replaced at each of its reports, and
    AccCars inserts the car only at one of them). The monitor withdraws it at the first row that
    meets a partner later; exact mode's store brings the rows back, so results do not change, and
    approximate mode does not use it (`KMonStrategy._active`). Not for an X that is a stream's
    arrivals: a RIDS on those can be declared."""
    if x.arrivals or not any(isinstance(c, ManyOne) and _same(c.column, y.column) for c in declared_y):
        return None
    return RIDS(x.source, x.column, y.source, y.column, 0, assumed=f"{x.shape} → {y.shape or 'window'}")


def strategy_for(catalog: Catalog, op: JoinOp, node: L.Plan, config: KMonConfig) -> KMonStrategy | None:
    if not isinstance(node, L.Join) or op.n != 2:
        return None
    for e in op.equi:
        if not (isinstance(e.ea, X.ColRef) and isinstance(e.eb, X.ColRef)):
            continue
        if not all(c.type.kind in INTEGER_KINDS for c in (e.ea, e.eb)):
            continue
        cols = {e.a: e.ea.index, e.b: e.eb.index}
        found = [lineage(node.inputs_[x], cols[x]) for x in range(2)]
        if found[0] is None or found[1] is None:
            continue
        sides: list[Side] = [found[0], found[1]]
        declared = [constraints_of(catalog, s) for s in sides]
        if config.detect:  # candidates the monitors may find (k = -1: not declared, starts at ∞)
            for x in range(2):
                if not (sides[x].arrivals and _is_stream(catalog, sides[x].source)):
                    continue  # constraints describe stream arrivals
                sx, cx, sy, cy = sides[x].source, sides[x].column, sides[1 - x].source, sides[1 - x].column
                have = {(type(c), c.column.lower()) for c in declared[x]}
                for kind in (CA, OA):
                    if (kind, cx.lower()) not in have:
                        declared[x].append(kind(sx, cx, UNDECLARED))
                if not any(isinstance(c, RIDS) and _same(c.column, cx) for c in declared[x]):
                    declared[x].append(RIDS(sx, cx, sy, cy, UNDECLARED))
        for x in range(2):
            assumed = assumed_rids(sides[x], sides[1 - x], declared[1 - x])
            if assumed is not None:
                declared[x].append(assumed)
        applied = applicable(sides, declared)
        if applied:
            from cqlstream.engine.kconstraints.strategy import KMonStrategy  # its first use: ~20 ms of imports

            exprs = (e.ea, e.eb) if e.a == 0 else (e.eb, e.ea)
            return KMonStrategy(op, exprs, applied, config, relational=(not sides[0].arrivals, not sides[1].arrivals))
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
    """Attach a strategy to each fresh 2-way join of `h` that declared constraints apply to.
    The strategy module (~20 ms of imports) loads with the first join a constraint applies to: a
    run without such a join has no strategy to detach or attach."""
    loaded = sys.modules.get("cqlstream.engine.kconstraints.strategy")
    if loaded is not None:  # else no strategy exists yet
        for eid, ent in list(d.attached.items()):  # strategies of joins no longer in the plan
            if isinstance(ent, loaded.KMonStrategy) and all(o is not ent.join for o in d.plan.operators):
                d.detach(eid)
    joins = _joins(h.pnode) if h.pnode is not None else []
    if not joins:
        return []
    from cqlstream.engine.kconstraints.config import KMonConfig

    config = getattr(d, CONFIG_ATTR, None) or KMonConfig()
    if config.mode == "off":
        return []
    out = []
    for pn, op in joins:
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


# ------------------------------------------------------------------ column elimination (columns.py)


def _label(a: L.Attribute) -> str:
    return f"{a.qualifier}.{a.name}" if a.qualifier else a.name


def _kmon_joins(d: Dsms) -> list[tuple[PNode, JoinOp]]:
    return [
        (pn, cast("JoinOp", pn.op))
        for pn in d.plan.nodes.values()
        if pn.op is not None and pn.op.kind == JoinOp.kind and cast("JoinOp", pn.op).kmon is not None
    ]


def _reads(d: Dsms, also: PNode | None = None) -> dict[int, frozenset[int]]:
    outputs = [h.pnode for h in d.queries.values() if h.pnode is not None] + ([also] if also else [])
    return read_columns(d.plan.nodes.values(), outputs)


def _choice(pn: PNode, op: JoinOp, read: frozenset[int], eliminate: bool) -> ColumnChoice:
    assert isinstance(pn.node, L.Join)
    widths = [len(t) for t in op.full_types]
    return ColumnChoice(
        [[_label(a) for a in i.schema] for i in pn.node.inputs_],
        split_reads(read, widths),
        [frozenset(c) for c in conjunct_columns(op.predicate, widths)],
        eliminate,
    )


def choose_columns(d: Dsms, reads: dict[int, frozenset[int]] | None = None) -> None:
    """Give every k-Mon join that has stored no row yet the columns the whole plan reads of it
    (the union over the queries sharing it); joins already storing rows keep their choice.
    `reads`: the plan's read columns when the caller has them (engine/column_pruning.py)."""
    reads = _reads(d) if reads is None else reads
    for pn, op in _kmon_joins(d):
        s = cast("KMonStrategy", op.kmon)
        if not s.started:
            s.keep_columns(_choice(pn, op, reads.get(id(pn), frozenset()), s.config.eliminate_columns))


def reaches(pn: PNode, target: PNode) -> bool:
    """Whether `target` is pn or below it."""
    todo, seen = [pn], set()
    while todo:
        p = todo.pop()
        if p is target:
            return True
        if id(p) not in seen:
            seen.add(id(p))
            todo.extend(p.inputs)
    return False


def column_conflicts(d: Dsms, new: PNode) -> list[PNode]:
    """k-Mon joins storing rows without columns the plan now reads (a query registered later,
    whose output is `new`, reads what the earlier ones did not): such a query must not share them."""
    reads = _reads(d, new)
    out = []
    for pn, op in _kmon_joins(d):
        s = cast("KMonStrategy", op.kmon)
        if s.started and s.columns is not None:
            need = _choice(pn, op, reads.get(id(pn), frozenset()), True)
            if not s.columns.covers(need.kept):
                out.append(pn)
    return out


def explain_lines(h: QueryHandle) -> list[str]:
    """The k-constraint lines of a query's EXPLAIN (one per join using constraints)."""
    if h.pnode is None:
        return []
    return [op.kmon.summary() for _, op in _joins(h.pnode) if op.kmon is not None]
