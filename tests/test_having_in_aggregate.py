"""A selection over a grouped aggregate evaluated inside it (cql/logical/rewrites/having_in_aggregate.py,
`AggregateOp`'s HAVING predicate).

- against the reference evaluator (which runs the plan without rewrites): counts, sums, averages,
  minima and maxima over windows that expire (Range, Rows) and over a relation with inserts,
  deletes and updates, predicates on aggregates and on group keys that turn true and false again
  as the groups change (a row enters the selection and leaves it), a HAVING under a probed
  aggregate's stream–relation join; 1, 7 and all events per push, paper and compat mode;
- the same elements (ts, sign, row, id) in the same order as the plan with the selection operator;
- the snapshot a late reader starts from holds only the rows the predicate keeps.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cqlstream.cql.logical import nodes as L
from cqlstream.cql.logical import rewrites
from cqlstream.engine.dsms import Dsms
from cqlstream.engine.operators.aggregate import AggregateOp
from tests.engine_harness import assert_same, assert_same_without, engine_raw
from tests.test_stream_join import _inputs, relation_events, stream_events

DDL = (
    "register stream S (a int, b int, c int); register stream T (a int, b int); register relation R (a int, b int);"
    "register view VP as select a, b, count(*) as n from T [Range 3] group by a, b;"
)
QUERIES = [
    "select a, count(*) from T [Range 3] group by a having count(*) = 2",
    "select a, b, n from VP where n = 2",
    "select b, count(*) as k from VP where n >= 2 group by b",
    "select a, sum(b), avg(b) from R group by a having sum(b) > 2 and a <> 1",
    "select a, max(b), min(b) from T [Rows 4] group by a having max(b) - min(b) >= 1",
    "select b, count(*) from R group by b having count(*) > 1 or b = 0",
    "Istream(select a, count(*) from T [Range 2] group by a having count(*) > 1)",
    "Rstream(select S.c, X.n from S [Now], (select a, count(*) as n from T [Range 3] group by a) as X "
    "where S.a = X.a and X.n > 1)",
]


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(QUERIES), stream_events(3), stream_events(2), relation_events(), st.booleans())
def test_having_equals_reference(query, s, t, r, compat):
    assert_same(DDL, query, _inputs(s, t, r), compat=compat)


def _without_rule(mp: pytest.MonkeyPatch) -> None:
    mp.setattr(rewrites, "FINAL_RULES", tuple(x for x in rewrites.FINAL_RULES if x.__name__ != "having_in_aggregate"))


def _elements(batches) -> list[tuple]:
    return [(*e, i) for b in batches if b is not None for e, i in zip(b.elements(), b.id.tolist())]


def _having(d: Dsms) -> list[AggregateOp]:
    return [o for o in d.plan.operators if isinstance(o, AggregateOp) and o.having is not None]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(QUERIES), stream_events(3), stream_events(2), relation_events(), st.booleans())
def test_same_elements_in_the_same_order_as_the_selection(query, s, t, r, compat):
    assert_same_without(DDL, query, _inputs(s, t, r), compat, _having, _without_rule, key=_elements)


def test_rows_enter_and_leave_the_selection():
    """One group's count over [Range 3] goes 1, 2, 3, 2, 1: its row is in `count = 2` twice."""
    t = [(1, (1, 0)), (2, (1, 0)), (3, (1, 0)), (10, None)]  # the heartbeat at 10 expires them all
    new, h, d = engine_raw(DDL, QUERIES[0], _inputs([], t, []), None)
    (op,) = _having(d)
    assert "HAVING (count(*) = 2)" in h.explain()
    assert [(ts, sign, row) for ts, sign, row, _ in _elements(new)] == [
        (2, 1, (1, 2)),
        (3, -1, (1, 2)),
        (5, 1, (1, 2)),
        (6, -1, (1, 2)),
    ]
    assert op.counters.tuples_out == 4
    with pytest.MonkeyPatch.context() as mp:
        _without_rule(mp)
        _, _, d_old = engine_raw(DDL, QUERIES[0], _inputs([], t, []), None)
    (plain,) = [o for o in d_old.plan.operators if isinstance(o, AggregateOp)]
    assert plain.counters.tuples_out == 10  # + at 1; − and + at 2, 3, 5 (expiry) and 6; − at 7
    assert_same(DDL, QUERIES[0], _inputs([], t, []))


def test_a_late_reader_starts_from_the_kept_rows():
    """The snapshot of an aggregate with a HAVING (what a query registered while data flows
    starts from) holds only the groups whose row satisfies the predicate."""
    d = Dsms()
    d.execute(DDL)
    h = d.register_query("select a, count(*) from R group by a having count(*) = 2")
    d.push("R", [(1, 0), (1, 5), (2, 0), (3, 0), (3, 1), (3, 2)], ts=[1] * 6)
    d.heartbeat("R", 5)
    d.run()
    (op,) = _having(d)
    assert sorted(op.current_rows(5).rows()) == [(1, 2)]
    assert sorted(op.state.current_rows(5).rows()) == [(1, 2), (2, 1), (3, 3)]  # all groups
    plan = h.compiled.plan
    assert [n.having is not None for n in L.walk(plan) if isinstance(n, L.Aggregate)] == [True]
