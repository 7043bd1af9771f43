"""The order of a relation-to-stream operator's rows within one instant (docs/semantics.md,
"Stream output order").

A relation is a bag: its elements within an instant have no order of their own, but a stream
written to a file does, and that order must not depend on how the input was cut into pushes or
rounds. Istream/Dstream/Rstream therefore emit an instant's rows

- in *arrival order* when the relation is a Range or Rows window's contents (Now and Unbounded
  included) or a stored relation, possibly filtered or projected (`arrival_ordered`): their
  elements' order is their stream's or file's, whatever the cuts (Linear Road's
  `Istream(S [Range 30 Seconds])` keeps its bytes);
- otherwise (aggregates, joins, DISTINCT, set operations, Partition windows, whose evictions the
  engine emits partition by partition, ...) *by value*: ascending whole-tuple value, column by
  column, NULL first (NaN after the other floats, text by code point); equal tuples are
  interchangeable.

One exception: `Rstream` over a binary join with a `[Now]` window input whose other input X is
arrival-ordered keeps the join's order (each S element of t in arrival order with its matches),
because the stream-join rewrite (rewrites/stream_join.py) computes that plan with the
stream–relation join, which gives that order (Linear Road's band join keeps its bytes). When X is
not arrival-ordered (an aggregate, a join, DISTINCT ...) the join's matches would follow X's
internal row order, which follows the rounds: that Rstream emits by value like the others, and the
stream–relation join sorts its output by the plan's output columns (`StreamJoin.order`).

The engine (engine/operators/r2s.py) and the reference evaluator both read this rule (`by_value`).
"""

from __future__ import annotations

from cqlstream.cql.logical import nodes as L

# relation nodes whose elements keep their input's order, row by row
_ROWWISE = (L.Filter, L.Project)


def by_value(node: L.RelToStream) -> bool:
    """True when the relation-to-stream operator `node` emits an instant's rows by value."""
    if arrival_ordered(node.input):
        return False
    return not (node.op == "rstream" and _now_join(node.input))


def _now_join(node: L.Plan) -> bool:
    """The shape the stream-join rewrite takes whose join order is kept: row-wise operators over
    a binary join with a `[Now]` window input (the first, if both are) and an arrival-ordered
    other input."""
    while isinstance(node, _ROWWISE):
        node = node.input
    if not (isinstance(node, L.Join) and len(node.inputs_) == 2):
        return False
    now = [k for k, i in enumerate(node.inputs_) if isinstance(i, L.Window) and i.spec == L.RangeSpec(0)]
    return bool(now) and arrival_ordered(node.inputs_[1 - now[0]])


def arrival_ordered(node: L.Plan) -> bool:
    """True when the relation `node` lists an instant's elements in their arrival order (a Range
    or Rows window over a stream, a stored relation, and row-wise operators over those); any
    other relation operator (and any node this rule does not know) gets value order."""
    while isinstance(node, _ROWWISE):
        node = node.input
    if isinstance(node, L.Window):
        return not isinstance(node.spec, L.PartitionSpec)
    return isinstance(node, L.RelationSource)
