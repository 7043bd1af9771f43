"""Deletes given their group id by a FIFO of the inserts (engine/operators/retract_fifo.py, used by
engine/aggregates/keys.py): the FIFO against a list model, and grouped aggregates over windows
that retract in insertion order (the FIFO serves), over Partition By windows and relations that
delete out of order (it switches off), with keys whose layout widens mid-stream or outgrows 62
bits, and with groups dying and coming back under id reuse and compaction (COMPACT_MIN lowered),
against the reference evaluator at 1, 7 and all events per push.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cqlstream.cql.types import INT
from cqlstream.engine.aggregates.keys import GroupKeys
from cqlstream.engine.operators.aggregate import AggregateOp
from cqlstream.engine.operators.retract_fifo import RetractFifo
from tests.engine_harness import assert_same
from tests.test_group_keys import DDL, relation_events

SETTINGS = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow])
FIXTURE = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])


@settings(max_examples=200, **SETTINGS)
@given(st.data())
def test_fifo_matches_a_list_model(data):
    f = RetractFifo()
    model: list[tuple[int, int]] = []  # (key, id), oldest first
    for _ in range(data.draw(st.integers(1, 10))):
        op = data.draw(st.sampled_from(["push", "take", "take", "remap", "repack"]))
        if op == "push":
            keys = data.draw(st.lists(st.integers(0, 5), max_size=6))
            ids = [k * 10 + i for i, k in enumerate(keys)]
            f.push(np.array(keys, np.int64), np.array(ids, np.int64))
            if f.on:
                model += list(zip(keys, ids))
        elif op == "take":
            k = data.draw(st.integers(0, len(model) + 1))
            keys = [key for key, _ in model[:k]] + [7] * (k - len(model))  # 7: never pushed
            if k and data.draw(st.booleans()):  # one key changed: not the head's keys
                keys[data.draw(st.integers(0, k - 1))] += 1
            match = f.on and keys == [key for key, _ in model[: len(keys)]] and len(keys) <= len(model)
            got = f.take(np.array(keys, np.int64))
            if match:
                assert got is not None and got.tolist() == [i for _, i in model[: len(keys)]]
                model = model[len(keys) :]
            else:
                assert got is None and not f.on
                model = []
        elif op == "remap":
            hi = max([i for _, i in model], default=0) + 1
            remap = np.arange(hi, dtype=np.int64)[::-1].copy()
            f.remap(remap)
            model = [(k, int(remap[i])) for k, i in model]
        else:
            f.repack(lambda k: k * 3 + 1)
            model = [(k * 3 + 1, i) for k, i in model]
        assert len(f) == len(model)
        if f.on:
            assert f.keys[f.head :].tolist() == [k for k, _ in model]
            assert f.ids[f.head :].tolist() == [i for _, i in model]


@pytest.fixture
def served(monkeypatch):
    """Counts the deletes the FIFO served and the times it switched off."""
    tally = {"hits": 0, "off": 0}
    take = RetractFifo.take

    def counting(self, keys):
        got = take(self, keys)
        if got is None:
            tally["off"] += 1
        else:
            tally["hits"] += len(got)
        return got

    monkeypatch.setattr(RetractFifo, "take", counting)
    return tally


@pytest.fixture
def reuse_early(monkeypatch):
    """Reuse of empty groups' ids (and compaction) from 4 group ids on."""
    monkeypatch.setattr(AggregateOp, "COMPACT_MIN", 4)


