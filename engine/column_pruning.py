"""Column pruning: every operator of the global plan fills only the output columns its consumers read.

The required columns of a node are the union, over its consumers in the shared plan, of the
columns each reads given what is required of it (engine/column_reads.py: one rule per kind of plan
node, in a registry; a kind without a rule, such as DISTINCT, set operations and Istream/Dstream,
reads every column). Every query's output is read whole. An operator told its required columns
(`Operator.produce_only`) fills only those and puts NULL placeholders (batch.placeholder:
zero-stride slices, ~0.2 µs each; its output is a batch.BlankedBatch, whose row gathers and
concatenations make new placeholders instead of copying) in the others: a join gathers only the required
columns of its pairs, a projection evaluates only the required expressions, a selection copies
only the required columns of its survivors. Operators without `produce_only` produce every
column, which is always exact.

Shared subplans and queries registered later. The analysis is redone at every registration
(`choose`), over the whole plan: an operator that has produced nothing yet gets the new union
(wider or narrower), so queries registered before data flows (a script) share every operator.
An operator that has produced rows keeps its choice, since rows already emitted (held by windows,
stores and joins above it, and in the snapshots late consumers start from) lack the columns it
did not produce. A query registered then that reads such a column (`conflicts`) gets private
copies of every node at or above the pruned one (the way k-Mon's column elimination is handled,
Dsms._attach); the shared operators are left as they are.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from cqlstream.engine.column_reads import read_columns

if TYPE_CHECKING:
    from cqlstream.engine.planner import PhysicalPlan, PNode


def required(plan: PhysicalPlan, outputs: Iterable[PNode]) -> dict[int, frozenset[int]]:
    """id(PNode) -> the output columns of that node its consumers read (`outputs`: the queries'
    output nodes, read whole)."""
    return read_columns(plan.nodes.values(), outputs)


def choose(plan: PhysicalPlan, outputs: Iterable[PNode]) -> dict[int, frozenset[int]]:
    """Tell every operator that has produced nothing yet the columns required of it; returns
    the analysis (nothing is pruned when the plan's options turn pruning off)."""
    reads = required(plan, outputs)
    if not getattr(plan.options, "prune_columns", True):
        return reads
    for pn in list(plan.nodes.values()):
        op = pn.op
        if op is None or pn.flowed:
            continue
        need = reads.get(id(pn), frozenset())
        op.produce_only(None if len(need) >= len(pn.node.schema) else need)
    return reads


def conflicts(plan: PhysicalPlan, outputs: Iterable[PNode]) -> list[PNode]:
    """Nodes that produced rows without a column the plan now reads (a query whose output is
    among `outputs` reads what the earlier ones did not): the new query must not share them."""
    done = [
        (pn, pn.op.produced)
        for pn in plan.nodes.values()
        if pn.op is not None and pn.op.produced is not None and pn.flowed
    ]
    if not done:  # (no analysis: queries registered before data, as a script's, cost nothing here)
        return []
    reads = required(plan, outputs)
    return [pn for pn, filled in done if not reads.get(id(pn), frozenset()) <= filled]


def explain_line(pn: PNode) -> str | None:
    """`produces only (a, b) of n columns` for a pruned operator's EXPLAIN, else None."""
    op = pn.op
    if op is None or op.produced is None:
        return None
    names = ", ".join(pn.node.schema[c].name for c in sorted(op.produced))
    return f"produces only ({names}) of {len(pn.node.schema)} columns (column pruning)"
