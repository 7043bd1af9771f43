"""Bounded-memory verdict of a query's plan in this engine (the server's `bounded_memory`).

Each relation in the plan gets a size class, and each stateful operator holds state of its
input's class (seed 003 §1.3: row-based windows are trivially bounded; time-based windows are
bounded only given a bound on the arrival rate; an unbounded window's relation grows with the
input). The verdict is the worst class held:

- True: bounded whatever the input (Rows windows; selections and Istream over streams; scalar
  count/sum/avg);
- None: bounded if the arrival rate is (Range/Now windows hold what arrives in their extent);
- False: grows with the input (state over an Unbounded window, or a Partition By window, whose
  number of partitions grows with the distinct keys).

Relations registered by the user (`register relation`) count as bounded: their size is the
user's. This is about this engine's plan, not the best possible one (seed 003 shows e.g.
`max(A)` over an unbounded stream needs O(1); this engine keeps the distinct values).
"""

from __future__ import annotations

from cqlstream.cql.logical import nodes as L
from cqlstream.engine.operators.base import BOUNDED as B
from cqlstream.engine.operators.base import GROWS as U
from cqlstream.engine.operators.base import RATE
from cqlstream.engine.operators.registry import operator_class

NAMES = {B: "bounded", RATE: "bounded for a bounded arrival rate", U: "grows with the input"}


def analyze(plan: L.Plan) -> tuple[int, list[str]]:
    """(worst class of state the plan holds, reasons naming the operators that hold it): each
    node's operator class tells its own contribution (`Operator.state_class`)."""
    held: list[tuple[int, str]] = []

    def size(n: L.Plan) -> int:
        """Size class of n's relation (streams hold nothing: B)."""
        kids = [size(i) for i in n.inputs]
        cls = operator_class(n)
        if cls is None:  # a source (registered relations count as bounded)
            return max(kids, default=B)
        c, why = cls.state_class(n, kids)
        held.extend(why)
        return c

    top = size(plan)
    if not plan.is_stream:  # a relation result is kept current (snapshots for subscribers)
        held.append((top, "the result relation"))
    if not held:
        return B, []
    worst = max(c for c, _ in held)
    return worst, sorted({why for c, why in held if c == worst})


def verdict(plan: L.Plan) -> tuple[bool | None, str]:
    """(True / None / False as in the module docstring, a one-line reason)."""
    c, why = analyze(plan)
    v = {B: True, RATE: None, U: False}[c]
    return v, (NAMES[c] + (": " + ", ".join(why) if why and c != B else ""))
