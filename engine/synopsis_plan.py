"""The plan node of a query the synopsis join runs (engine/operators/synopsis_join.py), and the
rewrite that chooses it: a select-project-join of several streams read whole, duplicate-preserving
or duplicate-eliminating, that the bounded-memory characterization judges bounded, is run by one
operator reading the streams directly and holding constant-size synopses, instead of windows, a
join and a projection whose state keeps every tuple (docs/bounded-memory.md)."""

from __future__ import annotations

from dataclasses import dataclass

from cqlstream.cql.logical import nodes as L


@dataclass(frozen=True)
class SynopsisJoinPlan(L.Plan):
    """`query` (the logical plan it computes, with that plan's schema and output kind) evaluated
    by a synopsis join over `sources`, the distinct streams the query reads."""

    query: L.Plan
    sources: tuple[L.StreamSource, ...]

    @property
    def inputs(self) -> tuple[L.Plan, ...]:
        return self.sources

    @property
    def schema(self) -> tuple[L.Attribute, ...]:
        return self.query.schema

    @property
    def is_stream(self) -> bool:
        return self.query.is_stream

    @property
    def monotonic(self) -> bool:
        return True  # over streams read whole the result only grows

    def replace_inputs(self, new: tuple[L.Plan, ...]) -> SynopsisJoinPlan:
        return SynopsisJoinPlan(self.query, tuple(s for s in new if isinstance(s, L.StreamSource)))

    def explain_label(self) -> str:
        kind = "DISTINCT, 2 representatives per bucket" if not self._bag() else "counts per bucket"
        return f"SYNOPSIS JOIN ({kind}) of {', '.join(s.name for s in self.sources)}"

    def _bag(self) -> bool:
        n = self.query.input if isinstance(self.query, L.RelToStream) else self.query
        return not isinstance(n, L.Distinct)


def synopsis_plan(plan: L.Plan) -> SynopsisJoinPlan | None:
    """`plan` as a synopsis join when the synopsis join evaluates it exactly in constant memory:
    judged bounded by the characterization, over several stream occurrences, and its result
    columns exactly the projected attributes (no constants, no repeats); else None."""
    from cqlstream.engine.bounded_synopsis import applicable

    q = applicable(plan)
    if q is None or len(plan.schema) != len(q.projected):
        return None
    sources = {n.name: n for n in L.walk(plan) if isinstance(n, L.StreamSource)}
    return SynopsisJoinPlan(plan, tuple(sources.values()))
