"""Reuse of the ids of groups that became empty (engine/aggregates/keys.py `release`,
AggregateOp._release): the interner against a dict model of the live keys, and grouped
aggregates whose groups die and come back, with reuse switched on from a few groups
(COMPACT_MIN lowered), against the reference evaluator at 1, 7 and all events per push.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cqlstream.engine.aggregates.keys import IntInterner
from cqlstream.engine.dsms import Dsms
from cqlstream.engine.operators.aggregate import AggregateOp
from tests.engine_harness import assert_same
from tests.test_group_keys import DDL, relation_events

SETTINGS = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow])
# the fixture only patches a class constant, the same for every generated input
FIXTURE = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])

small_keys = st.integers(-20, 20)  # the direct lookup table
wide_keys = st.sampled_from([-(2**62), 2**61 + 3, 7, 2**40, -5, 2**62 - 1])  # the sorted arrays only


@settings(max_examples=200, **SETTINGS)
@given(st.data())
def test_interner_with_releases_matches_a_dict_model(data):
    keys = data.draw(st.sampled_from([small_keys, wide_keys, small_keys | wide_keys]))
    it = IntInterner()
    live: dict[int, int] = {}  # key → id, the keys not released
    for _ in range(data.draw(st.integers(1, 8))):
        if live and data.draw(st.booleans()):
            gone = data.draw(st.lists(st.sampled_from(sorted(live)), unique=True, min_size=1))
            ids = np.array([live.pop(k) for k in gone], np.int64)
            n = it.n
            it.release(ids)
            assert it.n == n
            free = set(ids.tolist()) | set(it.free.tolist())
            assert len(free) == len(it.free)  # every released id once
            assert not free & set(live.values())
            continue
        batch = data.draw(st.lists(keys, max_size=12))
        n_before, free_before = it.n, it.free.tolist()
        got = it.map(np.array(batch, np.int64)).tolist()
        created: dict[int, int] = {}
        for k, g in zip(batch, got):
            if k not in live:
                created.setdefault(k, g)
            assert live.setdefault(k, g) == g
        assert len(set(live.values())) == len(live)  # distinct keys, distinct ids
        assert all(0 <= g < it.n for g in live.values())
        # new keys take the released ids first, in release order, then fresh ones
        want = (free_before + list(range(n_before, n_before + len(created))))[: len(created)]
        assert sorted(it.new_ids.tolist()) == sorted(created.values()) == sorted(want)
        for g, r in zip(it.new_ids.tolist(), it.new_rows.tolist()):
            assert created[batch[r]] == g


@pytest.fixture
def reuse_early(monkeypatch):
    """Reuse of empty groups' ids from 4 group ids on (and compaction past 4)."""
    monkeypatch.setattr(AggregateOp, "COMPACT_MIN", 4)


def _churn(n: int, width: int) -> list:
    """Stream events over `width` keys that come and go: most groups live a few instants."""
    out = []
    for t in range(n):
        a = (t * 7) % width if t % 5 else t
        out.append((t // 2, (a, None if t % 6 == 0 else t % 3, float(t % 4) / 4 - 0.25, "k" + str(t % 3))))
    return out + [(n, None)]


@settings(max_examples=25, **FIXTURE)
@given(
    st.integers(8, 60),
    st.integers(2, 30),
    st.sampled_from(["[Range 2]", "[Rows 3]", "[Now]", "[Range 5]", "[Range Unbounded]"]),
)
def test_aggregates_reusing_group_ids_over_windows(reuse_early, n, width, win):
    for q in [
        f"select a, b, count(*), sum(f), avg(a) from S {win} group by a, b",
        f"select a, min(f), max(s), count(distinct b), sum(distinct b) from S {win} group by a",
        f"select s, b, count(b) from S {win} group by s, b",
    ]:
        assert_same(DDL, q, {"S": _churn(n, width)}, float_digits=9)


@settings(max_examples=40, **FIXTURE)
@given(relation_events(), st.sampled_from(["a, b", "b, s, a", "s, f", "a"]))
def test_aggregates_reusing_group_ids_over_relations(reuse_early, events, keys):
    q = f"select {keys}, count(*), sum(b), min(s), max(a) from R group by {keys}"
    assert_same(DDL, q, {"R": events}, float_digits=9)


def test_ids_are_reused_past_the_threshold(reuse_early, monkeypatch):
    """100 one-instant groups: once past COMPACT_MIN, new groups take the dead groups' ids
    (compaction switched off: only the reuse can keep the ids few)."""
    monkeypatch.setattr(AggregateOp, "_compaction_due", lambda self: None)
    d = Dsms()
    d.execute(DDL)
    d.register_query("select a, count(*) from S [Now] group by a")
    for t in range(100):
        d.push("S", [(t, 1, 0.0, "x"), (t, 2, 0.0, "y")], ts=[t, t])
        d.run()
    d.end()
    op = next(o for o in d.plan.operators if isinstance(o, AggregateOp))
    assert op.recycling
    assert op.gkeys.n <= 8  # 100 keys seen, ids reused
    assert len(op.gkeys.packed.keys) <= 2  # only the live keys are kept
