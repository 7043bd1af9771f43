"""Aggregates read only by a stream–relation join emit net changes per probe interval
(cql/logical/probe_aggregates.py, `AggregateOp` with a probe input).

- against the reference evaluator (which runs the plan without rewrites): grouped count, sum, avg,
  min and max over windows that expire and over a relation with inserts, deletes and updates,
  aggregates over aggregates, selections and projections between them and above the join,
  several probe tuples per instant and instants without any, the stream first or second, the
  aggregate over a window of the probing stream itself; 1, 7
  and all events per push, paper and compat mode;
- the same rows at each instant as the plan without the probes, at every push size (the order
  within an instant may differ: a group that changes and changes back keeps its earlier row);
- the rule's reach: which aggregates get the probe (nested ones, through selections and
  projections) and which do not (an aggregate the probing stream itself reads; one below a
  DISTINCT), and that the probed aggregates emit fewer rows;
- a checkpoint (the engine pickled whole) continuing exactly as the original.
"""

from __future__ import annotations

import importlib

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cqlstream.cql.logical import nodes as L
from cqlstream.engine.dsms import Dsms
from cqlstream.engine.operators.aggregate import AggregateOp
from tests.engine_harness import assert_same, assert_same_without, continue_from_checkpoint, engine_raw, per_instant
from tests.test_stream_join import _inputs, relation_events, stream_events

DDL = (
    "register stream S (a int, b int, c int); register stream T (a int, b int); register relation R (a int, b int);"
    "register view CT as select a, count(*) as n, sum(b) as s from T [Range 3] group by a;"
    "register view AR as select a, b, avg(b) as v, min(b) as lo from R group by a, b;"
    "register view A2 as select b, max(v) as m, count(*) as n from AR where lo >= 0 group by b;"
    "register view AT as select a, avg(b) as v from T [Rows 4] group by a;"
    "register view CS as Istream(select a from CT);"
)
QUERIES = [
    "Rstream(select S.c, CT.n, CT.s from S [Now], CT where S.a = CT.a)",
    "Rstream(select CT.a, S.b from CT, S [Now] where S.a = CT.a and CT.n > 1)",
    "Rstream(select S.a, A2.m, A2.n from S [Now], A2 where S.b = A2.b)",
    "Rstream(select S.c, A2.b, A2.n from S [Now], A2)",
    "Rstream(select S.c, AT.v from S [Now], AT where S.a = AT.a and S.c <> AT.a)",
    "Rstream(select S.a, X.n, X.k from S [Now], (select n, count(*) as k from CT group by n) as X where S.b = X.n)",
    "Rstream(select S.c, X.n from S [Now], (select a, count(*) as n from S [Range 2] group by a) as X where S.a = X.a)",
]


stream_join_module = importlib.import_module("cqlstream.cql.logical.rewrites.stream_join")


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(QUERIES), stream_events(3), stream_events(2), relation_events(), st.booleans())
def test_probed_aggregates_equal_reference(query, s, t, r, compat):
    assert_same(DDL, query, _inputs(s, t, r), compat=compat)


def _no_probes(mp: pytest.MonkeyPatch) -> None:
    mp.setattr(stream_join_module, "probe_aggregates", lambda x, s: x)


def _probed(d: Dsms) -> list[AggregateOp]:
    return [o for o in d.plan.operators if isinstance(o, AggregateOp) and o.probed]


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(QUERIES), stream_events(3), stream_events(2), relation_events(), st.booleans())
def test_same_rows_per_instant_as_without_probes(query, s, t, r, compat):
    assert_same_without(DDL, query, _inputs(s, t, r), compat, _probed, _no_probes, key=per_instant)


def _aggregates(query: str) -> list[L.Aggregate]:
    d = Dsms()
    d.execute(DDL)
    h = d.register_query(query)
    return [n for n in L.walk(h.compiled.plan) if isinstance(n, L.Aggregate)]


def test_nested_aggregates_get_the_probe_through_selections_and_projections():
    aggs = _aggregates(QUERIES[2])  # A2 over AR, a selection on AR's min between them
    assert len(aggs) == 2 and all(a.probe is not None and a.probe.is_stream for a in aggs)


def test_not_probed_when_the_stream_reads_the_aggregate_or_below_distinct():
    q = "Rstream(select CS.a, CT.n from CS [Now], CT where CS.a = CT.a)"
    assert all(a.probe is None for a in _aggregates(q))
    q = "Rstream(select S.c, D.a from S [Now], (select distinct a from CT) as D where S.a = D.a)"
    assert all(a.probe is None for a in _aggregates(q))
    assert all(a.probe is None for a in _aggregates("select a, count(*) from T [Range 3] group by a"))


def test_probed_aggregate_emits_fewer_rows():
    """Probes at instants 10 and 20 only: T's 24 changes of one group emit one net change per interval."""
    s = [(10, (1, 0, 0)), (20, (1, 0, 0))]
    t = [(i, (1, i)) for i in range(1, 25)]
    inputs = _inputs(s, t, [])
    query = QUERIES[0]
    _, _, d = engine_raw(DDL, query, inputs, None)
    with pytest.MonkeyPatch.context() as mp:
        _no_probes(mp)
        _, _, d_old = engine_raw(DDL, query, inputs, None)
    (new,) = _probed(d)
    (old,) = [o for o in d_old.plan.operators if isinstance(o, AggregateOp)]
    assert old.counters.tuples_out == 47  # an insert, then a delete and an insert at 23 instants
    # the first run's bound is 19 (a call's end also ends an interval): an insert at 10, then a
    # delete and an insert at 19, at 20 (S's second instant) and at 24 (the end)
    assert new.counters.tuples_out == 7
    assert_same(DDL, query, inputs)


def test_a_checkpoint_continues_exactly(tmp_path):
    """The engine pickled whole midway (a server checkpoint) continues as the original: same
    results, same groups in the probed aggregate."""
    d = Dsms()
    d.execute(DDL)
    h = d.register_query(QUERIES[2])

    def step(e: Dsms, t: int) -> None:
        r = np.random.default_rng(t)
        e.push("R", [(int(r.integers(0, 3)), int(r.integers(0, 3))) for _ in range(2)], ts=[t, t])
        if t % 3 == 0:
            e.push("S", [(0, int(x), t) for x in r.integers(0, 3, 2)], ts=[t, t])
        else:
            e.heartbeat("S", t)
        e.heartbeat("T", t)
        e.run()

    copy, a, b = continue_from_checkpoint(d, h.id, tmp_path, step, warm=7, until=20)
    assert a == b and len(a) > 0
    rows = [[o.current_rows(0).rows() for o in _probed(e)] for e in (d, copy)]
    assert rows[0] == rows[1] and len(rows[0]) == 2