def _stream(n: int, width: int, grow: int) -> list:
    """Events over `width` keys that come and go; from the middle on the key `a` jumps by `grow`
    (a wider layout, or past 62 bits: the chained interners)."""
    out = []
    for t in range(n):
        a = (t * 7) % width if t % 5 else t
        if t > n // 2:
            a += grow
        out.append((t // 2, (a, None if t % 6 == 0 else t % 3, float(t % 4) / 4 - 0.25, "k" + str(t % 3))))
    return out + [(n, None)]


QUERIES = [
    "select a, b, count(*), sum(b), avg(a) from S {w} group by a, b",
    "select a, min(f), max(s), count(distinct b) from S {w} group by a",
    "select b, a, count(*) from S {w} where b <> 1 group by b, a",
]
GROW = st.sampled_from([0, 0, 1000, 2**40, 2**62])


@settings(max_examples=30, **FIXTURE)
@given(st.integers(8, 60), st.integers(2, 30), GROW, st.sampled_from(["[Range 2]", "[Rows 3]", "[Now]", "[Range 5]"]))
def test_window_deletes_take_fifo_ids(reuse_early, served, n, width, grow, win):
    for q in QUERIES:
        assert_same(DDL, q.format(w=win), {"S": _stream(n, width, grow)}, float_digits=9)
    if grow < 2**62:  # in packed mode every delete of these windows comes from the FIFO
        assert served["hits"] > 0 and served["off"] == 0


@settings(max_examples=30, **FIXTURE)
@given(st.integers(8, 60), st.integers(2, 30), GROW, st.sampled_from(["b", "a", "s"]))
def test_partition_windows_switch_the_fifo_off(reuse_early, served, n, width, grow, part):
    for q in QUERIES:
        assert_same(DDL, q.format(w=f"[Partition By {part} Rows 2]"), {"S": _stream(n, width, grow)}, float_digits=9)


def test_partition_window_deletes_out_of_order(served):
    """A hand-made case whose deletes leave in another order than the inserts came: the FIFO's
    head does not match, so it switches off (a FIFO that skipped the check would give the
    deletes other groups' ids)."""
    rows = [(0, (1, 1, 0.0, "x")), (1, (2, 2, 0.0, "y")), (2, (3, 2, 0.0, "z")), (3, (4, 1, 0.0, "w"))]
    rows += [(4, (5, 2, 0.0, "v")), (5, (6, 1, 0.0, "u")), (6, None)]
    assert_same(DDL, "select a, count(*) from S [Partition By b Rows 1] group by a", {"S": rows})
    assert served["off"] > 0


@settings(max_examples=40, **FIXTURE)
@given(relation_events(), st.sampled_from(["a, b", "b, s, a", "s, f", "a"]))
def test_relations_with_deletes(reuse_early, events, keys):
    q = f"select {keys}, count(*), sum(b), min(s), max(a) from R group by {keys}"
    assert_same(DDL, q, {"R": events}, float_digits=9)


def test_relation_deleting_in_insertion_order_keeps_the_fifo(reuse_early, served):
    """A relation whose deletes retract its inserts oldest first: served by the FIFO, groups
    dying (ids reused past the lowered threshold) and coming back."""
    events = []
    for t in range(40):
        events.append((t, +1, (t % 6, t % 2, 0.5, "x")))
        if t >= 3:
            s = t - 3
            events.append((t, -1, (s % 6, s % 2, 0.5, "x")))
    assert_same(DDL, "select a, b, count(*), sum(a) from R group by a, b", {"R": events})
    assert served["hits"] > 0 and served["off"] == 0


def _map(gk: GroupKeys, vals: list[int], sign: int) -> list[int]:
    n = len(vals)
    return gk.map([np.array(vals, np.int64)], [None], n, np.full(n, sign, np.int8)).tolist()


def test_compaction_carries_the_fifo_over():
    """`adopt_fifo`: the live entries renumbered and re-packed under the fresh layout, so the
    later deletes are still served with the new ids; an empty FIFO stays on."""
    old = GroupKeys([INT])
    assert _map(old, [5, 9, 1000], +1) == [0, 1, 2]
    assert _map(old, [5], -1) == [0]
    fresh = GroupKeys([INT])
    assert fresh.map([np.array([9, 1000], np.int64)], [None], 2).tolist() == [0, 1]
    fresh.adopt_fifo(old, np.array([-1, 0, 1], np.int64))
    hits = fresh.fifo.hits
    assert _map(fresh, [9, 1000], -1) == [0, 1]
    assert fresh.fifo.on and fresh.fifo.hits == hits + 2

    empty = GroupKeys([INT])
    _map(empty, [3], +1)
    _map(empty, [3], -1)
    again = GroupKeys([INT])
    again.map([np.zeros(0, np.int64)], [None], 0)
    again.adopt_fifo(empty, np.zeros(1, np.int64))
    assert again.fifo.on
