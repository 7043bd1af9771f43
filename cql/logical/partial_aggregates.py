"""Split an aggregate query into per-partition partial aggregates and a final merge over them.

A query whose aggregate does not partition on a key (a global aggregate, or a group-by whose keys
are not the key the input partitions on) can still run partitioned below the aggregate: each
partition computes the aggregate's partial results over its own rows (the *prefix*: group-by keys
and decomposable partials, a relation), and one final stage (the *tail*) reads the union of the
partitions' partial relations as the relation `Partials` and merges them per group: `count` as the
sum of counts, `sum`/`min`/`max` as themselves, `avg` as Σsum / Σcount. The tail keeps the
query's select list, HAVING, DISTINCT and relation-to-stream operator, with every aggregate call
replaced by its merge, so its answer is the query's at every instant.

Non-decomposable aggregates (DISTINCT aggregates, functions without a merge rule), aggregates not
at the top of the query and subqueries in the select list or HAVING are refused with the reason.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass

from cqlstream.cql import ast
from cqlstream.cql.catalog import Catalog
from cqlstream.cql.functions import FunctionRegistry
from cqlstream.cql.parser import parse_query
from cqlstream.cql.printer import to_cql

PARTIALS = "Partials"  # the tail's input relation: the union of the partitions' partial results


class NotSplittable(Exception):
    """The query's aggregate cannot be computed as partials and a merge; the message says why."""


@dataclass(frozen=True)
class AggregateSplit:
    """What each partition runs (`prefix`, relation-valued: `g<i>` group keys, `p<j>` partials), the
    declaration of the tail's input relation, and the tail query over it."""

    prefix: str
    partials_ddl: str
    tail: str


def _call(name: str, *args: ast.Expr, star: bool = False) -> ast.Call:
    return ast.Call(name, tuple(args), star=star)


def _col(name: str) -> ast.Column:
    return ast.Column(None, name)


# function → (the partial calls it needs, the merge expression over the partials' columns)
Merge = tuple[list[ast.Call], Callable[[list[ast.Expr]], ast.Expr]]
MERGES: dict[str, Callable[[ast.Call], Merge]] = {
    # count over no rows is 0, the sum of no partials null: coalesce
    "count": lambda c: ([c], lambda p: _call("coalesce", _call("sum", p[0]), ast.Literal(0, "int"))),
    "sum": lambda c: ([c], lambda p: _call("sum", p[0])),
    "min": lambda c: ([c], lambda p: _call("min", p[0])),
    "max": lambda c: ([c], lambda p: _call("max", p[0])),
    "avg": lambda c: (
        [_call("sum", *c.args), _call("count", *c.args)],
        lambda p: ast.Binary("/", ast.Cast(_call("sum", p[0]), ast.TypeName("float")), _call("sum", p[1])),
    ),
}


