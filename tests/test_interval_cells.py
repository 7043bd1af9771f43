"""A probed aggregate whose values are all read off additive totals (count, sum, avg) cuts its
events into (group, probe interval) cells at once (`AggregateStrategy.interval_cells`,
engine/operators/aggregate.py's module docstring) instead of building every (group, instant)
cell and keeping those that end an interval.

- the output, element for element with ids, equals the plan's with per-instant cells (the
  strategies' `interval_cells` switched off), at 1, 7 and all events per push, and the reference
  evaluator's: windows that expire, a relation with inserts, deletes and updates, float averages
  of an aggregate's updated rows (Linear Road's SMAvgRel), several probe intervals per batch;
- which operators take it: count/sum/avg yes; min/max and DISTINCT (multisets, cells per instant)
  and a plan without a probe no; and that the cells compared are all the cells built.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cqlstream.engine.aggregates.additive import Count, Sum
from cqlstream.engine.dsms import Dsms
from cqlstream.engine.operators.aggregate import AggregateOp
from tests.engine_harness import assert_same, engine_raw
from tests.test_stream_join import _inputs, relation_events, stream_events

DDL = (
    "register stream S (a int, b int, c int); register stream T (a int, b int); register relation R (a int, b int);"
    "register view CT as select a, count(*) as n, sum(b) as s from T [Range 3] group by a;"
    "register view AT as select a, avg(b) as v, count(b) as k from T [Rows 4] group by a;"
    "register view AR as select a, b, avg(b) as v from R group by a, b;"
    "register view AA as select a, avg(v) as m, sum(v) as t, count(*) as n from AR group by a;"
    "register view MR as select a, min(b) as lo, count(*) as n from R group by a;"
    "register view DR as select a, count(distinct b) as d from R group by a;"
)
QUERIES = [
    "Rstream(select S.c, CT.n, CT.s from S [Now], CT where S.a = CT.a)",
    "Rstream(select S.c, AT.v, AT.k from S [Now], AT where S.a = AT.a)",
    "Rstream(select S.c, AA.m, AA.t, AA.n from S [Now], AA where S.a = AA.a)",
    "Rstream(select S.c, AR.v from S [Now], AR where S.a = AR.a and S.b = AR.b)",
    "Rstream(select CT.a, S.b from CT, S [Now] where S.a = CT.a and CT.n > 1)",
]
NOT_TAKEN = [
    "Rstream(select S.c, MR.lo, MR.n from S [Now], MR where S.a = MR.a)",
    "Rstream(select S.c, DR.d from S [Now], DR where S.a = DR.a)",
    "select a, count(*) from T [Range 3] group by a",
]


def _taking(d: Dsms) -> list[AggregateOp]:
    return [o for o in d.plan.operators if isinstance(o, AggregateOp) and o.probed and o.interval_cells]


def _with_ids(batches) -> list[tuple]:
    """Every (ts, sign, id, row) of the raw output, in order: ids and order within an instant too."""
    return [
        (t, s, i, r)
        for b in batches
        if b is not None
        for t, s, i, r in zip(b.ts.tolist(), b.sign.tolist(), b.id.tolist(), b.rows())
    ]


def _per_instant_cells(mp: pytest.MonkeyPatch) -> None:
    mp.setattr(Count, "interval_cells", False)
    mp.setattr(Sum, "interval_cells", False)


def _same_as_per_instant_cells(query: str, inputs, compat: bool) -> None:
    for chunk in (1, 7, None):
        new, h, d = engine_raw(DDL, query, inputs, chunk, compat=compat)
        assert _taking(d), h.explain()
        with pytest.MonkeyPatch.context() as mp:
            _per_instant_cells(mp)
            old, _, d_old = engine_raw(DDL, query, inputs, chunk, compat=compat)
            assert not _taking(d_old)
        assert _with_ids(new) == _with_ids(old), f"chunk={chunk}\n{h.explain()}"


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(QUERIES), stream_events(3), stream_events(2), relation_events(), st.booleans())
def test_same_elements_and_ids_as_cells_per_instant(query, s, t, r, compat):
    _same_as_per_instant_cells(query, _inputs(s, t, r), compat)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(QUERIES), stream_events(3), stream_events(2), relation_events(), st.booleans())
def test_equal_reference(query, s, t, r, compat):
    assert_same(DDL, query, _inputs(s, t, r), compat=compat, float_digits=12)


def _busy_inputs() -> dict[str, list]:
    """Many changes per group between sparse probes: several intervals per batch, updates of AR's
    rows (a delete and an insert at one instant) with float averages, deletes of held rows."""
    s = [(t, (a, b, t)) for t in (5, 6, 13, 30, 31, 47) for a in range(3) for b in range(3)]
    t = [(i // 2, (i % 3, (7 * i) % 5)) for i in range(120)]
    r, held = [], []
    for i in range(150):
        ts = i // 3
        if i % 4 == 3 and held:
            r.append((ts, -1, held.pop(0)))
            if i % 8 == 7:
                continue
        row = (i % 3, (5 * i) % 4)
        held.append(row)
        r.append((ts, +1, row))
    return _inputs(s, t, r)


@pytest.mark.parametrize("query", QUERIES)
def test_busy_batches(query):
    inputs = _busy_inputs()
    _same_as_per_instant_cells(query, inputs, False)
    assert_same(DDL, query, inputs, float_digits=12)


@pytest.mark.parametrize("query", NOT_TAKEN)
def test_not_taken_with_multisets_or_without_a_probe(query):
    _, _, d = engine_raw(DDL, query, _busy_inputs(), None)
    assert [o for o in d.plan.operators if isinstance(o, AggregateOp)] and not _taking(d)
    assert_same(DDL, query, _busy_inputs())


def test_cells_built_are_the_cells_compared(monkeypatch):
    """Taken, a batch builds only the cells that end a probe interval: none is dropped after."""
    seen: list[tuple[int, int]] = []
    changes = AggregateOp._changes

    def spy(self, ev, glo, ghi):
        ch = changes(self, ev, glo, ghi)
        seen.append((ch.cx.ncells, len(ch.cell_g)))
        assert ch.em is None
        return ch

    monkeypatch.setattr(AggregateOp, "_changes", spy)
    _, _, d = engine_raw(DDL, QUERIES[2], _busy_inputs(), None)
    assert _taking(d) and seen
    assert all(built == compared for built, compared in seen)
    # per instant there would be more cells than intervals: AR's rows change at 50 instants, probes at 6
    assert sum(b for b, _ in seen) < 150
