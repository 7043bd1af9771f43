"""Bounded-memory characterization of continuous queries over streams (Arasu, Babcock, Babu,
McAlister, Widom): whether a query can be answered in memory bounded by a constant, the rule
that decides it and why, and the constant-size synopsis when it can (docs/bounded-memory.md)."""

from __future__ import annotations

from cqlstream.cql.boundedness.from_plan import normal_form
from cqlstream.cql.boundedness.normal_form import Outside
from cqlstream.cql.boundedness.theorems import decide as decide_normal_form
from cqlstream.cql.boundedness.verdict import Decision
from cqlstream.cql.logical.nodes import Plan


def decide(plan: Plan) -> Decision | Outside:
    """The characterization's verdict on a logical plan, or Outside(why it does not apply)."""
    nf = normal_form(plan)
    return nf if isinstance(nf, Outside) else decide_normal_form(nf)


__all__ = ["Decision", "Outside", "decide"]
