"""Logical plan → the characterization's normal form (normal_form.py), or `Outside` naming the
construct that puts the query outside the class the characterization covers."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from cqlstream.cql.boundedness.closure import Atom, Elem
from cqlstream.cql.boundedness.normal_form import (
    DUP_INSENSITIVE,
    STANDARD,
    Aggregation,
    AggTerm,
    NormalForm,
    Occurrence,
    Outside,
    Spj,
)
from cqlstream.cql.logical import expr as X
from cqlstream.cql.logical import nodes as L

# A plan column as the normal form sees it: an attribute, an integer constant, or None (anything
# else: an expression, a non-integer constant).
Term = Elem | None

_FLIP = {"<": ">", ">": "<", "=": "=", "<=": ">=", ">=": "<="}


class _Out(Exception):
    """Raised while walking a plan: the query is outside the class (message: why)."""


@dataclass
class _Builder:
    """What the walk of a plan has gathered so far: stream occurrences, attribute names, atoms."""

    occurrences: list[Occurrence] = field(default_factory=list)
    names: list[str] = field(default_factory=lambda: [""])
    atoms: list[Atom] = field(default_factory=list)
    int_attrs: set[int] = field(default_factory=set)
    unsatisfiable: bool = False

    def source(self, n: L.StreamSource) -> list[Term]:
        seen = Counter(o.stream for o in self.occurrences)[n.name]
        label = n.name if not seen else f"{n.name}#{seen + 1}"
        ids = []
        for a in n.attrs:
            ids.append(len(self.names))
            self.names.append(f"{label}.{a.name}")
            if a.type.kind == "int":
                self.int_attrs.add(ids[-1])
        self.occurrences.append(Occurrence(label, n.name, tuple(ids)))
        return [Elem(i) for i in ids]

    def term(self, e: X.Expr, cols: list[Term]) -> Term:
        if isinstance(e, X.ColRef):
            return cols[e.index]
        if isinstance(e, X.Const) and isinstance(e.value, int) and not isinstance(e.value, bool):
            return Elem(0, e.value)
        return None

    def predicate(self, p: X.Expr, cols: list[Term]) -> None:
        for c in X.conjuncts(p):
            self.atom(c, cols)

    def atom(self, c: X.Expr, cols: list[Term]) -> None:
        why = f"the predicate {c.sql()} is not a comparison (<, <=, =, >=, >) of integer columns and constants"
        if not (isinstance(c, X.Op) and c.op in _FLIP):
            raise _Out(why)
        left, right = (self.term(a, cols) for a in c.args)
        if left is None or right is None or any(not e.is_const and e.attr not in self.int_attrs for e in (left, right)):
            raise _Out(why)
        op = c.op
        if left.is_const and right.is_const:  # constant comparison: true (drop) or false (no result)
            ok = {"<": left.value < right.value, "=": left.value == right.value, ">": left.value > right.value}
            ok |= {"<=": left.value <= right.value, ">=": left.value >= right.value}
            self.unsatisfiable |= not ok[op]
            return
        if left.is_const:
            left, right, op = right, left, _FLIP[op]
        if op in ("<=", ">="):
            if not right.is_const:  # A <= B is the disjunction A < B or A = B
                raise _Out(f"the predicate {c.sql()} compares two columns with <= or >= (a disjunction)")
            # over the integers, A <= k is A < k + 1 (an equivalent query, so the same verdict)
            op, right = op[0], Elem(0, right.value + (1 if op == "<=" else -1))
        if op == ">":
            left, right = right, left
            op = "<"
        self.atoms.append(Atom(op, left, right))


def _walk(n: L.Plan, b: _Builder) -> list[Term]:
    """The columns of n's output as terms; predicates collected into b."""
    match n:
        case L.StreamSource():
            return b.source(n)
        case L.Window():
            if not n.unbounded:
                raise _Out(f"the window [{n.spec.sql()}]: only streams read whole are covered")
            return _walk(n.input, b)
        case L.Filter():
            cols = _walk(n.input, b)
            b.predicate(n.predicate, cols)
            return cols
        case L.Join():
            cols = [t for i in n.inputs for t in _walk(i, b)]
            if n.predicate is not None:
                b.predicate(n.predicate, cols)
            return cols
        case L.Project():
            cols = _walk(n.input, b)
            return [b.term(e, cols) for e in n.exprs]
        case L.RelationSource():
            raise _Out(f"the relation {n.name}: only streams are covered")
        case L.StreamJoin():  # Rstream(S [Now] ⋈ X): what the window says of the unrewritten plan
            raise _Out("the window [NOW]: only streams read whole are covered")
    raise _Out(f"the {type(n).__name__.lower()} operator: only select-project-join-aggregate is covered")