class _Splitter:
    def __init__(self, select: ast.Select) -> None:
        self.keys = list(select.group_by)
        self.partials: list[ast.Call] = []  # the prefix's partial calls, p0, p1, ...
        self.functions = FunctionRegistry()

    def partial(self, call: ast.Call) -> ast.Expr:
        for i, p in enumerate(self.partials):
            if p == call:
                return _col(f"p{i}")
        self.partials.append(call)
        return _col(f"p{len(self.partials) - 1}")

    def key(self, e: ast.Expr) -> ast.Expr | None:
        """The tail's column for a group-by expression (`v` matches `S.v` if unambiguous)."""
        for i, k in enumerate(self.keys):
            if e == k:
                return _col(f"g{i}")
        if isinstance(e, ast.Column):
            named = [
                i for i, k in enumerate(self.keys) if isinstance(k, ast.Column) and k.name.lower() == e.name.lower()
            ]
            if len(named) == 1 and e.qualifier is None:
                return _col(f"g{named[0]}")
        return None

    def aggregates(self, x: object) -> bool:
        """Whether expression `x` calls an aggregate function (outside subqueries)."""
        if isinstance(x, ast.Call) and self.functions.aggregate(x.name.lower()) is not None:
            return True
        if isinstance(x, tuple):
            return any(self.aggregates(y) for y in x)
        if isinstance(x, ast.Expr) and not isinstance(x, (ast.InQuery, ast.Exists)):
            return any(self.aggregates(getattr(x, f.name)) for f in dataclasses.fields(x))
        return False

    def rewrite(self, e: ast.Expr) -> ast.Expr:
        """`e` over the partials: group-by expressions as g<i>, aggregate calls as their merges."""
        key = self.key(e)
        if key is not None:
            return key
        if isinstance(e, ast.Call) and self.functions.aggregate(e.name.lower()) is not None:
            if e.distinct:
                raise NotSplittable(f"{to_cql(e)} is not mergeable from partials (a DISTINCT aggregate)")
            rule = MERGES.get(e.name.lower())
            if rule is None:
                raise NotSplittable(f"{to_cql(e)} is not mergeable from partials")
            parts, merge = rule(e)
            return merge([self.partial(p) for p in parts])
        if isinstance(e, ast.Column):
            raise NotSplittable(f"column {to_cql(e)} is neither a group-by key nor inside an aggregate")
        if isinstance(e, (ast.InQuery, ast.Exists)):
            raise NotSplittable("a subquery in the select list or HAVING does not merge from partials")
        changes: dict[str, object] = {}
        for f in dataclasses.fields(e):
            v = getattr(e, f.name)
            if isinstance(v, ast.Expr):
                changes[f.name] = self.rewrite(v)
            elif isinstance(v, tuple):
                changes[f.name] = tuple(self._rewrite_any(x) for x in v)
        return dataclasses.replace(e, **changes)

    def _rewrite_any(self, x: object) -> object:
        if isinstance(x, ast.Expr):
            return self.rewrite(x)
        if isinstance(x, tuple):
            return tuple(self._rewrite_any(y) for y in x)
        return x


def split_aggregate(query: str, catalog: Catalog, names: tuple[str, ...], *, compat: bool = False) -> AggregateSplit:
    """Split `query` (its output columns named `names`) at its top aggregate; `NotSplittable` says
    why it cannot be."""
    from cqlstream.cql.analyzer import AnalyzeOptions
    from cqlstream.cql.frontend import compile_query

    q = parse_query(query)
    wrappers: list[str] = []
    while isinstance(q, ast.RelToStream):
        wrappers.append(q.op)
        q = q.query
    if not isinstance(q, ast.Select):
        raise NotSplittable("only an aggregate at the top of the query merges from partials")
    sp = _Splitter(q)
    if not q.group_by and not any(sp.aggregates(i.expr) for i in q.items):
        raise NotSplittable("the query has no aggregate at its top")
    if any(isinstance(i.expr, ast.Star) for i in q.items):
        raise NotSplittable("select * over an aggregate")
    items = [ast.SelectItem(sp.rewrite(i.expr), n) for i, n in zip(q.items, names)]
    having = sp.rewrite(q.having) if q.having is not None else None
    pre_items = [ast.SelectItem(k, f"g{i}") for i, k in enumerate(q.group_by)]
    pre_items += [ast.SelectItem(p, f"p{j}") for j, p in enumerate(sp.partials)]
    prefix = ast.Select(tuple(pre_items), q.from_, q.where, q.group_by)
    prefix_text = to_cql(prefix)
    compiled = compile_query(prefix_text, catalog, options=AnalyzeOptions(stream_compat=compat))
    cols = ", ".join(f"{a.name} {a.type}" for a in compiled.schema)
    tail: ast.Query = ast.Select(
        tuple(items),
        (ast.FromItem(PARTIALS),),
        None,
        tuple(_col(f"g{i}") for i in range(len(q.group_by))),
        having,
        q.distinct,
    )
    for op in reversed(wrappers):
        tail = ast.RelToStream(op, tail)
    return AggregateSplit(prefix_text, f"register relation {PARTIALS} ({cols})", to_cql(tail))
