"""The stream–relation join keeps its relation rows in place between calls
(engine/operators/live_rows.py: appended into spare capacity, deletes marked dead, compacted in
order once the dead are as many as the live) and narrows a state whose key ascends by binary
searches (StreamJoinOp.ascending, state_prefilter._sorted_matches).

- LiveRows alone: order, positions, compaction, NULL masks arriving late, wider dtypes, pickling;
- the join with compaction at every chance and the ascending search forced, against the join that
  never compacts nor narrows: the same elements, ids and order at 1, 7 and all events per push,
  the same relation state, and the reference evaluator's result;
- a checkpoint taken while rows are dead continues exactly.
"""

from __future__ import annotations

import pickle

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cqlstream.cql.types import DataType
from cqlstream.engine.batch import from_rows
from cqlstream.engine.dsms import Dsms
from cqlstream.engine.operators import live_rows as LR
from cqlstream.engine.operators import state_prefilter as P
from cqlstream.engine.operators import stream_join as SJ
from tests.engine_harness import assert_same, continue_from_checkpoint, elements_of, engine_raw
from tests.test_stream_join import DDL, QUERIES

INT, FLOAT = DataType("int"), DataType("float")


def _rows(n: int, start: int = 0, nulls: bool = False):
    rows = [(start + i, None if nulls and i % 2 == 0 else float(i)) for i in range(n)]
    return from_rows(rows, [INT, FLOAT], ts=list(range(start, start + n)), ids=list(range(start, start + n)))


def test_live_rows_keep_order_through_kills_and_compaction():
    held = LR.LiveRows([INT, FLOAT])
    held.append(_rows(5))
    held.append(_rows(300, 5, nulls=True))  # grows the room; a NULL mask appears in column 1
    assert len(held) == 305 and held.view().nulls[1] is not None
    held.kill(np.arange(0, 200, 2))
    assert len(held) == 205 and not held.compact_if_due()  # 100 dead < 205 live: kept in place
    assert held.live().tolist() == [*range(1, 200, 2), *range(200, 305)]
    assert held.alive(np.array([0, 1, 2, 3])).tolist() == [1, 3]
    held.kill(np.arange(200, 305))
    assert held.compact_if_due()  # 205 dead ≥ 100 live
    got = held.batch()
    assert got.id.tolist() == list(range(1, 200, 2)) and held.n == 100 and held.n_dead == 0
    assert got.rows()[:3] == [(1, 1.0), (3, 3.0), (5, None)]
    held.append(_rows(3, 1000))
    assert held.batch().id.tolist()[-4:] == [199, 1000, 1001, 1002]
    assert held.batch().rows()[-1] == (1002, 2.0)  # the mask kept for rows without NULLs


def test_live_rows_append_positions_dtypes_and_pickle():
    held = LR.LiveRows([INT])
    b = from_rows([(i,) for i in range(6)], [INT], ts=[0] * 6, ids=list(range(6)))
    held.append(b, np.array([1, 4]))
    assert held.batch().rows() == [(1,), (4,)]
    wide = from_rows([(2.5,)], [FLOAT], ts=[1], ids=[9])
    held.append(wide)  # a float column into int arrays: wider arrays, nothing truncated
    assert held.batch().rows() == [(1.0,), (4.0,), (2.5,)]
    held.kill(np.array([0]))
    data = pickle.dumps(held)
    assert len(data) * 4 < len(pickle.dumps(held.room))  # the live rows alone, no spare room
    copy = pickle.loads(data)
    assert copy.batch().rows() == [(4.0,), (2.5,)] and copy.n_dead == 0


def test_sorted_matches_are_the_members():
    rng = np.random.default_rng(5)
    keys = np.sort(rng.integers(0, 40, 300))
    for _ in range(20):
        probe = rng.integers(-3, 45, int(rng.integers(0, 12)))
        nulls = rng.random(len(probe)) < 0.2
        got = P._sorted_matches(keys, (probe, nulls))
        assert got is not None
        assert got.tolist() == np.isin(keys, probe[~nulls]).nonzero()[0].tolist()
    assert P._sorted_matches(keys, (np.zeros(2), None)) is None  # float probes: the general path


