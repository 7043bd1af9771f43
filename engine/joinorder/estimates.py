"""What the cost model knows about a join's inputs before any tuple arrives: window sizes from
the plan, and defaults for what the catalog does not declare (arrival rates, distinct values).

Streams declare no rates, so every stream is taken to arrive at DEFAULT_RATE tuples per time unit;
windows then differ only by their extent: a Range T window holds λT tuples, a Rows C window C, a
Now window one instant's worth. A relation input (no window) is taken to hold
DEFAULT_RELATION_TUPLES rows, an unbounded window DEFAULT_HORIZON time units of its stream. Each
input is taken to have min(tuples, DEFAULT_DISTINCT) distinct join values: with equal value counts
the model orders windows by size, as the paper's heuristic does for that case. Selections and
projections above a window keep its estimate (their selectivity is unknown before data flows).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from dataclasses import replace

from cqlstream.cql.logical import expr as X
from cqlstream.cql.logical import nodes as L
from cqlstream.engine.joinorder.conditions import condition_estimates
from cqlstream.engine.joinorder.cost import EXACT, JoinShape, WindowStats

DEFAULT_RATE = 1.0  # tuples per time unit of every stream
DEFAULT_DISTINCT = 100.0  # distinct join values of an input (at most its tuples)
DEFAULT_RELATION_TUPLES = 1000.0  # rows of a relation input
DEFAULT_HORIZON = 10_000.0  # time units an unbounded window is taken to hold


def _range(spec: L.RangeSpec) -> tuple[float, float | None]:
    if spec.size is None:
        return DEFAULT_HORIZON, None
    return float(max(spec.size, 1)), None  # Now: the tuples of one instant


def _rows(spec: L.RowsSpec) -> tuple[float, float | None]:
    if spec.size is None:
        return DEFAULT_HORIZON, None
    return 0.0, float(spec.size)


def _partition(spec: L.PartitionSpec) -> tuple[float, float | None]:
    return 0.0, DEFAULT_RELATION_TUPLES  # rows per partition × an unknown number of partitions


# window spec type → (time size, row count or None)
WINDOW_EXTENT: dict[type, Callable[[object], tuple[float, float | None]]] = {
    L.RangeSpec: _range,  # type: ignore[dict-item]
    L.RowsSpec: _rows,  # type: ignore[dict-item]
    L.PartitionSpec: _partition,  # type: ignore[dict-item]
}

# nodes above a window that keep its estimate
PASS_THROUGH = (L.Filter, L.Project, L.Sample)


def input_stats(node: L.Plan) -> WindowStats:
    """The estimate for one join input (the logical subplan feeding it)."""
    while isinstance(node, PASS_THROUGH):
        node = node.inputs[0]
    if isinstance(node, L.Window):
        size, rows = WINDOW_EXTENT[type(node.spec)](node.spec)
    else:
        size, rows = 0.0, DEFAULT_RELATION_TUPLES
    tuples = rows if rows is not None else DEFAULT_RATE * size
    return WindowStats(DEFAULT_RATE, size, max(1.0, min(tuples, DEFAULT_DISTINCT)), rows=rows)


def equality_classes(n: int, links: Sequence[tuple[int, Hashable, int, Hashable]]) -> tuple[frozenset[int], ...]:
    """Inputs grouped by the attribute classes equality conjuncts form: `links` are
    (input a, a's side, input b, b's side) per conjunct; sides equal by value are one attribute."""
    parent: dict[tuple[int, Hashable], tuple[int, Hashable]] = {}

    def find(x: tuple[int, Hashable]) -> tuple[int, Hashable]:
        parent.setdefault(x, x)
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for a, ea, b, eb in links:
        ra, rb = find((a, ea)), find((b, eb))
        if ra != rb:
            parent[ra] = rb
    groups: dict[tuple[int, Hashable], set[int]] = {}
    for x in list(parent):
        groups.setdefault(find(x), set()).add(x[0])
    return tuple(frozenset(g) for g in groups.values() if len(g) >= 2 and all(0 <= k < n for k in g))


def engine_shape(
    inputs: Sequence[L.Plan],
    links: Sequence[tuple[int, Hashable, int, Hashable]],
    theta: Sequence[tuple[X.Expr, frozenset[int]]] = (),
) -> JoinShape:
    """The join as the engine runs it: every linked probe is an exact index lookup (the engine's
    sorted key index), so a loop visits only the matching tuples; `theta`, the conditions reading
    several inputs that are no equality (conjunct, inputs), thin the partial results at their
    default selectivities (engine/joinorder/conditions.py) but serve no lookup."""
    ws = [replace(input_stats(i), buckets=EXACT) for i in inputs]
    return JoinShape(tuple(ws), equality_classes(len(ws), links), condition_estimates(theta, DEFAULT_DISTINCT))
