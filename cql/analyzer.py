"""Semantic analysis: AST + catalog → analyzed query (normalized AST, typed logical plan, notes).

Resolves names and types, expands `*`, and applies CQL's defaults (docs/semantics.md, thesis
§2.1): a stream read without a window gets `[Range Unbounded]`; a query monotonic over streams
read only through default windows gets an implicit Istream (so `select * from S` is a stream and
thesis Ex. 2.1.2 stays a relation); an Istream over something that already is a stream is dropped.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field, replace

from cqlstream.cql import ast
from cqlstream.cql import types as T
from cqlstream.cql.catalog import UNIT_MS, Catalog, SourceDef, ViewDef
from cqlstream.cql.errors import CqlError, Pos, did_you_mean
from cqlstream.cql.functions import ScalarFunction
from cqlstream.cql.logical import expr as X
from cqlstream.cql.logical import nodes as L
from cqlstream.cql.naming import deduplicate, derived_name


@dataclass(frozen=True)
class OuterRef(X.Expr):
    """A correlated reference to column `index` of the enclosing block (analysis only)."""

    index: int
    type: T.DataType
    name: str = field(default="", compare=False)

    def sql(self) -> str:
        return f"outer.{self.name}"


@dataclass(frozen=True)
class RelationArg(X.Expr):
    """A relation passed by name to a user-defined function (`lookup(P.destAddr, T)`, thesis §4.1.1)."""

    name: str
    type: T.DataType = T.DataType("varchar")

    def sql(self) -> str:
        return f"RELATION {self.name}"


@dataclass
class AnalyzedQuery:
    """The result of analysis: what the user wrote, the same with defaults made explicit, the plan."""

    query: ast.Query
    normalized: ast.Query
    plan: L.Plan
    notes: list[str]
    text: str | None = None

    @property
    def kind(self) -> str:
        return "stream" if self.plan.is_stream else "relation"

    @property
    def schema(self) -> tuple[L.Attribute, ...]:
        return self.plan.schema


@dataclass(frozen=True)
class AnalyzeOptions:
    """`stream_compat`: no implicit Istream at the top level (STREAM 0.6's behaviour)."""

    stream_compat: bool = False


# ------------------------------------------------------------------ scopes


@dataclass
class _Entry:
    """One FROM item in scope: its alias, the source it reads, its attributes and where they start
    in the row."""

    alias: str
    source_name: str | None
    attrs: tuple[L.Attribute, ...]
    offset: int
    also: str | None = None  # a second name that qualifies this entry


@dataclass
class _Scope:
    """The FROM items a name may refer to, and the enclosing query's scope (correlated subqueries)."""

    entries: list[_Entry]
    outer: _Scope | None = None

    @property
    def width(self) -> int:
        return sum(len(e.attrs) for e in self.entries)

    def aliases(self) -> list[str]:
        """The names that qualify columns in this scope (for "did you mean" hints)."""
        return [n for e in self.entries for n in (e.alias, e.also) if n]

    def column_names(self) -> list[str]:
        """The column names visible here and in the enclosing scopes (for "did you mean" hints)."""
        outer = self.outer.column_names() if self.outer is not None else []
        return [a.name for e in self.entries for a in e.attrs] + outer

    def entry(self, alias: str) -> _Entry | None:
        for e in self.entries:
            if alias.lower() in (e.alias.lower(), (e.also or "").lower()):
                return e
        return None

    def lookup(self, col: ast.Column) -> tuple[int, L.Attribute] | None:
        """Position and attribute of a column in this scope only; ambiguity is an error."""
        if col.qualifier is not None:
            e = self.entry(col.qualifier)
            if e is None:
                return None
            for i, a in enumerate(e.attrs):
                if a.name.lower() == col.name.lower():
                    return e.offset + i, a
            hint = did_you_mean(col.name, [a.name for a in e.attrs])
            raise CqlError("unknown_column", f"'{e.alias}' has no column '{col.name}'{hint}", col.pos)
        hits = [
            (e.offset + i, a, e)
            for e in self.entries
            for i, a in enumerate(e.attrs)
            if a.name.lower() == col.name.lower()
        ]
        if len(hits) > 1:
            names = " or ".join(f"{e.alias}.{a.name}" for _, a, e in hits[:3])
            raise CqlError("ambiguous_column", f"column '{col.name}' is ambiguous: {names}", col.pos)
        return (hits[0][0], hits[0][1]) if hits else None


def _span(node: object) -> Pos | None:
    return getattr(node, "pos", None)


# ------------------------------------------------------------------ expression binding


# post-aggregation binding: the group keys, the aggregate calls, and the GROUP BY expressions
Group = tuple[list[X.Expr], list[X.AggCall], list[ast.Expr]]


class _Binder:
    """Binds AST expressions to typed logical expressions over one scope.

    `group` (keys, aggs) switches to post-aggregation binding: group-key expressions and aggregate
    calls become references to the Aggregate's output columns.
    """

    def __init__(self, analyzer: Analyzer, scope: _Scope, where: str, group: Group | None = None) -> None:
        self.a = analyzer
        self.scope = scope
        self.where = where  # clause name for error messages
        self.group = group
        self.correlated = False

    def bind(self, e: ast.Expr) -> X.Expr:
        if self.group is not None:
            hit = self._group_ref(e)
            if hit is not None:
                return hit
        method = getattr(self, "_" + type(e).__name__, None)
        if method is None:
            raise CqlError("unsupported", f"{type(e).__name__} is not supported here", _span(e))
        return method(e)

    def bool(self, e: ast.Expr, operator: str | None = None) -> X.Expr:
        """Bind a condition: a whole clause (`WHERE`), or the operand of `operator` (AND, CASE WHEN)."""
        b = self.bind(e)
        if b.type.kind not in ("bool", "null"):
            what = f"{operator} needs a boolean" if operator else f"{self.where} must be a boolean condition"
            raise CqlError("type_mismatch", f"{what}, got {b.type}", _span(e))
        return b

    # --- post-aggregation references
    def _group_ref(self, e: ast.Expr) -> X.Expr | None:
        assert self.group is not None  # bind() asks only when binding after aggregation
        keys, aggs, key_asts = self.group
        if (
            isinstance(e, ast.Call)
            and self.a.catalog.functions.aggregate(e.name)
            and not self.a.catalog.functions.scalar(e.name)
        ):
            agg = self.a.agg_call(e, self.scope)
            idx = aggs.index(agg)
            return X.ColRef(len(keys) + idx, agg.type, agg.sql())
        if _contains_agg(e, self.a.catalog) or isinstance(e, (ast.Literal, ast.Star)):
            return None
        pre = _Binder(self.a, self.scope, self.where).bind(e)
        if pre in keys:
            i = keys.index(pre)
            return X.ColRef(i, pre.type, _display(key_asts[i]))
        if isinstance(e, ast.Column):
            raise CqlError(
                "not_grouped", f"column '{_display(e)}' must appear in GROUP BY or inside an aggregate", e.pos
            )
        return None

    # --- leaves
    def _Literal(self, e: ast.Literal) -> X.Expr:
        t = {"int": T.INT, "float": T.FLOAT, "string": T.VARCHAR, "bool": T.BOOL, "null": T.NULL}[e.kind]
        return X.Const(e.value, t)

    def _Column(self, e: ast.Column) -> X.Expr:
        hit = self.scope.lookup(e)
        if hit is not None:
            i, attr = hit
            # Qualify names when they could be confused with another block's (joins; subqueries, whose
            # columns end up next to the enclosing query's in a semijoin predicate).
            qualify = len(self.scope.entries) > 1 or self.scope.outer is not None
            return X.ColRef(i, attr.type, attr.display() if qualify else attr.name)
        outer = self.scope.outer
        if outer is not None:
            hit = outer.lookup(e)
            if hit is not None:
                self.correlated = True
                i, attr = hit
                return OuterRef(i, attr.type, attr.display())
        if any(s.lookup(e) is not None for s in self.a.enclosing):
            raise CqlError(
                "unsupported_correlation",
                f"'{_display(e)}' refers to an enclosing query; a subquery may "
                "refer only to the query immediately around it, and only in its own WHERE",
                e.pos,
            )
        if e.qualifier is not None and self.scope.entry(e.qualifier) is None:
            hint = did_you_mean(e.qualifier, self.scope.aliases())
            raise CqlError("unknown_source", f"unknown table or alias '{e.qualifier}' in {self.where}{hint}", e.pos)
        if e.qualifier is None and self.scope.entry(e.name) is not None:
            raise CqlError(
                "tuple_reference",
                f"'{e.name}' names a whole tuple, which is only allowed on the left of IN (subquery)",
                e.pos,
            )
        hint = did_you_mean(e.name, self.scope.column_names())
        raise CqlError("unknown_column", f"unknown column '{_display(e)}' in {self.where}{hint}", e.pos)

    def _Star(self, e: ast.Star) -> X.Expr:
        raise CqlError("bad_star", "'*' is only allowed as a select item or in count(*)", e.pos)

    # --- operators
    def _Unary(self, e: ast.Unary) -> X.Expr:
        v = self.bind(e.operand)
        if e.op == "not":
            if v.type.kind not in ("bool", "null"):
                raise CqlError("type_mismatch", f"NOT needs a boolean, got {v.type}", e.pos)
            return X.Op("not", (v,), T.BOOL)
        if not v.type.numeric:
            raise CqlError("type_mismatch", f"unary '{e.op}' needs a number, got {v.type}", e.pos)
        return v if e.op == "+" else X.Op("neg", (v,), v.type)

    def _Binary(self, e: ast.Binary) -> X.Expr:
        if e.op in ("and", "or"):
            l, r = self.bool(e.left, e.op.upper()), self.bool(e.right, e.op.upper())
            return X.Op(e.op, (l, r), T.BOOL)
        l, r = self.bind(e.left), self.bind(e.right)
        if e.op in X.COMPARISONS:
            if not T.comparable(l.type, r.type):
                raise CqlError("type_mismatch", f"cannot compare {l.type} with {r.type}", e.pos)
            return X.Op(e.op, (l, r), T.BOOL)
        if e.op == "||":
            return X.Op("||", (l, r), T.VARCHAR)
        rt = T.arithmetic(l.type, r.type)
        if rt is None:
            raise CqlError("type_mismatch", f"cannot apply '{e.op}' to {l.type} and {r.type}", e.pos)
        op = "div" if e.op == "/" and rt == T.INT else e.op
        return X.Op(op, (l, r), rt)

    def _Between(self, e: ast.Between) -> X.Expr:
        v, lo, hi = self.bind(e.operand), self.bind(e.low), self.bind(e.high)
        for b in (lo, hi):
            if not T.comparable(v.type, b.type):
                raise CqlError("type_mismatch", f"BETWEEN compares {v.type} with {b.type}", e.pos)
        out = X.Op("and", (X.Op(">=", (v, lo), T.BOOL), X.Op("<=", (v, hi), T.BOOL)), T.BOOL)
        return X.Op("not", (out,), T.BOOL) if e.negated else out

    def _InList(self, e: ast.InList) -> X.Expr:
        v = self.bind(e.operand)
        items = tuple(self.bind(i) for i in e.items)
        for it, node in zip(items, e.items):
            if not T.comparable(v.type, it.type):
                raise CqlError("type_mismatch", f"IN list compares {v.type} with {it.type}", _span(node))
        out = X.Op("in", (v,) + items, T.BOOL)
        return X.Op("not", (out,), T.BOOL) if e.negated else out

    def _Like(self, e: ast.Like) -> X.Expr:
        v, p = self.bind(e.operand), self.bind(e.pattern)
        if not (v.type.textual and p.type.textual):
            raise CqlError("type_mismatch", f"LIKE needs strings, got {v.type} and {p.type}", e.pos)
        out = X.Op("like", (v, p), T.BOOL)
        return X.Op("not", (out,), T.BOOL) if e.negated else out

    def _IsNull(self, e: ast.IsNull) -> X.Expr:
        out = X.Op("is_null", (self.bind(e.operand),), T.BOOL)
        return X.Op("not", (out,), T.BOOL) if e.negated else out

    def _Case(self, e: ast.Case) -> X.Expr:
        whens = []
        operand = self.bind(e.operand) if e.operand is not None else None
        for cond, res in e.whens:
            if operand is not None:
                c = self.bind(cond)
                if not T.comparable(operand.type, c.type):
                    raise CqlError("type_mismatch", f"CASE compares {operand.type} with {c.type}", _span(cond))
                c = X.Op("=", (operand, c), T.BOOL)
            else:
                c = self.bool(cond, "CASE WHEN")
            whens.append((c, self.bind(res)))
        default = self.bind(e.default) if e.default is not None else X.Const(None, T.NULL)
        rt = default.type
        for (_, r), (_, node) in zip(whens, e.whens):
            nt = T.common(rt, r.type)
            if nt is None:
                raise CqlError("type_mismatch", f"CASE branches mix {rt} and {r.type}", _span(node))
            rt = nt
        return X.CaseWhen(tuple(whens), default, rt)

    def _Cast(self, e: ast.Cast) -> X.Expr:
        v = self.bind(e.operand)
        target = T.resolve(e.type)
        ok = (
            v.type.kind == "null"
            or target.textual
            or (v.type.numeric and target.numeric)
            or (v.type.textual and target.kind in ("int", "float", "bool", "timestamp"))
            or v.type.kind == target.kind
        )
        if not ok:
            raise CqlError("type_mismatch", f"cannot cast {v.type} to {target}", e.pos)
        return X.Cast(v, target)

    def _Call(self, e: ast.Call) -> X.Expr:
        fns = self.a.catalog.functions
        fn = fns.scalar(e.name)
        if fn is None:
            if fns.aggregate(e.name):
                raise CqlError("misplaced_aggregate", f"aggregate {e.name}() is not allowed in {self.where}", e.pos)
            hint = did_you_mean(e.name, [*fns.scalars, *fns.aggregates])
            raise CqlError("unknown_function", f"unknown function '{e.name}'{hint}", e.pos)
        if e.star or e.distinct:
            raise CqlError("bad_call", f"{e.name}() is not an aggregate: '*' and DISTINCT are not allowed", e.pos)
        n = len(e.args)
        if n < fn.min_args or (fn.max_args is not None and n > fn.max_args):
            want = (
                str(fn.min_args)
                if fn.max_args == fn.min_args
                else (f"{fn.min_args} or more" if fn.max_args is None else f"{fn.min_args} to {fn.max_args}")
            )
            raise CqlError("bad_call", f"{e.name}() takes {want} argument(s), got {n}", e.pos)
        args = tuple(self._arg(a, fn) for a in e.args)
        rt = fn.result(tuple(a.type for a in args))
        if isinstance(rt, str):
            raise CqlError("type_mismatch", f"{e.name}() {rt}", e.pos)
        return X.Func(fn.name, args, rt)

    def _arg(self, a: ast.Expr, fn: ScalarFunction) -> X.Expr:
        # A UDF may take a whole relation by name (thesis §4.1.1: lookup(P.destAddr, T)).
        if fn.impl is not None and isinstance(a, ast.Column) and a.qualifier is None and self.scope.lookup(a) is None:
            d = self.a.catalog.get(a.name)
            if isinstance(d, SourceDef) and d.kind == "relation":
                return RelationArg(d.name)
        return self.bind(a)

    def _InQuery(self, e: ast.InQuery) -> X.Expr:
        raise CqlError("misplaced_subquery", "IN (subquery) is only supported as an AND-term of WHERE", e.pos)

    def _Exists(self, e: ast.Exists) -> X.Expr:
        raise CqlError("misplaced_subquery", "EXISTS (subquery) is only supported as an AND-term of WHERE", e.pos)


def _display(e: ast.Expr) -> str:
    from cqlstream.cql.printer import to_cql

    try:
        return " ".join(to_cql(e).split())
    except Exception:  # the printer is for display only here
        return type(e).__name__


def _contains_agg(e: object, catalog: Catalog) -> bool:
    """Whether an AST expression contains an aggregate call (not looking into subqueries)."""
    if isinstance(e, ast.Call) and catalog.functions.aggregate(e.name) and not catalog.functions.scalar(e.name):
        return True
    if isinstance(e, (ast.InQuery, ast.Exists)):
        return isinstance(e, ast.InQuery) and _contains_agg(e.operand, catalog)
    return any(_contains_agg(v, catalog) for v in _children(e))


def _children(e: object) -> list[ast.Expr]:
    if not isinstance(e, ast.Expr):
        return []
    out: list[ast.Expr] = []
    for name in e.__dataclass_fields__:
        v = getattr(e, name)
        if isinstance(v, ast.Expr):
            out.append(v)
        elif isinstance(v, tuple):
            for x in v:
                if isinstance(x, ast.Expr):
                    out.append(x)
                elif isinstance(x, tuple):
                    out.extend(y for y in x if isinstance(y, ast.Expr))
    return out


def _and_terms(e: ast.Expr | None) -> list[ast.Expr]:
    if e is None:
        return []
    if isinstance(e, ast.Binary) and e.op == "and":
        return _and_terms(e.left) + _and_terms(e.right)
    return [e]


def _subquery_term(e: ast.Expr) -> tuple[ast.Exists | ast.InQuery, bool] | None:
    """(subquery node, anti) if an AND-term is a (possibly negated) IN/EXISTS subquery."""
    anti = False
    while isinstance(e, ast.Unary) and e.op == "not":
        anti, e = not anti, e.operand
    if isinstance(e, ast.Exists):
        return e, anti != e.negated
    if isinstance(e, ast.InQuery):
        return e, anti != e.negated
    return None


# ------------------------------------------------------------------ the analyzer


@dataclass
class _Block:
    """A query's plan plus what an enclosing IN/EXISTS needs to decorrelate it."""

    plan: L.Plan
    normalized: ast.Query
    # for simple selects: the plan before projection and the bound select items over it
    pre_plan: L.Plan | None = None
    items: tuple[X.Expr, ...] = ()
    correlated: tuple[X.Expr, ...] = ()  # conjuncts over (outer ++ pre_plan) columns


class Analyzer:
    def __init__(self, catalog: Catalog, options: AnalyzeOptions | None = None):
        self.catalog = catalog
        self.options = options or AnalyzeOptions()
        self.notes: list[str] = []
        self._anon = 0
        # Scopes of the queries around the one being analyzed (IN/EXISTS nesting); only to explain
        # references that resolve there but cannot be decorrelated.
        self.enclosing: list[_Scope] = []

    # --- entry
    def analyze(self, q: ast.Query) -> tuple[L.Plan, ast.Query]:
        b = self.query(q, implicit=not self.options.stream_compat)
        return b.plan, b.normalized

    # --- queries
    def query(self, q: ast.Query, implicit: bool, outer: _Scope | None = None) -> _Block:
        if isinstance(q, ast.Select):
            b = self.select(q, outer)
        elif isinstance(q, ast.TableQuery):
            d = self.lookup(q.name, q.pos)
            b = _Block(self.source_plan(d), q)
        elif isinstance(q, ast.SetOp):
            b = self.set_op(q, outer)
        elif isinstance(q, ast.RelToStream):
            return self.rel_to_stream(q, outer)
        else:
            raise CqlError("unsupported", f"unsupported query form {type(q).__name__}", _span(q))
        top = implicit_reading(b.plan) if implicit else None
        if top is not None:
            self.notes.append(
                "implicit ISTREAM: the query is monotonic and reads its streams through default "
                "[RANGE UNBOUNDED] windows, so its result is a stream"
            )
            return _Block(top, ast.RelToStream("istream", b.normalized))
        return b

    def rel_to_stream(self, q: ast.RelToStream, outer: _Scope | None) -> _Block:
        inner = self.query(q.query, implicit=False)
        plan = inner.plan
        if plan.is_stream:
            if q.op == "istream":
                self.notes.append("redundant ISTREAM removed: its argument is already a stream")
                return _Block(plan, inner.normalized)
            plan = L.Window(plan, L.RangeSpec(None), default=True)
        return _Block(L.RelToStream(q.op, plan), ast.RelToStream(q.op, inner.normalized))

    def set_op(self, q: ast.SetOp, outer: _Scope | None) -> _Block:
        sides = [self.query(s, implicit=False) for s in (q.left, q.right)]
        plans = [self.as_relation(s.plan) for s in sides]
        l, r = plans
        op = q.op.upper()
        self.check_units([(l, f"the left side of {op}", None), (r, f"the right side of {op}", _span(q.right) or q.pos)])
        if len(l.schema) != len(r.schema):
            raise CqlError(
                "set_width", f"{q.op.upper()} inputs have {len(l.schema)} and {len(r.schema)} columns", q.pos
            )
        types = []
        for a, b in zip(l.schema, r.schema):
            t = T.common(a.type, b.type)
            if t is None:
                raise CqlError("type_mismatch", f"{q.op.upper()} column '{a.name}': {a.type} vs {b.type}", q.pos)
            types.append(t)
        l, r = _cast_to(l, types), _cast_to(r, types)
        return _Block(L.SetOp(q.op, q.all, l, r), ast.SetOp(q.op, q.all, sides[0].normalized, sides[1].normalized))

    def check_units(self, parts: Iterable[tuple[L.Plan, str, Pos | None]]) -> None:
        """`parts`: (plan, description, pos) combined by one operator; their streams must share a time unit."""
        first = None
        for plan, what, pos in parts:
            unit = _time_unit(plan)
            if unit is None:
                continue
            if first is None:
                first = (unit, what)
            elif unit != first[0]:
                raise CqlError(
                    "time_unit_mismatch",
                    f"{what} is timed in {unit}s but {first[1]} in {first[0]}s: "
                    "streams with different time units cannot be combined in one query",
                    pos,
                )

    def as_relation(self, plan: L.Plan) -> L.Plan:
        return L.Window(plan, L.RangeSpec(None), default=True) if plan.is_stream else plan

    def lookup(self, name: str, pos: Pos | None) -> SourceDef | ViewDef:
        d = self.catalog.get(name)
        if d is None:
            hint = did_you_mean(name, self.catalog.names())
            known = ", ".join(sorted(self.catalog.names())[:8]) or "none registered"
            # a close name is the likely fix; otherwise list what there is
            tail = hint or f" (known: {known})"
            raise CqlError("unknown_source", f"unknown stream, relation or view '{name}'{tail}", pos)
        return d

    def source_plan(self, d: SourceDef | ViewDef) -> L.Plan:
        return d.plan() if isinstance(d, SourceDef) else d.plan

    # --- FROM items
    def from_item(self, item: ast.FromItem, offset: int) -> tuple[_Entry, L.Plan, ast.FromItem]:
        norm_source: str | ast.Query
        if isinstance(item.source, str):
            d = self.lookup(item.source, item.pos)
            plan, source_name, norm_source = self.source_plan(d), d.name, item.source
            alias = item.alias or d.name
        else:
            sub = self.query(item.source, implicit=True)
            plan, source_name, norm_source = sub.plan, None, sub.normalized
            if item.alias is None:
                self._anon += 1
            alias = item.alias or f"subquery{self._anon}"
        window, sample = item.window, item.sample
        if plan.is_stream:
            if sample is not None:
                if not 0 < sample <= 100:
                    raise CqlError("bad_sample", f"SAMPLE({sample:g}) must be a percentage in (0, 100]", item.pos)
                tol = item.sample_tolerate
                if tol is not None and not 0 < tol <= sample:
                    raise CqlError("bad_sample", f"SAMPLE TOLERATE {tol:g} must be in (0, {sample:g}]", item.pos)
                plan = L.Sample(plan, sample, tolerate=tol)
            if window is None:
                window = ast.RangeWindow(None)
                self.notes.append(f"{alias} is read through the default [RANGE UNBOUNDED] window")
                plan = L.Window(plan, L.RangeSpec(None), default=True)
            else:
                plan = self.window(plan, window, alias, source_name)
        else:
            what = f"relation '{source_name}'" if source_name else "a subquery whose result is a relation"
            if window is not None:
                raise CqlError(
                    "window_on_relation", f"window on {what}: windows apply to streams only", _span(window) or item.pos
                )
            if sample is not None:
                raise CqlError("sample_on_relation", f"SAMPLE on {what}: sampling applies to streams only", item.pos)
        attrs = tuple(L.Attribute(a.name, a.type, alias) for a in plan.schema)
        norm = ast.FromItem(norm_source, window, sample, alias if alias != item.source else None, item.sample_tolerate)
        return _Entry(alias, source_name, attrs, offset), plan, norm

    def window(self, plan: L.Plan, w: ast.Window, alias: str, source_name: str | None) -> L.Plan:
        entry = _Entry(alias, source_name, tuple(L.Attribute(a.name, a.type, alias) for a in plan.schema), 0)
        entry.also = source_name  # `S [Partition By S.x] as T`: inside the window, S qualifies too
        scope = _Scope([entry])
        if w.where is not None:
            plan = L.Filter(plan, _Binder(self, scope, "the window's WHERE").bool(w.where))
        unit = _time_unit(plan)
        spec: L.WindowSpec
        if isinstance(w, ast.RangeWindow):
            size = None if w.size is None else self.duration(w.size, unit, alias)
            slide = None if w.slide is None else self.duration(w.slide, unit, alias)
            if slide is not None and slide <= 0:
                raise CqlError("bad_window", "SLIDE must be positive", _span(w.slide))
            spec = L.RangeSpec(size, slide)
        elif isinstance(w, ast.NowWindow):
            spec = L.RangeSpec(0)
        elif isinstance(w, ast.RowsWindow):
            if w.size is not None and w.size < 1:
                raise CqlError("bad_window", "ROWS needs at least 1 row", w.pos)
            if w.slide is not None and w.slide < 1:
                raise CqlError("bad_window", "SLIDE must be positive", w.pos)
            spec = L.RowsSpec(w.size, w.slide)
        elif isinstance(w, ast.PartitionWindow):
            if w.rows < 1:
                raise CqlError("bad_window", "PARTITION BY ... ROWS needs at least 1 row", w.pos)
            keys = []
            for c in w.by:
                hit = scope.lookup(c) if (c.qualifier is None or scope.entry(c.qualifier)) else None
                if hit is None:
                    hint = did_you_mean(c.name, scope.column_names())
                    raise CqlError(
                        "unknown_column", f"unknown partition column '{_display(c)}' of '{alias}'{hint}", c.pos
                    )
                keys.append(hit[0])
            spec = L.PartitionSpec(tuple(keys), w.rows)
        else:
            raise CqlError("unsupported", "unsupported window", w.pos)
        return L.Window(plan, spec, tolerate=self.window_tolerance(w, unit, alias))

    def window_tolerance(self, w: ast.Window, unit: str | None, alias: str) -> int | None:
        """A window's `TOLERATE k` in the window's own measure (time units or rows), checked to lie
        between the least meaningful size and the stated size (docs/approximation.md)."""
        tol = getattr(w, "tolerate", None)
        if tol is None:
            return None
        low = self.duration(tol, unit, alias) if isinstance(tol, ast.Duration) else tol
        size = w.size if isinstance(w, (ast.RangeWindow, ast.RowsWindow)) else getattr(w, "rows", None)
        high = self.duration(size, unit, alias) if isinstance(size, ast.Duration) else size
        least = 0 if isinstance(w, ast.RangeWindow) else 1
        if low < least or (high is not None and low > high):
            top = "its size" if high is None else str(high)
            raise CqlError("bad_window", f"TOLERATE {low} must be between {least} and {top}", w.pos)
        return low

    def duration(self, d: ast.Duration, unit: str | None, alias: str) -> int:
        if d.unit is None:
            return d.amount
        if unit is None:  # a stream derived from relations only (e.g. ISTREAM of a relation)
            raise CqlError(
                "bad_window",
                f"'{alias}' reads no stream, so it has no time unit; give the window size as a plain number",
                d.pos,
            )
        ms = d.amount * UNIT_MS[d.unit]
        if ms % UNIT_MS[unit]:
            raise CqlError(
                "bad_window",
                f"{d.amount} {d.unit}(s) is not a whole number of {unit}s, the time unit of '{alias}'",
                d.pos,
            )
        return ms // UNIT_MS[unit]

    # --- SELECT blocks
    def select(self, q: ast.Select, outer: _Scope | None) -> _Block:
        entries: list[_Entry] = []
        plans: list[L.Plan] = []
        norm_from: list[ast.FromItem] = []
        offset = 0
        for item in q.from_:
            entry, plan, norm = self.from_item(item, offset)
            if any(e.alias.lower() == entry.alias.lower() for e in entries):
                raise CqlError("duplicate_alias", f"'{entry.alias}' appears twice in FROM; give one an alias", item.pos)
            entries.append(entry)
            plans.append(plan)
            norm_from.append(norm)
            offset += len(entry.attrs)
        self.check_units([(p, f"'{e.alias}'", i.pos) for p, e, i in zip(plans, entries, q.from_)])
        scope = _Scope(entries, outer)
        plan = plans[0] if len(plans) == 1 else L.Join(tuple(plans))

        # WHERE: plain conjuncts filter; IN/EXISTS conjuncts become (anti-)semijoins.
        plain: list[X.Expr] = []
        correlated: list[X.Expr] = []
        subs = []
        for term in _and_terms(q.where):
            sq = _subquery_term(term)
            if sq is not None:
                subs.append(sq)
                continue
            if _contains_agg(term, self.catalog):
                raise CqlError("aggregate_in_where", "aggregates are not allowed in WHERE; use HAVING", _span(term))
            b = _Binder(self, scope, "WHERE")
            bound = b.bool(term)
            (correlated if b.correlated else plain).append(bound)
        if plain:
            plan = L.Filter(plan, X.conjunction(plain))
        for node, anti in subs:
            plan = self.subquery_predicate(plan, scope, node, anti)

        pre_plan = plan
        has_agg = bool(q.group_by) or q.having is not None or any(_contains_agg(i.expr, self.catalog) for i in q.items)
        items, names, norm_items = self.expand_items(q.items, scope)
        if has_agg:
            plan, exprs = self.aggregate(q, plan, scope, items)
        else:
            binder = _Binder(self, scope, "SELECT")
            exprs = [binder.bind(e) for e in items]
            if binder.correlated:
                raise CqlError("correlated_select", "correlated references are only supported in WHERE", q.pos)
        plan = L.Project(plan, tuple(exprs), tuple(names), tuple(_qualifier(e, scope) for e in exprs))
        if q.distinct:
            plan = L.Distinct(plan)
        normalized = ast.Select(tuple(norm_items), tuple(norm_from), q.where, q.group_by, q.having, q.distinct)
        simple = not has_agg and not q.distinct
        if correlated and not simple:
            raise CqlError("correlated_aggregate", "a correlated subquery may not aggregate or use DISTINCT", q.pos)
        return _Block(plan, normalized, pre_plan if simple else None, tuple(exprs) if simple else (), tuple(correlated))

    def expand_items(
        self, items: Iterable[ast.SelectItem], scope: _Scope
    ) -> tuple[list[ast.Expr], list[str], list[ast.SelectItem]]:
        exprs: list[ast.Expr] = []
        names: list[str] = []
        derived: list[bool] = []  # the name was derived from the expression (see cql/naming.py)
        norm: list[ast.SelectItem] = []
        for n, item in enumerate(items, 1):
            e = item.expr
            if isinstance(e, ast.Star):
                if e.qualifier is not None:
                    entry = scope.entry(e.qualifier)
                    if entry is None:
                        hint = did_you_mean(e.qualifier, scope.aliases())
                        raise CqlError(
                            "unknown_source", f"unknown table or alias '{e.qualifier}' in SELECT{hint}", e.pos
                        )
                    chosen = [entry]
                else:
                    chosen = scope.entries
                for entry in chosen:
                    for a in entry.attrs:
                        col = ast.Column(entry.alias, a.name, pos=e.pos)
                        exprs.append(col)
                        names.append(a.name)
                        derived.append(False)
                        norm.append(ast.SelectItem(col))
                continue
            exprs.append(e)
            if item.alias is not None:
                names.append(item.alias)
                derived.append(False)
            elif isinstance(e, ast.Column):
                names.append(e.name)
                derived.append(False)
            else:
                names.append(derived_name(e, n))
                derived.append(True)
            norm.append(item)
        return exprs, deduplicate(names, derived), norm

    def agg_call(self, e: ast.Call, scope: _Scope) -> X.AggCall:
        fn = self.catalog.functions.aggregate(e.name)
        assert fn is not None, "agg_call is reached only for calls naming an aggregate"
        if e.star:
            if not fn.star_ok:
                raise CqlError("bad_call", f"{e.name}(*) is not allowed; only count(*)", e.pos)
            return X.AggCall(fn.name, None, False, T.INT)
        if len(e.args) != 1:
            raise CqlError("bad_call", f"aggregate {e.name}() takes exactly one argument", e.pos)
        if _contains_agg(e.args[0], self.catalog):
            raise CqlError("nested_aggregate", f"aggregates cannot be nested inside {e.name}()", e.pos)
        arg = _Binder(self, scope, f"{e.name}()").bind(e.args[0])
        rt = fn.result((arg.type,))
        if isinstance(rt, str):
            raise CqlError("type_mismatch", f"{e.name}() {rt}", e.pos)
        return X.AggCall(fn.name, arg, e.distinct, rt)

    def aggregate(
        self, q: ast.Select, plan: L.Plan, scope: _Scope, items: list[ast.Expr]
    ) -> tuple[L.Plan, list[X.Expr]]:
        key_binder = _Binder(self, scope, "GROUP BY")
        keys = []
        for g in q.group_by:
            if _contains_agg(g, self.catalog):
                raise CqlError("aggregate_in_group_by", "aggregates are not allowed in GROUP BY", _span(g))
            keys.append(key_binder.bind(g))
        aggs: list[X.AggCall] = []
        for e in list(items) + ([q.having] if q.having is not None else []):
            for call in _agg_calls(e, self.catalog):
                a = self.agg_call(call, scope)
                if a not in aggs:
                    aggs.append(a)
        names = tuple(_default_name(g, i) for i, g in enumerate(q.group_by, 1)) + tuple(
            f"{a.func}{i}" for i, a in enumerate(aggs, 1)
        )
        plan = L.Aggregate(plan, tuple(keys), tuple(aggs), names)
        post = _Binder(self, scope, "SELECT", group=(keys, aggs, list(q.group_by)))
        if q.having is not None:
            post.where = "HAVING"
            plan = L.Filter(plan, post.bool(q.having))
            post.where = "SELECT"
        exprs = [post.bind(e) for e in items]
        return plan, exprs

    def subquery_predicate(self, plan: L.Plan, scope: _Scope, node: ast.InQuery | ast.Exists, anti: bool) -> L.Plan:
        width = len(plan.schema)
        inner_scope_outer = _Scope(scope.entries, None)
        self.enclosing.append(scope)
        try:
            sub = self.query(node.query, implicit=False, outer=inner_scope_outer)
        finally:
            self.enclosing.pop()
        self.check_units([(plan, "the outer query", None), (sub.plan, "the subquery", _span(node))])
        if isinstance(node, ast.InQuery):
            lhs = self.in_operand(node.operand, scope)
        else:
            lhs = []
        if sub.pre_plan is not None:
            right, items = sub.pre_plan, sub.items
        else:
            if sub.correlated:
                raise CqlError("correlated_aggregate", "correlated subqueries must be plain SELECT blocks", _span(node))
            right = self.as_relation(sub.plan)
            items = tuple(X.ColRef(i, a.type, a.name) for i, a in enumerate(right.schema))
        right = self.as_relation(right)
        preds = [_decorrelate(c, width) for c in sub.correlated]
        if isinstance(node, ast.InQuery):
            if len(lhs) != len(items):
                raise CqlError(
                    "in_width",
                    f"IN compares {len(lhs)} value(s) with a subquery returning {len(items)} column(s)",
                    node.pos,
                )
            for l, r in zip(lhs, items):
                if not T.comparable(l.type, r.type):
                    raise CqlError("type_mismatch", f"IN compares {l.type} with {r.type}", node.pos)
                preds.append(X.Op("=", (l, X.shift(r, width)), T.BOOL))
        pred = X.conjoin(preds) or X.Const(True, T.BOOL)
        null_aware = anti and isinstance(node, ast.InQuery)
        return L.SemiJoin(plan, right, pred, anti, null_aware)

    def in_operand(self, e: ast.Expr, scope: _Scope) -> list[X.Expr]:
        # `S0 in (select * from S1)`: a bare alias on the left compares the whole tuple.
        if isinstance(e, ast.Column) and e.qualifier is None and scope.lookup(e) is None:
            entry = scope.entry(e.name)
            if entry is not None:
                return [X.ColRef(entry.offset + i, a.type, a.display()) for i, a in enumerate(entry.attrs)]
        return [_Binder(self, scope, "IN").bind(e)]


# ------------------------------------------------------------------ helpers


def _agg_calls(e: object, catalog: Catalog) -> Iterator[ast.Call]:
    if isinstance(e, ast.Call) and catalog.functions.aggregate(e.name) and not catalog.functions.scalar(e.name):
        yield e
        return
    for c in _children(e):
        yield from _agg_calls(c, catalog)


def _cast_to(plan: L.Plan, types: list[T.DataType]) -> L.Plan:
    """Widen a set-operation input to the common column types (e.g. INTEGER → FLOAT)."""
    if all(a.type == t for a, t in zip(plan.schema, types)):
        return plan
    exprs = tuple(
        X.ColRef(i, a.type, a.name) if a.type == t else X.Cast(X.ColRef(i, a.type, a.name), t)
        for i, (a, t) in enumerate(zip(plan.schema, types))
    )
    return L.Project(plan, exprs, tuple(a.name for a in plan.schema))


def _default_name(e: ast.Expr, n: int) -> str:
    """The name of a group-by key inside the aggregate node (shown by EXPLAIN, not an output column)."""
    if isinstance(e, ast.Column):
        return e.name
    if isinstance(e, ast.Call):
        return e.name
    return f"expr{n}"


def _qualifier(e: X.Expr, scope: _Scope) -> str | None:
    if isinstance(e, X.ColRef):
        for entry in scope.entries:
            if entry.offset <= e.index < entry.offset + len(entry.attrs):
                return entry.alias
    return None


def _time_unit(plan: L.Plan) -> str | None:
    for n in L.walk(plan):
        if isinstance(n, L.StreamSource):
            return n.time_unit
    return None


def implicit_reading(plan: L.Plan) -> L.Plan | None:
    """The plan of a top-level query read with CQL's implicit ISTREAM, given its plan read without
    (`AnalyzeOptions(stream_compat=True)`): Istream over it when it is a relation that is
    monotonic and reads its streams through default windows, else None (the same plan). The only
    difference between the two readings, so one analysis gives both (a script's views need both)."""
    if not plan.is_stream and _implicit_istream(plan):
        return L.RelToStream("istream", plan)
    return None


def _implicit_istream(plan: L.Plan) -> bool:
    """CQL default: the query is monotonic over its streams (relations held fixed), reads at least
    one stream, and reads streams only through default windows (docs/semantics.md)."""
    windows = []

    def monotonic(n: L.Plan) -> bool:
        if isinstance(n, L.RelToStream):
            return n.op != "dstream"
        if isinstance(n, L.Window):
            windows.append(n)
            return n.default and n.unbounded and monotonic(n.input)
        if (
            isinstance(n, L.Aggregate)
            or (isinstance(n, L.SetOp) and n.op == "except")
            or (isinstance(n, L.SemiJoin) and n.anti)
        ):
            return False
        return all(monotonic(i) for i in n.inputs)

    return monotonic(plan) and bool(windows)


def _decorrelate(e: X.Expr, width: int) -> X.Expr:
    """Correlated conjunct over (inner cols, OuterRef) → predicate over (outer ++ inner) columns."""

    def m(c: X.ColRef | OuterRef) -> X.Expr:
        if isinstance(c, OuterRef):
            return X.ColRef(c.index, c.type, c.name)
        return replace(c, index=c.index + width)

    return _remap_refs(e, m)


def _remap_refs(e: X.Expr, mapping: Callable[[X.ColRef | OuterRef], X.Expr]) -> X.Expr:
    if isinstance(e, (X.ColRef, OuterRef)):
        return mapping(e)
    if isinstance(e, (X.Op, X.Func)):
        return replace(e, args=tuple(_remap_refs(a, mapping) for a in e.args))
    if isinstance(e, X.CaseWhen):
        return replace(
            e,
            whens=tuple((_remap_refs(c, mapping), _remap_refs(r, mapping)) for c, r in e.whens),
            default=_remap_refs(e.default, mapping),
        )
    if isinstance(e, X.Cast):
        return replace(e, operand=_remap_refs(e.operand, mapping))
    return e


def analyze(
    query: ast.Query | str, catalog: Catalog, *, text: str | None = None, options: AnalyzeOptions | None = None
) -> AnalyzedQuery:
    """Analyze a query (AST or text) against the catalog; CqlError on any semantic problem."""
    from cqlstream.cql.parser import parse_query

    if isinstance(query, str):
        text = query
        query = parse_query(query)
    a = Analyzer(catalog, options)
    try:
        plan, normalized = a.analyze(query)
    except CqlError as e:
        raise (e.with_text(text) if text is not None else e) from None
    except RecursionError:
        raise CqlError("too_deep", "query is nested too deeply", None, text) from None
    return AnalyzedQuery(query, normalized, plan, a.notes, text)
