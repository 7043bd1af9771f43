"""The stream–relation join narrows its carried relation rows to those a call's S tuples can meet
(and those the relation's own events delete) before building the call's table
(StreamJoinOp._reachable, state_prefilter.reachable_rows): results equal the reference's at every
push size with narrowing forced on every call, the output is element for element (rows, ids, ts,
signs, order) the unnarrowed join's, the relation state kept is the same, and narrowing really
happens."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cqlstream.engine.operators import state_prefilter as P
from cqlstream.engine.operators import stream_join as SJ
from tests import strategies
from tests.engine_harness import assert_same, elements_of, engine_raw
from tests.test_join_scan import KEYS, ddl
from tests.test_stream_join import DDL, QUERIES, relation_events, stream_events

SETTINGS = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
TYPED = [
    "Rstream(select x.b, y.b from S [Now] as x, R as y where x.a = y.a)",
    "Rstream(select y.b, x.a from R as y, S [Now] as x where x.a = y.a and x.b = y.b)",
    "Rstream(select x.b, y.b from S [Now] as x, R as y where y.a = x.a and x.b < y.b)",
]


@settings(max_examples=60, **SETTINGS)
@given(
    query=st.sampled_from(QUERIES), s=stream_events(3), t=stream_events(2), r=relation_events(), compat=st.booleans()
)
def test_narrowed_stream_join_matches_reference(query, s, t, r, compat):
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(SJ, "NARROW_MIN", 0)
        mp.setattr(SJ, "NARROW_RATIO", 0)
        assert_same(DDL, query, {"S": s, "T": t, "R": r}, compat=compat)


@settings(max_examples=40, **SETTINGS)
@given(kind=st.sampled_from(sorted(KEYS)), q=st.sampled_from(TYPED), data=st.data())
def test_narrowed_keys_of_every_type(kind, q, data):
    """Int, float (−0.0 = 0.0) and string keys, NULLs never matching."""
    vals = KEYS[kind]
    r = data.draw(strategies.relation_events(n=30, first=vals))
    s = data.draw(strategies.stream_events(n=6, first=vals))
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(SJ, "NARROW_MIN", 0)
        mp.setattr(SJ, "NARROW_RATIO", 0)
        assert_same(ddl(kind), q, {"S": s, "R": r}, float_digits=9 if kind == "float" else None)


def _workload(seed: int, wide: bool):
    """A relation updated at every instant (inserts, deletes of held rows, updates) over many keys,
    and a few S tuples per instant; `wide`: keys over a span too large for the bitmap lookup."""
    rng = np.random.default_rng(seed)
    scale = 10**9 if wide else 1
    r, live = [], []
    for t in range(1, 50):
        for _ in range(25):
            if live and rng.random() < 0.3:
                r.append((t, -1, live.pop(int(rng.integers(len(live))))))
            else:
                row = (int(rng.integers(0, 60)) * scale, int(rng.integers(0, 3)))
                live.append(row)
                r.append((t, +1, row))
    s = [(t, (int(rng.integers(0, 60)) * scale, int(rng.integers(0, 3)), t)) for t in range(2, 50) for _ in range(3)]
    return {"S": s, "T": [], "R": r}


@pytest.mark.parametrize("wide", [False, True])
@pytest.mark.parametrize("query", [QUERIES[0], QUERIES[1], QUERIES[3]])
def test_same_elements_and_state_as_unnarrowed(monkeypatch, query, wide):
    inputs = _workload(7, wide)
    narrowed = []
    real = P.reachable_rows

    def spy(*a, **k):
        got = real(*a, **k)
        narrowed.append(got is not None)
        return got

    monkeypatch.setattr(SJ, "reachable_rows", spy)
    for chunk in (1, 7, None):
        monkeypatch.setattr(SJ, "NARROW_MIN", 0)
        new, _, d_new = engine_raw(DDL, query, inputs, chunk)
        monkeypatch.setattr(SJ, "NARROW_MIN", 1 << 60)
        old, _, d_old = engine_raw(DDL, query, inputs, chunk)
        assert elements_of(new) == elements_of(old), f"chunk={chunk}"
        assert [b.id.tolist() for b in new if b is not None] == [b.id.tolist() for b in old if b is not None]
        states = [next(o for o in d.plan.operators if isinstance(o, SJ.StreamJoinOp)).state for d in (d_new, d_old)]
        assert states[0].rows() == states[1].rows() and states[0].id.tolist() == states[1].id.tolist()
    assert sum(narrowed) > 10  # the narrowed path ran, and left rows out


def test_members_bitmap_and_search_agree():
    rng = np.random.default_rng(3)
    for span in (5, 1000, P.BITMAP_SPAN * 4):
        x = rng.integers(-span, span, 500)
        probe = rng.integers(-span // 2, span // 2 + 1, 40)
        want = np.isin(x, probe)
        assert (P._members(x, probe) == want).all()
    assert not P._members(np.arange(3), np.zeros(0, np.int64)).any()
