"""How deeply a statement nests, measured without recursion, and the limit every statement keeps.

The printer, the analyzer, the rewrites and the planner walk a query recursively; a statement
within the limit fits their stacks with room to spare, so one too deep is refused once, right
after parsing, with a clear `too_deep` error instead of failing somewhere later (after a query
was half registered). A query level (a SELECT, a set operation, Istream/Dstream/Rstream) counts
QUERY_WEIGHT, any other node (an operator, a call, a FROM entry) 1.
"""

from __future__ import annotations

from dataclasses import fields

from cqlstream.cql import ast
from cqlstream.cql.errors import CqlError

MAX_DEPTH = 128  # ~125 nested operators, or ~25 nested subqueries: the engine evaluates an operator in 4 frames
QUERY_WEIGHT = 4


def depth(node: ast.Node) -> int:
    """The weighted depth of `node`'s tree (iterative: any depth can be measured)."""
    deepest = 0
    stack: list[tuple[object, int]] = [(node, 0)]
    while stack:
        x, d = stack.pop()
        if isinstance(x, ast.Node):
            d += QUERY_WEIGHT if isinstance(x, ast.Query) else 1
            deepest = max(deepest, d)
            stack.extend((getattr(x, f.name), d) for f in fields(x) if f.name != "pos")
        elif isinstance(x, tuple):
            stack.extend((y, d) for y in x)
    return deepest


def check_depth(stmt: ast.Node, text: str | None = None) -> None:
    """Refuse a statement nested deeper than MAX_DEPTH."""
    d = depth(stmt)
    if d > MAX_DEPTH:
        raise CqlError(
            "too_deep",
            f"statement is nested too deeply (depth {d}, at most {MAX_DEPTH}: about {MAX_DEPTH} nested "
            f"operators or {MAX_DEPTH // (QUERY_WEIGHT + 1)} nested subqueries)",
            None,
            text,
        )


__all__ = ["MAX_DEPTH", "check_depth", "depth"]
