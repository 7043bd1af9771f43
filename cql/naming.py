"""Readable names for unnamed SELECT items (`sum(A)` → `sum_A`, `A + B` → `A_plus_B`).

The rule: a column keeps its name; a call is its function name followed by its arguments' names
(`count(*)` is `count`); an operator is spelled as a word between its operands' names; a number
is its digits (`.` as `_`), other literals `null`/`true`/`false`/`str`; CAST is `cast_` plus its
operand's name, CASE is `case`. A name over 40 characters falls back to `exprN` (N: the item's
1-based position). An explicit `AS` alias is always kept. A derived name equal to another output
name (case-insensitive: a column's, an alias or an earlier derived name) gets `_2`, `_3`, ...;
columns and aliases are never renamed.
"""

from __future__ import annotations

from collections.abc import Callable

from cqlstream.cql import ast

MAX_DERIVED = 40

# Operators and predicates spelled as words.
OP_WORDS = {
    "+": "plus",
    "-": "minus",
    "*": "times",
    "/": "div",
    "%": "mod",
    "||": "concat",
    "=": "eq",
    "==": "eq",
    "!=": "ne",
    "<>": "ne",
    "<": "lt",
    "<=": "le",
    ">": "gt",
    ">=": "ge",
    "and": "and",
    "or": "or",
    "not": "not",
}


def _join(*parts: str) -> str:
    return "_".join(p for p in parts if p)


def _literal(e: ast.Literal) -> str:
    if e.kind in ("int", "float"):
        text = repr(e.value).replace(".", "_").replace("-", "minus_").replace("+", "")
        return text if text.replace("_", "").isalnum() else "num"
    return {"null": "null", "bool": str(e.value).lower()}.get(e.kind, "str")


def _call(e: ast.Call) -> str:
    if e.star:
        return e.name.lower()
    return _join(e.name.lower(), "distinct" if e.distinct else "", *(words(a) for a in e.args))


def _unary(e: ast.Unary) -> str:
    return _join({"-": "neg", "+": ""}.get(e.op, OP_WORDS.get(e.op, e.op)), words(e.operand))


def _binary(e: ast.Binary) -> str:
    return _join(words(e.left), OP_WORDS.get(e.op.lower(), "op"), words(e.right))


_WORDS: dict[type, Callable] = {
    ast.Column: lambda e: e.name,
    ast.Literal: _literal,
    ast.Call: _call,
    ast.Unary: _unary,
    ast.Binary: _binary,
    ast.Cast: lambda e: _join("cast", words(e.operand)),
    ast.Case: lambda e: "case",
    ast.IsNull: lambda e: _join(words(e.operand), "is_not_null" if e.negated else "is_null"),
    ast.Between: lambda e: _join(words(e.operand), "not" if e.negated else "", "between"),
    ast.InList: lambda e: _join(words(e.operand), "not" if e.negated else "", "in"),
    ast.Like: lambda e: _join(words(e.operand), "not" if e.negated else "", "like"),
}


def words(e: ast.Expr) -> str:
    """The expression spelled as a name (`expr` for a form without a spelling)."""
    spell = _WORDS.get(type(e))
    return spell(e) if spell is not None else "expr"


def derived_name(e: ast.Expr, n: int) -> str:
    """The output name of the unnamed SELECT item `e` at 1-based position `n`."""
    name = words(e)
    return name if len(name) <= MAX_DERIVED else f"expr{n}"


def deduplicate(names: list[str], derived: list[bool]) -> list[str]:
    """`names` with each derived name that repeats an earlier one suffixed `_2`, `_3`, ..."""
    seen = {n.lower() for n, d in zip(names, derived) if not d}
    out = []
    for name, d in zip(names, derived):
        if d:
            base, k = name, 1
            while name.lower() in seen:
                k += 1
                name = f"{base}_{k}"
        seen.add(name.lower())
        out.append(name)
    return out
