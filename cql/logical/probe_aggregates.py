"""Aggregates that only a stream–relation join reads: tell them the probing stream.

`Rstream(S [Now] ⋈ X)` (a `StreamJoin`, cql/logical/rewrites/stream_join.py) reads its relation X
only as of the instants where S has tuples: X(t), with the insertion order of X's live rows,
for every t with S(t) non-empty. When X is a grouped aggregate (through selections and
projections, which are per tuple), the aggregate's changes between two such instants are never
read one by one: the join only needs each group's net change over the interval, emitted at the
group's last change in it (the instant its row was last inserted, so the live rows' insertion
order is the same). The aggregate gets S as its `probe` (logical `Aggregate.probe`, engine
`AggregateOp`) and emits only those net changes. An aggregate over such an aggregate (through
selections and projections) is read only at the same instants — an aggregate of a relation at t
depends only on that relation at t — so it gets the probe too: in Linear Road the speed
averages `SMVAvgRel` (per vehicle) and `SMAvgRel` (per segment, over `SMVAvgRel`), read by
`SMAvgStr` at minute ends, and `VolSM`, read by `SegTollStr2`.

A DISTINCT under a probed aggregate (through selections and projections) is read at those
instants only as well — its relation at t is a function of its input's at t — so it gets the
probe too and emits one net change per value and interval (engine/operators/relational.py):
in Linear Road `VolSMV` (`select distinct * from SegStr2 [Range 61 Seconds]`) under `VolSM`.
Aggregates below such a DISTINCT get the probe as well. The relation stays exact at every probe
instant, but a value that leaves and returns within one interval keeps its earlier row (no net
change), so the order of the live rows — and the join's output order within an instant — can
differ from the plan without probes; the bag of results at every instant cannot
(tests/test_probe_distinct.py).

Not across windows or set operations (their operators emit every change), not for a DISTINCT the
join reads directly (only under a probed aggregate), and not when S itself contains the aggregate
or DISTINCT (it would wait for its own reader's input).
"""

from __future__ import annotations

from dataclasses import replace

from cqlstream.cql.logical import nodes as L


def probe_aggregates(x: L.Plan, s: L.Plan, under_aggregate: bool = False) -> L.Plan:
    """Relation `x`, read only at the instants of stream `s`, with every aggregate it reads that
    way given `s` as its probe (`x` itself when none is); `under_aggregate`: `x` is the input of
    a probed aggregate, so the DISTINCTs it reads that way get the probe too."""
    if isinstance(x, (L.Filter, L.Project)):
        inner = probe_aggregates(x.input, s, under_aggregate)
        return x if inner is x.input else replace(x, input=inner)
    if not isinstance(x, (L.Aggregate, L.Distinct)):
        return x
    wanted = bool(x.keys) if isinstance(x, L.Aggregate) else under_aggregate  # grouped; a DISTINCT: below one
    if wanted and x.probe is None and not _contains(s, x):
        return replace(x, input=probe_aggregates(x.input, s, True), probe=s)
    return x


def _contains(plan: L.Plan, node: L.Aggregate | L.Distinct) -> bool:
    kind = type(node)
    return any(isinstance(n, kind) and replace(n, probe=None) == node for n in L.walk(plan))
