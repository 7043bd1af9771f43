"""Integer sum/avg without their float shadow while no sum can leave int64
(engine/aggregates/sum_bound.py): streams whose values start small (the shadow skipped) and then
grow until sums leave the int64 range and come back (the carried shadow rebuilt from the int64
totals, then computed), over windows and a relation with deletes, against the reference evaluator
at 1, 7 and all events per push.
"""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cqlstream.engine.aggregates.group_state import GroupState
from cqlstream.engine.aggregates.quantities import Quantity
from cqlstream.engine.aggregates.sum_bound import SumBound
from tests.engine_harness import assert_same

SETTINGS = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow])
DDL = "register stream S (a int, b int); register relation R (a int, b int);"
BIG = [2**62, -(2**62), 2**63 - 1, -(2**63), 3 * 2**61, 2**40]


def _stream(small: list[int], big: list[int]) -> list:
    """Small values first (the bound holds), then big ones (it breaks), then small again."""
    vals = small + big + small
    out = [(t // 2, (t % 3, v)) for t, v in enumerate(vals)]
    return out + [(len(vals), None)]


QUERIES = [
    "select a, sum(b), avg(b), count(*) from S {w} group by a",
    "select sum(b), avg(b), sum(distinct b) from S {w}",
    "select a, sum(distinct b), avg(distinct b) from S {w} group by a",
]


@settings(max_examples=40, **SETTINGS)
@given(
    st.lists(st.integers(-50, 50), min_size=1, max_size=12),
    st.lists(st.sampled_from(BIG) | st.integers(-(2**63), 2**63 - 1), max_size=6),
    st.sampled_from(["[Range 3]", "[Rows 4]", "[Range Unbounded]", "[Partition By a Rows 2]"]),
)
def test_sums_as_values_grow_past_the_bound(small, big, win):
    for q in QUERIES:
        assert_same(DDL, q.format(w=win), {"S": _stream(small, big)}, float_digits=12)


@settings(max_examples=40, **SETTINGS)
@given(st.data())
def test_sums_over_a_relation_with_deletes(data):
    events, live, t = [], [], 0
    for i in range(data.draw(st.integers(1, 24))):
        t += data.draw(st.sampled_from([0, 1]))
        if live and data.draw(st.booleans()):
            events.append((t, -1, live.pop(data.draw(st.integers(0, len(live) - 1)))))
        else:
            big = i > 6 and data.draw(st.booleans())
            v = data.draw(st.sampled_from(BIG)) if big else data.draw(st.integers(-9, 9))
            r = (data.draw(st.integers(0, 2)), v)
            live.append(r)
            events.append((t, +1, r))
    assert_same(DDL, "select a, sum(b), avg(b) from R group by a", {"R": events}, float_digits=12)


def test_the_shadow_is_skipped_then_rebuilt():
    """Small values keep the bound (the shadow skipped); a value that makes E · M reach 2^62
    breaks it for good, and the carried shadow is rebuilt exactly from the int64 totals."""
    q = Quantity("sum", 0, floating=True)
    state = GroupState([], [], [Quantity("sum", 0), q])
    state.ensure(3)
    state.totals[Quantity("sum", 0)][:3] = [5, -(2**61) - 3, 2**53 + 1]
    b = SumBound([q])
    ones = [np.ones(4, bool)]
    assert b.skip(4, [np.array([1, -7, 3, 0])], ones, [False], state) == {q}
    assert b.skip(4, [np.array([2**58, 0, 0, 0])], ones, [False], state) == {q}  # 8 · 2^58 < 2^62
    assert b.skip(4, [np.array([0, -(2**59), 0, 0])], ones, [False], state) == frozenset()  # 12 · 2^59
    hi, lo = state.fsum_hi[q][:3], state.fsum_lo[q][:3]
    assert [int(h) + int(x) for h, x in zip(hi, lo)] == [5, -(2**61) - 3, 2**53 + 1]  # hi + lo exact
    assert b.skip(1, [np.array([1])], [np.ones(1, bool)], [False], state) == frozenset()