def _projected(terms: list[Term], what: str) -> tuple[int, ...]:
    out = []
    for t in terms:
        if t is None:
            raise _Out(f"an expression in the {what}: only attributes are covered")
        if not t.is_const:
            out.append(t.attr)
    return tuple(dict.fromkeys(out))


def _spj(b: _Builder, projected: tuple[int, ...], distinct: bool) -> Spj:
    atoms = b.atoms
    if b.unsatisfiable:  # keep a contradiction the closure will detect
        atoms = [*atoms, Atom("<", Elem(0, 1), Elem(0, 0))]
    return Spj(tuple(b.occurrences), tuple(b.names), tuple(atoms), projected, distinct)


def _aggregation(n: L.Aggregate) -> Aggregation:
    if n.having is not None:  # a selection over the aggregate (rewrites/having_in_aggregate.py)
        raise _Out("the filter operator over an aggregate (HAVING): only select-project-join-aggregate is covered")
    b = _Builder()
    cols = _walk(n.input, b)
    keys = _projected([b.term(k, cols) for k in n.keys], "GROUP BY")
    aggs = []
    for a in n.aggs:
        func = a.func.lower() + (" distinct" if a.distinct else "")
        if func not in STANDARD:
            raise _Out(f"the aggregate {a.sql()}: only the standard aggregates are covered")
        arg = None if a.arg is None else b.term(a.arg, cols)
        if a.arg is not None and (arg is None or arg.is_const):
            raise _Out(f"the aggregate {a.sql()}: only aggregates of attributes are covered")
        aggs.append(AggTerm(func, None if arg is None else arg.attr))
    insensitive = all(t.func in DUP_INSENSITIVE for t in aggs) and bool(aggs)
    return Aggregation(_spj(b, keys, insensitive), keys, tuple(aggs))


def normal_form(plan: L.Plan) -> NormalForm | Outside:
    """The plan as Π_L(σ_P(S1 × … × Sn)) or _G𝒢_F(σ_P(…)), or why it is not one."""
    try:
        return _normal_form(plan)
    except _Out as e:
        return Outside(str(e))


def _normal_form(plan: L.Plan) -> NormalForm:
    node, out = plan, None
    if isinstance(node, L.RelToStream):
        out, node = node.op, node.input
    if isinstance(node, L.Project) and isinstance(node.input, L.Aggregate):
        node = node.input  # expressions over the aggregates' results cost nothing to keep
    if isinstance(node, L.Aggregate):
        return _aggregation(node)
    if out not in (None, "istream"):
        raise _Out(f"{out.upper()} over a select-project-join: it re-emits (or never emits) the growing result")
    distinct = isinstance(node, L.Distinct)
    if isinstance(node, L.Distinct):
        node = node.relation_input  # (a window read by lifetimes: the window)
    b = _Builder()
    cols = _walk(node, b)
    if out is None and not plan.is_stream and not distinct:
        raise _Out("a relation result holding every result tuple so far (only streamed results are covered)")
    return _spj(b, _projected(cols, "SELECT list"), distinct)
