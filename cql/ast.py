"""The CQL abstract syntax tree: frozen dataclasses, exactly what the user wrote (no defaults applied).

Every node carries an optional source position that does not take part in equality, so two
parses of equivalent text compare equal (the round-trip property the tests check).
"""

from __future__ import annotations

from dataclasses import Field, dataclass, field
from typing import Any, ClassVar

from cqlstream.cql.errors import Pos


def _pos() -> Any:  # a dataclass field() (typed as its value)
    return field(default=None, compare=False, repr=False, kw_only=True)


class Node:
    """Base of all AST nodes."""

    pos: Pos | None
    # Every concrete node is a frozen dataclass (traversals read `__dataclass_fields__`).
    __dataclass_fields__: ClassVar[dict[str, Field[Any]]]


# ---------------------------------------------------------------- types and DDL


@dataclass(frozen=True)
class TypeName(Node):
    """A type as written: `integer`, `char(4)`, ... (resolved by cql.types)."""

    name: str
    length: int | None = None
    pos: Pos | None = _pos()


@dataclass(frozen=True)
class AttrDef(Node):
    """One attribute of a registered stream or relation: its name and type."""

    name: str
    type: TypeName
    pos: Pos | None = _pos()


@dataclass(frozen=True)
class ConstraintDef(Node):
    """One k-constraint of a stream (`clustered(a, 10)`, `a references S(b) within 5`): `kind` is the
    word written (unique, clustered, ordered, references), `ref` the referenced (stream, column)."""

    kind: str
    column: str
    k: int = 0
    ref: tuple[str, str] | None = None
    pos: Pos | None = _pos()

    def to_cql(self) -> str:
        if self.ref is not None:
            return f"{self.column} references {self.ref[0]}({self.ref[1]})" + (f" within {self.k}" if self.k else "")
        return f"{self.kind}({self.column}" + (f", {self.k})" if self.kind != "unique" else ")")


@dataclass(frozen=True)
class RegisterSource(Node):
    """`register [static] stream|relation Name (attrs, [primary] key (..)) [with (opt = v, ..)]`."""

    kind: str  # 'stream' | 'relation'
    name: str
    attrs: tuple[AttrDef, ...]
    keys: tuple[tuple[str, ...], ...] = ()
    static: bool = False
    options: tuple[tuple[str, object], ...] = ()
    pos: Pos | None = _pos()
    constraints: tuple[ConstraintDef, ...] = ()


@dataclass(frozen=True)
class RegisterView(Node):
    """`register view Name [(a, b)] as <query>`."""

    name: str
    columns: tuple[str, ...] | None
    query: Query
    pos: Pos | None = _pos()


# ---------------------------------------------------------------- expressions


class Expr(Node):
    """Base of scalar expressions."""


@dataclass(frozen=True)
class Literal(Expr):
    """A constant; `kind` is 'int', 'float', 'string', 'bool' or 'null'."""

    value: object
    kind: str
    pos: Pos | None = _pos()


@dataclass(frozen=True)
class Column(Expr):
    """`name` or `qualifier.name`; a bare name may also denote a whole tuple (`S0 in (...)`)."""

    qualifier: str | None
    name: str
    pos: Pos | None = _pos()


@dataclass(frozen=True)
class Star(Expr):
    """`*` or `T.*` in a select list."""

    qualifier: str | None = None
    pos: Pos | None = _pos()


@dataclass(frozen=True)
class Unary(Expr):
    """A prefix operator applied to one operand: `-x`, `+x`, `NOT p`."""

    op: str  # '-', '+', 'not'
    operand: Expr
    pos: Pos | None = _pos()


@dataclass(frozen=True)
class Binary(Expr):
    """Arithmetic, comparison, `||`, `and`, `or`."""

    op: str
    left: Expr
    right: Expr
    pos: Pos | None = _pos()


@dataclass(frozen=True)
class Between(Expr):
    """`operand [NOT] BETWEEN low AND high`."""

    operand: Expr
    low: Expr
    high: Expr
    negated: bool = False
    pos: Pos | None = _pos()


@dataclass(frozen=True)
class InList(Expr):
    """`operand [NOT] IN (item, ...)`."""

    operand: Expr
    items: tuple[Expr, ...]
    negated: bool = False
    pos: Pos | None = _pos()


@dataclass(frozen=True)
class InQuery(Expr):
    """`operand [NOT] IN (subquery)`."""

    operand: Expr
    query: Query
    negated: bool = False
    pos: Pos | None = _pos()


@dataclass(frozen=True)
class Exists(Expr):
    """`[NOT] EXISTS (subquery)`."""

    query: Query
    negated: bool = False
    pos: Pos | None = _pos()


