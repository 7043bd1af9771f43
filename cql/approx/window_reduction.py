"""Window reduction (CIDR'03 §5.1.1): shrink a window, or bound an Unbounded one, to the smallest
size the user tolerates, where the monotonicity analysis says the result cannot grow.

A window's target is its TOLERATE size (explicit), else ⌈f·size⌉ for a query-wide window_fraction
f (bounded windows only). A smaller Range/Rows/Partition window holds a subset of the tuples at
every instant; whether that reaches the result as a subset is the context's question.
"""

from __future__ import annotations

import math
from dataclasses import replace

from cqlstream.cql.approx.context import Ctx
from cqlstream.cql.approx.report import Applied, Refused
from cqlstream.cql.approx.rule import Env, Outcome
from cqlstream.cql.logical import nodes as L
from cqlstream.cql.logical.explain import node_label


def _size(spec: L.WindowSpec) -> int | None:
    return spec.rows if isinstance(spec, L.PartitionSpec) else spec.size


def _resized(spec: L.WindowSpec, size: int) -> L.WindowSpec:
    if isinstance(spec, L.PartitionSpec):
        return replace(spec, rows=size)
    return replace(spec, size=size)


def _target(node: L.Window, env: Env) -> int | None:
    size = _size(node.spec)
    if node.tolerate is not None:
        return node.tolerate
    f = env.spec.window_fraction
    if f is None or size is None or size == 0:
        return None
    return max(1, math.ceil(size * f))


def window_reduction(node: L.Plan, ctx: Ctx, env: Env) -> Outcome | None:
    if not isinstance(node, L.Window):
        return None
    target, size = _target(node, env), _size(node.spec)
    if target is None or (size is not None and target >= size):
        return None
    explicit = node.tolerate is not None
    label = node_label(node)
    reason = ctx.window_refusal(explicit)
    if reason:
        return Outcome(refused=Refused("window_reduction", label, reason))
    new = replace(node, spec=_resized(node.spec, target), default=False)
    why = "TOLERATE clause" if explicit else f"window_fraction {env.spec.window_fraction:g}"
    if ctx.aggregate:
        why += f"; changes the values of {ctx.aggregate}"
    return Outcome(new, Applied("window_reduction", label, node_label(new), why, bool(ctx.aggregate)))
