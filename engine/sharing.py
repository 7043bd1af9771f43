"""How queries find common subplans: a normalized key per logical subplan (CIDR §3).

Two subplans share one physical node when their keys are equal. The key is the plan itself with
every predicate normalized: conjuncts sorted, operands of commutative operators ordered, and
comparisons mirrored into one direction, so `a > 1 AND b = c` and `c = b AND 1 < a` meet.
The key is only used for lookup: the operator runs the first registered form, which is equivalent.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import fields, replace
from functools import lru_cache
from typing import Any

from cqlstream.cql.logical import expr as X
from cqlstream.cql.logical import nodes as L

COMMUTATIVE = {"=", "<>", "+", "*", "and", "or"}


def norm_expr(e: X.Expr) -> X.Expr:
    """A canonical equivalent of e (same value on every row, NULLs included)."""
    if isinstance(e, X.Op):
        args = tuple(norm_expr(a) for a in e.args)
        op = e.op
        if op in ("and", "or"):
            parts = _flatten(op, args)
            parts = sorted(set(parts), key=_order) if op == "and" else sorted(parts, key=_order)
            out = parts[0]
            for p in parts[1:]:
                out = X.Op(op, (out, p), e.type)
            return out
        if op in COMMUTATIVE and len(args) == 2 and _order(args[1]) < _order(args[0]):
            args = (args[1], args[0])
        elif op in X.MIRROR and len(args) == 2 and _order(args[1]) < _order(args[0]):
            op, args = X.MIRROR[op], (args[1], args[0])
        return X.Op(op, args, e.type)
    if isinstance(e, (X.Func, X.CaseWhen, X.Cast)):
        return replace(e, **{f.name: _norm_field(getattr(e, f.name)) for f in fields(e) if f.name != "type"})
    return e


def _norm_field(v: Any) -> Any:  # a field of an expression node: same shape back
    if isinstance(v, X.Expr):
        return norm_expr(v)
    if isinstance(v, tuple):
        return tuple(_norm_field(x) for x in v)
    return v


def _flatten(op: str, args: Iterable[X.Expr]) -> list[X.Expr]:
    out: list[X.Expr] = []
    for a in args:
        if isinstance(a, X.Op) and a.op == op:
            out.extend(_flatten(op, a.args))
        else:
            out.append(a)
    return out


def _order(e: X.Expr) -> str:
    return e.sql() if hasattr(e, "sql") else repr(e)


PREDICATE_FIELDS = {L.Filter: "predicate", L.Join: "predicate", L.StreamJoin: "predicate", L.SemiJoin: "predicate"}


@lru_cache(maxsize=4096)
def share_key(node: L.Plan) -> L.Plan:
    """The plan with normalized predicates, inputs normalized recursively."""
    kids = tuple(share_key(i) for i in node.inputs)
    if kids != node.inputs:
        node = L.with_inputs(node, kids)
    f = PREDICATE_FIELDS.get(type(node))
    if f is not None and getattr(node, f) is not None:
        node = replace(node, **{f: norm_expr(getattr(node, f))})
    return node


def lift_filters(node: L.Plan) -> L.Plan:
    """Move selections above time-based windows (the inverse of push_selections there): a
    window is state, a selection is a cheap stateless pass, so queries that differ only in their
    selections share one window (and its store) instead of each holding a filtered copy."""
    return _lift(node, {})


def _lift(node: L.Plan, seen: dict[int, tuple[L.Plan, L.Plan]]) -> L.Plan:
    """`lift_filters`, each node done once per call: a view inlined at several places of a query
    is the same node object at each (Linear Road's queries: 85 distinct of 209 nodes)."""
    hit = seen.get(id(node))
    if hit is not None and hit[0] is node:
        return hit[1]
    out = _lift_node(node, seen)
    seen[id(node)] = (node, out)
    return out


def _lift_node(node: L.Plan, seen: dict[int, tuple[L.Plan, L.Plan]]) -> L.Plan:
    kids = tuple(_lift(i, seen) for i in node.inputs)
    if kids != node.inputs:
        node = L.with_inputs(node, kids)
    if isinstance(node, L.Window) and node.spec.time_based and isinstance(node.input, L.Filter):
        inner = node.input
        lifted = L.Filter(replace(node, input=inner.input), inner.predicate)
        return _lift(lifted, seen) if isinstance(inner.input, L.Filter) else lifted
    if isinstance(node, L.Filter) and isinstance(node.input, L.Filter):
        return L.Filter(
            node.input.input, X.conjunction(X.conjuncts(node.input.predicate) + X.conjuncts(node.predicate))
        )
    return node