def _workload(seed: int, ascending: bool):
    """A relation updated at every instant (inserts, deletes of held rows, updates), keys growing
    with time when `ascending` (one out of order near the end, so the order is lost midway), and
    a few S tuples an instant."""
    rng = np.random.default_rng(seed)
    r, live = [], []
    for t in range(1, 40):
        for _ in range(int(rng.integers(5, 25))):
            if live and rng.random() < 0.45:
                r.append((t, -1, live.pop(int(rng.integers(len(live))))))
                continue
            key = t // 3 + int(rng.integers(0, 2)) if ascending else int(rng.integers(0, 30))
            if ascending and t == 33 and not any(x[0] == -5 for x in live):
                key = -5
            row = (key, int(rng.integers(0, 3)))
            if ascending and live and row[0] < max(x[0] for x in live) and t != 33:
                row = (max(x[0] for x in live), row[1])
            live.append(row)
            r.append((t, +1, row))
    s = [(t, (int(rng.integers(0, 14)), int(rng.integers(0, 3)), t)) for t in range(2, 40) for _ in range(3)]
    return {"S": s, "T": [], "R": r}


def _op(d: Dsms) -> SJ.StreamJoinOp:
    return next(o for o in d.plan.operators if type(o) is SJ.StreamJoinOp)


@pytest.mark.parametrize("ascending", [True, False])
@pytest.mark.parametrize("query", [QUERIES[0], QUERIES[1], QUERIES[3], QUERIES[10]])
def test_in_place_state_equals_the_never_compacted_unnarrowed_join(monkeypatch, query, ascending):
    inputs = _workload(11, ascending)
    searched, flags = [], []
    real = P._sorted_matches

    def spy(keys, probe):
        got = real(keys, probe)
        searched.append(got is not None)
        return got

    monkeypatch.setattr(P, "_sorted_matches", spy)
    for chunk in (1, 7, None):
        monkeypatch.setattr(LR, "MIN_DEAD", 0)
        monkeypatch.setattr(SJ, "NARROW_MIN", 0)
        monkeypatch.setattr(SJ, "NARROW_RATIO", 0)
        new, _, d_new = engine_raw(DDL, query, inputs, chunk)
        monkeypatch.setattr(LR, "MIN_DEAD", 1 << 60)
        monkeypatch.setattr(SJ, "NARROW_MIN", 1 << 60)
        old, _, d_old = engine_raw(DDL, query, inputs, chunk)
        assert elements_of(new) == elements_of(old), f"chunk={chunk}"
        assert [b.id.tolist() for b in new if b is not None] == [b.id.tolist() for b in old if b is not None]
        a, b = _op(d_new).state, _op(d_old).state
        assert a.rows() == b.rows() and a.id.tolist() == b.id.tolist()
        flags.append(_op(d_new).ascending[0] if _op(d_new).ascending else None)
    if ascending and query != QUERIES[10]:
        assert any(searched)  # the ranges were searched
        assert False in flags  # and an out-of-order key ended the searches in some run


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(QUERIES), st.integers(0, 10**6), st.booleans(), st.booleans())
def test_compacted_and_searched_state_matches_reference(query, seed, ascending, compat):
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(LR, "MIN_DEAD", 0)
        mp.setattr(SJ, "NARROW_MIN", 0)
        mp.setattr(SJ, "NARROW_RATIO", 0)
        w = _workload(seed, ascending)
        w["S"] = w["S"][:40]
        w["R"] = w["R"][:120]
        assert_same(DDL, query, w, compat=compat)


