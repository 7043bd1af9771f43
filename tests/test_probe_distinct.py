"""A DISTINCT under a probed aggregate takes the probe (cql/logical/probe_aggregates.py) and emits
one net change per value and probe interval (`DistinctOp` with a probe input,
engine/operators/probe_intervals.py).

- against the reference evaluator (which runs the plan without rewrites): DISTINCT over windows
  that expire (Range and Rows) and over a relation with inserts, deletes and updates, with a
  selection between it and the aggregate, a DISTINCT over a DISTINCT, an aggregate under the
  DISTINCT; 1, 7 and all events per push, paper and compat mode;
- per instant the same bag of result tuples as the plan without the probes, at every push size;
- the rule's reach (which DISTINCTs get the probe, which do not) and a hand-built case where the
  probed DISTINCT emits fewer rows.
"""

from __future__ import annotations

import importlib
from collections import Counter

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cqlstream.cql.logical import nodes as L
from cqlstream.engine.dsms import Dsms
from cqlstream.engine.operators.range_distinct import RangeDistinctOp
from cqlstream.engine.operators.relational import DistinctOp
from tests.engine_harness import assert_same, assert_same_without, engine_raw, per_instant
from tests.test_stream_join import _inputs, relation_events, stream_events

DDL = (
    "register stream S (a int, b int, c int); register stream T (a int, b int); register relation R (a int, b int);"
    "register view DT as select distinct * from T [Range 3];"
    "register view CT as select a, count(*) as n from T [Range 2] group by a;"
)
QUERIES = [
    "Rstream(select S.c, X.n from S [Now], (select a, count(*) as n from DT group by a) as X where S.a = X.a)",
    "Rstream(select S.c, X.b, X.n from S [Now], "
    "(select b, count(*) as n from (select distinct a, b from R) as D where a >= 1 group by b) as X where S.b = X.b)",
    "Rstream(select S.c, X.m from S [Now], "
    "(select a, max(b) as m, count(*) as k from (select distinct b, a from T [Rows 4]) as D group by a) as X "
    "where S.a = X.a and X.k > 1)",
    "Rstream(select S.c, X.n from S [Now], (select a, count(*) as n from (select distinct a from DT) as D2 group by a) as X "
    "where S.a = X.a)",
    "Rstream(select X.n, S.b from (select n, count(*) as k from (select distinct n from CT) as D group by n) as X, S [Now] "
    "where S.b = X.n)",
    "Rstream(select S.c, X.a, X.n from S [Now], (select a, count(*) as n from (select distinct a, b from R) as D group by a) as X)",
]

stream_join_module = importlib.import_module("cqlstream.cql.logical.rewrites.stream_join")


@settings(max_examples=90, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(QUERIES), stream_events(3), stream_events(2), relation_events(), st.booleans())
def test_probed_distinct_equals_reference(query, s, t, r, compat):
    assert_same(DDL, query, _inputs(s, t, r), compat=compat)


def _probed(d: Dsms) -> list[DistinctOp | RangeDistinctOp]:
    """The probed DISTINCTs (over a Range window's stream, range_distinct.py, or any relation)."""
    return [o for o in d.plan.operators if isinstance(o, (DistinctOp, RangeDistinctOp)) and o.probed]


def _by_instant(batches) -> dict[int, Counter]:
    out: dict[int, Counter] = {}
    for b in batches:
        if b is not None:
            for ts, row in zip(b.ts.tolist(), b.rows()):
                out.setdefault(ts, Counter())[row] += 1
    return out


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(QUERIES), stream_events(3), stream_events(2), relation_events(), st.booleans())
def test_same_results_as_without_probes(query, s, t, r, compat):
    def no_probes(mp: pytest.MonkeyPatch) -> None:
        mp.setattr(stream_join_module, "probe_aggregates", lambda x, s: x)

    assert_same_without(DDL, query, _inputs(s, t, r), compat, _probed, no_probes, key=per_instant)


def _distincts(query: str) -> list[L.Distinct]:
    d = Dsms()
    d.execute(DDL)
    h = d.register_query(query)
    return [n for n in L.walk(h.compiled.plan) if isinstance(n, L.Distinct)]


def test_distincts_under_a_probed_aggregate_get_the_probe():
    assert [x.probe is not None for x in _distincts(QUERIES[1])] == [True]
    assert [x.probe is not None for x in _distincts(QUERIES[3])] == [True, True]  # a DISTINCT over a DISTINCT
    d = Dsms()
    d.execute(DDL)
    plan = d.register_query(QUERIES[4]).compiled.plan
    aggs = [n for n in L.walk(plan) if isinstance(n, L.Aggregate)]
    assert len(aggs) == 2 and all(a.probe is not None for a in aggs)  # the aggregate under the DISTINCT too


def test_not_probed_when_read_directly_or_by_the_probing_stream():
    q = "Rstream(select S.c, D.a from S [Now], (select distinct a from T [Range 3]) as D where S.a = D.a)"
    assert [x.probe for x in _distincts(q)] == [None]
    q = (
        "Rstream(select I.a, X.n from (select Istream(a) from DT) as I [Now], "
        "(select a, count(*) as n from DT group by a) as X where I.a = X.a)"
    )
    assert all(x.probe is None for x in _distincts(q))
    assert [x.probe for x in _distincts("select a, count(*) from DT group by a")] == [None]


def test_probed_distinct_emits_fewer_rows():
    """Probes at 10 and 20 only. T's value (1, 1) arrives at 2, 7, 12, 17 and 22 and stays in
    [Range 3] 4 instants, so it enters and leaves DT 5 and 4 times; (1, 2) at 2 enters and leaves
    once: 11 changes. Per probe interval the net changes are: up to 10, (1, 1) in (at 7, its last
    change there); (1, 2) nothing; after 10, nothing (each leave is followed by an enter)."""
    s = [(10, (1, 0, 0)), (20, (1, 0, 0))]
    t = sorted([(i, (1, 1)) for i in range(2, 25, 5)] + [(2, (1, 2))])
    inputs = _inputs(s, t, [])
    query = QUERIES[0]
    new_out, _, d = engine_raw(DDL, query, inputs, None)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(stream_join_module, "probe_aggregates", lambda x, s: x)
        old_out, _, d_old = engine_raw(DDL, query, inputs, None)
    (new,) = _probed(d)
    (old,) = [o for o in d_old.plan.operators if isinstance(o, (DistinctOp, RangeDistinctOp))]
    assert old.counters.tuples_out == 11
    assert new.counters.tuples_out == 1
    assert _by_instant(new_out) == _by_instant(old_out) == {10: Counter({(0, 1): 1}), 20: Counter({(0, 1): 1})}
    assert_same(DDL, query, inputs)