@dataclass(frozen=True)
class Like(Expr):
    """`operand [NOT] LIKE pattern`."""

    operand: Expr
    pattern: Expr
    negated: bool = False
    pos: Pos | None = _pos()


@dataclass(frozen=True)
class IsNull(Expr):
    """`operand IS [NOT] NULL`."""

    operand: Expr
    negated: bool = False
    pos: Pos | None = _pos()


@dataclass(frozen=True)
class Case(Expr):
    """`CASE [operand] WHEN a THEN b ... [ELSE c] END`."""

    operand: Expr | None
    whens: tuple[tuple[Expr, Expr], ...]
    default: Expr | None = None
    pos: Pos | None = _pos()


@dataclass(frozen=True)
class Cast(Expr):
    """`CAST(operand AS type)`."""

    operand: Expr
    type: TypeName
    pos: Pos | None = _pos()


@dataclass(frozen=True)
class Call(Expr):
    """A scalar or aggregate function call; `star` for `count(*)`."""

    name: str
    args: tuple[Expr, ...] = ()
    distinct: bool = False
    star: bool = False
    pos: Pos | None = _pos()


# ---------------------------------------------------------------- windows


@dataclass(frozen=True)
class Duration(Node):
    """`amount [unit]`; unit None means the stream's own time unit."""

    amount: int
    unit: str | None = None
    pos: Pos | None = _pos()


class Window(Node):
    """Base of stream-to-relation windows; `where` filters before the window's cut-off."""

    where: Expr | None


@dataclass(frozen=True)
class RangeWindow(Window):
    """`[Range N unit [Slide M unit] [Tolerate K unit]]`; size None is `[Range Unbounded]`;
    `tolerate` is the smallest size the user accepts under static approximation."""

    size: Duration | None
    slide: Duration | None = None
    where: Expr | None = None
    tolerate: Duration | None = None
    pos: Pos | None = _pos()


@dataclass(frozen=True)
class RowsWindow(Window):
    """`[Rows N [Slide M] [Tolerate K]]`; size None is `[Rows Unbounded]`."""

    size: int | None
    slide: int | None = None
    where: Expr | None = None
    tolerate: int | None = None
    pos: Pos | None = _pos()


@dataclass(frozen=True)
class NowWindow(Window):
    """`[Now]` (optionally with a window filter): the tuples of the current instant only."""

    where: Expr | None = None
    pos: Pos | None = _pos()


@dataclass(frozen=True)
class PartitionWindow(Window):
    """`[Partition By a, b Rows N [Tolerate K]]`."""

    by: tuple[Column, ...]
    rows: int
    where: Expr | None = None
    tolerate: int | None = None
    pos: Pos | None = _pos()


# ---------------------------------------------------------------- queries


class Query(Node):
    """Base of query expressions."""


@dataclass(frozen=True)
class SelectItem(Node):
    """One expression of a SELECT list, with its alias if given."""

    expr: Expr
    alias: str | None = None
    pos: Pos | None = _pos()


@dataclass(frozen=True)
class FromItem(Node):
    """A FROM entry: a named source or a subquery, with optional window, sample and alias;
    `sample_tolerate` is the lowest sampling percentage accepted under static approximation."""

    source: str | Query
    window: Window | None = None
    sample: float | None = None
    alias: str | None = None
    sample_tolerate: float | None = None
    pos: Pos | None = _pos()


@dataclass(frozen=True)
class Select(Query):
    """A SELECT block: items, FROM items, WHERE, GROUP BY, HAVING and DISTINCT."""

    items: tuple[SelectItem, ...]
    from_: tuple[FromItem, ...]
    where: Expr | None = None
    group_by: tuple[Expr, ...] = ()
    having: Expr | None = None
    distinct: bool = False
    pos: Pos | None = _pos()


@dataclass(frozen=True)
class TableQuery(Query):
    """A bare source or view name used as a query (`V1 union V2`, `Istream(V)`)."""

    name: str
    pos: Pos | None = _pos()


@dataclass(frozen=True)
class SetOp(Query):
    """`union`, `except`, `intersect` (`minus` is read as `except`).

    `all` is True for CQL's bag operators (written plain or with ALL) and False for SQL's set
    versions written with DISTINCT."""

    op: str
    all: bool
    left: Query
    right: Query
    pos: Pos | None = _pos()


@dataclass(frozen=True)
class RelToStream(Query):
    """`Istream(q)`, `Dstream(q)`, `Rstream(q)`; also written `select Istream(...) from ...`."""

    op: str  # 'istream' | 'dstream' | 'rstream'
    query: Query
    pos: Pos | None = _pos()


Statement = RegisterSource | RegisterView | Query
