"""The plan nodes of queries the synopsis strategies run, and the rewrite that chooses them: a
select-project-join of several streams read whole, duplicate-preserving or duplicate-eliminating,
that the bounded-memory characterization judges bounded, is run by one synopsis join
(engine/operators/synopsis_join.py) reading the streams directly and holding constant-size
synopses, instead of windows, a join and a projection whose state keeps every tuple; a bounded
aggregate over such a join (COUNT / SUM / AVG / MAX / MIN, engine/bounded_aggregate.py) by one
synopsis aggregate (engine/operators/synopsis_aggregate.py) whose result relation feeds what the
query computes above the aggregate (docs/bounded-memory.md)."""

from __future__ import annotations

from dataclasses import dataclass

from cqlstream.cql.logical import nodes as L


@L.cached_hash
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


@L.cached_hash
@dataclass(frozen=True)
class SynopsisAggregatePlan(L.Plan):
    """`query` (an aggregate over a join of streams read whole; its schema: the keys, then the
    aggregates) evaluated with partial aggregates per bucket over `sources`; a relation.
    `representatives`: MAX / MIN bounded only through extreme tuples, the buckets keep at most two
    representative tuples (§7.2) rather than a first tuple and a count."""

    query: L.Aggregate
    sources: tuple[L.StreamSource, ...]
    representatives: bool = False

    @property
    def inputs(self) -> tuple[L.Plan, ...]:
        return self.sources

    @property
    def schema(self) -> tuple[L.Attribute, ...]:
        return self.query.schema

    is_stream = False

    @property
    def monotonic(self) -> bool:
        return False

    def replace_inputs(self, new: tuple[L.Plan, ...]) -> SynopsisAggregatePlan:
        sources = tuple(s for s in new if isinstance(s, L.StreamSource))
        return SynopsisAggregatePlan(self.query, sources, self.representatives)

    def explain_label(self) -> str:
        aggs = ", ".join(a.sql() for a in self.query.aggs)
        how = (
            "≤ 2 representatives and partial extremes per bucket"
            if self.representatives
            else "partial aggregates per bucket"
        )
        return f"SYNOPSIS AGGREGATE ({aggs}; {how}) of {', '.join(s.name for s in self.sources)}"


SynopsisPlan = SynopsisJoinPlan | SynopsisAggregatePlan


def _sources(plan: L.Plan) -> tuple[L.StreamSource, ...]:
    return tuple({n.name: n for n in L.walk(plan) if isinstance(n, L.StreamSource)}.values())


def synopsis_plan(plan: L.Plan) -> L.Plan | None:
    """`plan` rewritten to a synopsis strategy when one evaluates it exactly in constant memory,
    else None: a synopsis join for a select-project-join judged bounded by the characterization,
    over several stream occurrences, whose result columns are exactly the projected attributes
    (no constants, no repeats); a synopsis aggregate in place of an aggregate (under projections
    and a relation-to-stream operator) that `bounded_aggregate.strategy` accepts, on counts or on
    representatives as it says."""
    from cqlstream.engine.bounded_synopsis import applicable

    q = applicable(plan)
    if q is not None and len(plan.schema) == len(q.projected):
        return SynopsisJoinPlan(plan, _sources(plan))
    node, above = plan, []
    while isinstance(node, (L.RelToStream, L.Project)):
        above.append(node)
        node = node.input
    if not isinstance(node, L.Aggregate):
        return None
    # only under an aggregate: a query without one does without the module
    from cqlstream.engine.bounded_aggregate import strategy

    got = strategy(node)
    if got is None:
        return None
    out: L.Plan = SynopsisAggregatePlan(node, _sources(node), got[1])
    for n in reversed(above):
        out = L.with_inputs(n, (out,))
    return out


def synopsis_node(plan: L.Plan) -> SynopsisJoinPlan | SynopsisAggregatePlan | None:
    """The synopsis join or aggregate a (rewritten) plan runs, if any."""
    return next((n for n in L.walk(plan) if isinstance(n, (SynopsisJoinPlan, SynopsisAggregatePlan))), None)