def test_a_checkpoint_with_dead_rows_continues_exactly(tmp_path):
    """Pickled with rows dead and not yet compacted (the copy holds only the live ones, without
    spare room): both continue alike, and keep the same relation rows."""
    d = Dsms()
    d.execute(DDL)
    h = d.register_query("Rstream(select S.c, R.b from S [Now], R where S.a = R.a)")
    held: list[tuple[int, int]] = []

    def step(e: Dsms, t: int) -> None:
        r = np.random.default_rng(t)
        probes = [(int(x), 0, t) for x in r.integers(0, 4, 3)]
        rows = [(int(r.integers(0, 4)), t * 10 + i) for i in range(6)]
        e.push("R", rows, ts=[t] * 6)
        if e is d:
            held.extend(rows)
        gone = [held[int(i)] for i in r.choice(len(held), 4, replace=False)] if e is d else step.gone[t]
        if e is d:
            step.gone[t] = gone
            for x in gone:
                held.remove(x)
        e.push("R", gone, ts=[t] * len(gone), signs=[-1] * len(gone))
        e.push("S", probes, ts=[t] * 3)
        e.heartbeat("T", t)
        e.run()

    step.gone = {}  # type: ignore[attr-defined]
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(LR, "MIN_DEAD", 1 << 60)  # dead rows are never compacted away here
        copy, a, b = continue_from_checkpoint(d, h.id, tmp_path, step, warm=5, until=12)
    assert a == b and len(a) > 0
    ops = [_op(e) for e in (d, copy)]
    assert ops[0].state.rows() == ops[1].state.rows() and len(ops[0].state) > 0
    dead = [o.held.n_dead for o in ops]
    # the copy left behind the dead rows of the warm-up steps the join had processed (t = 0..3:
    # an instant's events are processed once time passes it)
    assert dead[1] > 0 and dead[0] - dead[1] == 4 * 4


def test_a_key_below_the_last_held_ends_the_searches(monkeypatch):
    """Keys 5, 6, 7 held, then 1 arrives alone in a later call: the rows no longer ascend, and the
    S tuple probing 1 must still meet it (a binary search over 5, 6, 7, 1 would miss it)."""
    inputs = {
        "S": [(1, (5, 0, 1)), (2, (6, 0, 2)), (3, (1, 0, 3)), (4, (7, 0, 4)), (5, (1, 0, 5))],
        "T": [],
        "R": [(0, 1, (5, 50)), (0, 1, (6, 60)), (0, 1, (7, 70)), (2, 1, (1, 10)), (4, 1, (8, 80))],
    }
    monkeypatch.setattr(SJ, "NARROW_MIN", 0)
    monkeypatch.setattr(SJ, "NARROW_RATIO", 0)
    assert_same(DDL, QUERIES[0], inputs)
    new, _, d = engine_raw(DDL, QUERIES[0], inputs, 1)
    assert (3, 1, (1, 3, 10)) in elements_of(new) and _op(d).ascending == [False]


def test_checkpoints_of_before_load_their_state():
    """A checkpoint of before LiveRows holds X's live rows as one batch (`state`), and the band
    join's as `state` too: both load, and the joins continue from those rows."""
    d = Dsms()
    d.execute(DDL)
    d.register_query(QUERIES[0])
    d.register_query(QUERIES[4])  # a band join (S [Range 2] read as its stream)
    d.push("R", [(1, 10), (2, 20)], ts=[0, 0])
    d.push("S", [(1, 0, 5), (2, 1, 6)], ts=[1, 1])
    for src in ("S", "T", "R"):
        d.heartbeat(src, 2)
    d.run()
    for op in [o for o in d.plan.operators if isinstance(o, SJ.StreamJoinOp)]:
        rows = op.state
        old = {k: v for k, v in op.__dict__.items() if k not in ("held", "ascending", "last_key", "tuples")}
        old["state"] = rows
        back = type(op).__new__(type(op))
        back.__setstate__(old)
        assert back.state.rows() == rows.rows() and back.state.id.tolist() == rows.id.tolist()
        assert len(rows) > 0 and back.ascending == [None] * len(back.equi)
