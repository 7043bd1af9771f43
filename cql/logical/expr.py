"""Typed scalar expressions of the logical plan: column references by position, constants, operators.

Frozen and hashable, so equal predicates compare and hash equal (plan sharing is a dict lookup).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace

from cqlstream.cql.types import BOOL, DataType


class Expr:
    type: DataType

    def children(self) -> tuple[Expr, ...]:
        return ()

    def sql(self) -> str:
        """The expression as CQL text (every concrete expression defines it)."""
        raise NotImplementedError(type(self).__name__)


@dataclass(frozen=True)
class ColRef(Expr):
    """Input column `index`; `name` is for display only."""

    index: int
    type: DataType
    name: str = field(default="", compare=False)

    def sql(self) -> str:
        return self.name or f"#{self.index}"


@dataclass(frozen=True)
class Const(Expr):
    """A constant of a given type (NULL is `value=None`)."""

    value: object
    type: DataType

    def sql(self) -> str:
        if self.value is None:
            return "NULL"
        if isinstance(self.value, bool):
            return "TRUE" if self.value else "FALSE"
        if isinstance(self.value, str):
            return "'" + self.value.replace("'", "''") + "'"
        return repr(self.value)


# Operators by arity and display; `div` is integer division (both operands integers).
INFIX = {
    "+": "+",
    "-": "-",
    "*": "*",
    "/": "/",
    "div": "/",
    "%": "%",
    "||": "||",
    "=": "=",
    "<>": "<>",
    "<": "<",
    "<=": "<=",
    ">": ">",
    ">=": ">=",
    "and": "AND",
    "or": "OR",
    "like": "LIKE",
}
COMPARISONS = ("=", "<>", "<", "<=", ">", ">=")
MIRROR = {"=": "=", "<>": "<>", "<": ">", "<=": ">=", ">": "<", ">=": "<="}


@dataclass(frozen=True)
class Op(Expr):
    """An operator: infix ops above, plus `neg`, `not`, `is_null`, `in` (args[0] in args[1:])."""

    op: str
    args: tuple[Expr, ...]
    type: DataType

    def children(self) -> tuple[Expr, ...]:
        return self.args

    def sql(self) -> str:
        a = self.args
        if self.op in INFIX:
            return f"({a[0].sql()} {INFIX[self.op]} {a[1].sql()})"
        if self.op == "neg":
            return f"-{a[0].sql()}"
        if self.op == "not":
            return f"NOT {a[0].sql()}"
        if self.op == "is_null":
            return f"({a[0].sql()} IS NULL)"
        if self.op == "in":
            return f"({a[0].sql()} IN ({', '.join(x.sql() for x in a[1:])}))"
        raise ValueError(self.op)


@dataclass(frozen=True)
class Func(Expr):
    """A scalar function call (built-in or UDF), resolved by name in the registry."""

    name: str
    args: tuple[Expr, ...]
    type: DataType

    def children(self) -> tuple[Expr, ...]:
        return self.args

    def sql(self) -> str:
        return f"{self.name}({', '.join(x.sql() for x in self.args)})"


@dataclass(frozen=True)
class CaseWhen(Expr):
    """Searched CASE: first true condition wins; `default` may be a NULL constant."""

    whens: tuple[tuple[Expr, Expr], ...]
    default: Expr
    type: DataType

    def children(self) -> tuple[Expr, ...]:
        return tuple(x for w in self.whens for x in w) + (self.default,)

    def sql(self) -> str:
        body = " ".join(f"WHEN {c.sql()} THEN {r.sql()}" for c, r in self.whens)
        return f"CASE {body} ELSE {self.default.sql()} END"


@dataclass(frozen=True)
class Cast(Expr):
    """A conversion of `operand` to `type`."""

    operand: Expr
    type: DataType

    def children(self) -> tuple[Expr, ...]:
        return (self.operand,)

    def sql(self) -> str:
        return f"CAST({self.operand.sql()} AS {self.type})"


@dataclass(frozen=True)
class AggCall:
    """An aggregate in an Aggregate node: `func` over `arg` (None for count(*))."""

    func: str
    arg: Expr | None
    distinct: bool
    type: DataType

    def sql(self) -> str:
        inner = "*" if self.arg is None else self.arg.sql()
        return f"{self.func}({'DISTINCT ' if self.distinct else ''}{inner})"


def columns(e: Expr) -> set[int]:
    """Input column indexes an expression reads."""
    if isinstance(e, ColRef):
        return {e.index}
    out: set[int] = set()
    for c in e.children():
        out |= columns(c)
    return out


def remap(e: Expr, mapping: Callable[[ColRef], Expr]) -> Expr:
    """Rewrite column references: `mapping(ColRef) -> Expr`."""
    if isinstance(e, ColRef):
        return mapping(e)
    if isinstance(e, (Op, Func)):
        return replace(e, args=tuple(remap(a, mapping) for a in e.args))
    if isinstance(e, CaseWhen):
        return replace(
            e,
            whens=tuple((remap(c, mapping), remap(r, mapping)) for c, r in e.whens),
            default=remap(e.default, mapping),
        )
    if isinstance(e, Cast):
        return replace(e, operand=remap(e.operand, mapping))
    return e


def shift(e: Expr, delta: int) -> Expr:
    return remap(e, lambda c: replace(c, index=c.index + delta))


def conjuncts(e: Expr | None) -> list[Expr]:
    if e is None:
        return []
    if isinstance(e, Op) and e.op == "and":
        return conjuncts(e.args[0]) + conjuncts(e.args[1])
    return [e]


def conjoin(parts: Iterable[Expr]) -> Expr | None:
    items = list(parts)
    if not items:
        return None
    out = items[0]
    for p in items[1:]:
        out = Op("and", (out, p), BOOL)
    return out


def conjunction(parts: Iterable[Expr]) -> Expr:
    """`conjoin` of a non-empty list: a Filter's predicate is never absent."""
    out = conjoin(parts)
    if out is None:
        raise ValueError("conjunction of no predicates")
    return out
