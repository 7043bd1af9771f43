"""Which output columns of a physical node the plan above it actually reads (seed 000 §3.3.2).

k-Mon's column elimination keeps, in a join's private state, only the columns something reads:
the join's own predicate and the columns of its output that an operator above it reads. This
module answers the second part over the global physical plan, so a join shared by several queries
gets the union of their reads. Every query's output is read whole (subscribers see every column).
A node passes down to its inputs what it reads itself plus what of its output is read, through a
registry keyed by logical node type; a node type the registry does not know reads every column of
its inputs (DISTINCT, set operations and Istream/Dstream/Rstream compare whole tuples, so they do
too, by rule). The plan's column pruning (engine/column_pruning.py) uses the same analysis to have
every operator fill only the columns read of its output, so a rule must name every input column
the node's operator reads to compute the columns asked of it (a column left out comes as NULL).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from cqlstream.cql.logical import expr as X
from cqlstream.cql.logical import nodes as L

if TYPE_CHECKING:
    from cqlstream.engine.planner import PNode

Cols = frozenset[int]
# (node, columns of its output read above) -> columns of each input it reads
ReadRule = Callable[[L.Plan, Cols], list[Cols]]


def _all(node: L.Plan) -> list[Cols]:
    return [frozenset(range(len(i.schema))) for i in node.inputs]


def _cols(exprs: Iterable[X.Expr | None]) -> set[int]:
    out: set[int] = set()
    for e in exprs:
        if e is not None:
            out |= X.columns(e)
    return out


def _project(node: L.Plan, read: Cols) -> list[Cols]:
    assert isinstance(node, L.Project)
    return [frozenset(_cols(node.exprs[c] for c in read))]


def _filter(node: L.Plan, read: Cols) -> list[Cols]:
    assert isinstance(node, L.Filter)
    return [frozenset(read | X.columns(node.predicate))]


def _window(node: L.Plan, read: Cols) -> list[Cols]:
    assert isinstance(node, L.Window)
    keys = node.spec.keys if isinstance(node.spec, L.PartitionSpec) else ()
    return [frozenset(read | set(keys))]


def _sample(node: L.Plan, read: Cols) -> list[Cols]:
    return [read]


def _aggregate(node: L.Plan, read: Cols) -> list[Cols]:
    """Group keys always (they make the groups); an aggregate's argument when its column is read
    (COUNT(*) reads none) or the HAVING predicate reads it."""
    assert isinstance(node, L.Aggregate)
    nk = len(node.keys)
    if node.having is not None:
        read = read | X.columns(node.having)
    args = [a.arg for i, a in enumerate(node.aggs) if nk + i in read]
    return [frozenset(_cols(node.keys) | _cols(args))]


def _join(node: L.Plan, read: Cols) -> list[Cols]:
    """The predicate's columns and the read output columns (and those a stream join sorts its
    output by), each given to the input it comes from."""
    assert isinstance(node, (L.Join, L.StreamJoin))
    offs, out = [], 0
    for i in node.inputs_:
        offs.append(out)
        out += len(i.schema)
    need = set(read) | X.columns(node.predicate) if node.predicate is not None else set(read)
    for e in getattr(node, "order", None) or ():
        need |= X.columns(e)
    return [frozenset(c - o for c in need if o <= c < o + len(i.schema)) for o, i in zip(offs, node.inputs_)]


READS: dict[type, ReadRule] = {
    L.Project: _project,
    L.Filter: _filter,
    L.Window: _window,
    L.Sample: _sample,
    L.Aggregate: _aggregate,
    L.Join: _join,
    L.StreamJoin: _join,
}


def input_reads(node: L.Plan, read: Cols) -> list[Cols]:
    """Columns of each input of `node` read when `read` of its output is read."""
    rule = READS.get(type(node))
    return _all(node) if rule is None else rule(node, read)


def read_columns(nodes: Iterable[PNode], outputs: Iterable[PNode]) -> dict[int, Cols]:
    """id(PNode) -> the columns of its output read by the plan above it (every column of a query's
    output, `outputs`), for every node in `nodes` (the global plan's)."""
    nodes = list(nodes)
    consumers: dict[int, list[PNode]] = {}
    for pn in nodes:
        for k in pn.inputs:
            consumers.setdefault(id(k), []).append(pn)
    whole = {id(p) for p in outputs}
    memo: dict[int, Cols] = {}

    def reads(pn: PNode) -> Cols:
        hit = memo.get(id(pn))
        if hit is not None:
            return hit
        out: set[int] = set(range(len(pn.node.schema))) if id(pn) in whole else set()
        for c in consumers.get(id(pn), ()):
            per = input_reads(c.node, reads(c))
            for pos, k in enumerate(c.inputs):
                if k is pn and pos < len(per):
                    out |= per[pos]
        memo[id(pn)] = frozenset(out)
        return memo[id(pn)]

    for pn in nodes:
        reads(pn)
    return memo
