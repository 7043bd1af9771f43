"""The numeric value map of Distinct / set operations / Istream-Dstream (engine/operators/intmap.py,
valuekeys.py): integer-like whole-tuple values packed into int64 keys in a numpy hash map, with
a re-pack when the values outgrow the layout and a move to the dict of Python tuples when they no
longer fit 62 bits. Checked three ways: the hash map against a dict, a value table on the packed
path against one held on the dict path (same slots, counts and ids batch by batch), and queries
against the reference evaluator at batch sizes 1, 7 and all."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cqlstream.cql.types import BOOL, INT, TIMESTAMP
from cqlstream.engine.batch import from_rows
from cqlstream.engine.operators.base import IdSource
from cqlstream.engine.operators.intmap import IntMap
from cqlstream.engine.operators.valuecount import ValueTable
from tests.engine_harness import assert_same
from tests.strategies import relation_events as shared_relation_events

SETTINGS = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
HUGE = [2**62, -(2**62), 2**63 - 1, -(2**63), -(2**63) + 1, 2**40]
# mostly small values (NULLs, negatives), sometimes one that widens the layout or forces the dict
value = st.one_of(
    st.integers(-2, 2), st.integers(-2, 2), st.just(None), st.sampled_from(HUGE), st.integers(-(2**20), 2**20)
)


# ------------------------------------------------------------ the hash map against a dict
@pytest.mark.parametrize("seed", range(4))
def test_int_map_agrees_with_a_dict(seed):
    rng = np.random.default_rng(seed)
    m, ref = IntMap(), {}
    for step in range(400):
        live = np.array(sorted(ref), np.int64)
        if len(live) and rng.random() < 0.5:  # delete some, then maybe bring a few back at once
            gone = rng.choice(live, size=min(len(live), int(rng.integers(1, 40))), replace=False)
            m.delete(gone)
            for k in gone.tolist():
                del ref[k]
        span = [40, 3000, 2**62][step % 3]
        q = np.unique(rng.integers(0, span, size=int(rng.integers(1, 80))))
        q = q[~np.isin(q, np.array(sorted(ref), np.int64))]
        v = rng.integers(0, 10**6, len(q))
        m.insert(q, v)
        ref.update(zip(q.tolist(), v.tolist()))
        probe = np.concatenate([rng.integers(0, 3000, 100), live])
        assert m.get(probe).tolist() == [ref.get(k, -1) for k in probe.tolist()]
        assert len(m) == len(ref)
    keys, vals = m.items()
    assert dict(zip(keys.tolist(), vals.tolist())) == ref


# ------------------------------------------------------------ packed path against the dict path
def run_table(batches, types, packed: bool):
    """Feed (rows, ts, signs) batches to a one-sided value table as Distinct does; per batch the
    slots, multiplicities and output ids, and whether the table ended on the packed path."""
    t = ValueTable(types, IdSource())
    if not packed:
        t.imap = None
    out = []
    for rows, ts, signs in batches:
        b = from_rows(rows, types, ts, signs)
        enc = t.encode(b)
        ch = t.changes(enc, b.ts, b.sign.astype(np.int64)[None, :])
        delta = (ch.after[0] > 0).astype(np.int64) - (ch.before[0] > 0)
        gidx, sign, ids = t.output_ids(ch, delta)
        t.finish(enc)
        out.append(
            [x.tolist() for x in (enc.slot, ch.slot, ch.before, ch.after, gidx, sign, ids, np.sort(t.free))] + [len(t)]
        )
    return out, t.imap is not None


@st.composite
def table_batches(draw, width: int):
    """Batches of bag updates (live values only deleted), re-inserts at one instant, values that
    die and return, ts non-decreasing across and within batches."""
    live: list[tuple] = []
    batches, ts = [], 0
    for _ in range(draw(st.integers(1, 8))):
        rows, tss, signs = [], [], []
        for _ in range(draw(st.integers(1, 9))):
            ts += draw(st.sampled_from([0, 0, 1, 3]))
            if live and draw(st.booleans()):
                row = live.pop(draw(st.integers(0, len(live) - 1)))
                rows.append(row), tss.append(ts), signs.append(-1)
                if draw(st.booleans()):  # back at the same instant
                    live.append(row)
                    rows.append(row), tss.append(ts), signs.append(1)
            else:
                row = tuple(draw(value) for _ in range(width))
                live.append(row)
                rows.append(row), tss.append(ts), signs.append(1)
        batches.append((rows, tss, signs))
    return batches


@settings(max_examples=150, **SETTINGS)
@given(st.integers(1, 3).flatmap(lambda w: st.tuples(st.just(w), table_batches(w))))
def test_packed_table_matches_the_dict_table(case):
    width, batches = case
    types = [INT] * width
    got, _ = run_table(batches, types, packed=True)
    want, _ = run_table(batches, types, packed=False)
    assert got == want


def test_values_move_from_the_packed_map_to_the_dict_mid_stream():
    """Small values pack; a value range over 62 bits moves the live values to the dict, where
    they keep their slots (a value that was live before comes back to the same slot)."""
    types = [INT, INT]
    batches = [
        ([(1, 2), (3, None), (1, 2)], [0, 0, 1], [1, 1, 1]),
        ([(1, 2), (-5, 7)], [2, 2], [-1, 1]),
        ([(2**40, 0), (3, None)], [3, 3], [1, -1]),  # widens the layout: a re-pack
        ([(-(2**62), 2**62), (1, 2)], [4, 4], [1, 1]),  # 62 + 62 bits: to the dict
        ([(1, 2), (1, 2), (3, None), (-5, 7)], [5, 5, 5, 5], [-1, -1, 1, -1]),
    ]
    t = ValueTable(types, IdSource())
    slots = {}
    for i, (rows, ts, signs) in enumerate(batches):
        b = from_rows(rows, types, ts, signs)
        enc = t.encode(b)
        t.changes(enc, b.ts, b.sign.astype(np.int64)[None, :])
        t.finish(enc)
        assert (t.imap is not None) == (i < 3)
        if i == 2:
            assert t.layout is not None and t.layout.covers([(2**40, 2**40), (0, 0)])
        for row, s in zip(rows, enc.slot.tolist()):
            assert slots.setdefault(row, s) == s or row == (3, None)  # (3, NULL) died at batch 2
    assert len(t) == 3  # (2^40, 0), (−2^62, 2^62), (3, NULL) back; (1, 2) and (−5, 7) deleted
    got, packed = run_table(batches, types, packed=True)
    assert not packed and got == run_table(batches, types, packed=False)[0]


def test_booleans_and_timestamps_pack_and_unpack_to_the_same_tuples():
    types = [BOOL, TIMESTAMP, INT]
    rows = [(True, 5, None), (False, -3, 1), (None, 2**61, 0), (True, 5, None)]
    batches = [(rows[:2], [0, 0], [1, 1]), (rows[2:], [1, 1], [1, -1]), ([(False, -(2**62), 1)], [2], [1])]
    got, packed = run_table(batches, types, packed=True)
    assert not packed  # the last value needs more than 62 bits: the live values went to the dict
    assert got == run_table(batches, types, packed=False)[0]


# ------------------------------------------------------------ queries against the reference
DDL = (
    "register stream S (a int, b int); register stream T (a int, b int); "
    "register relation R (a int, b int); register relation Q (a int, b int);"
)
wide = st.one_of(value, st.integers(-2, 2))


@st.composite
def stream_events(draw):
    events, t = [], draw(st.integers(0, 2))
    for _ in range(draw(st.integers(0, 12))):
        t += draw(st.sampled_from([0, 0, 1, 2]))
        events.append((t, (draw(wide), draw(wide))))
    return events


def relation_events():
    """Bag updates over wide values (tests/strategies.py's generator)."""
    return shared_relation_events(n=12, first=wide, second=wide)


QUERIES = [
    "select distinct a, b from R",
    "select distinct * from S [Range 2]",
    "Istream(select * from S [Range 2])",
    "Dstream(select a, b from S [Rows 2])",
    "Istream(select distinct b from S [Now])",
    "select a, b from R union distinct select a, b from Q",
    "select a, b from R except select * from T [Range 3]",
    "select * from S [Range 1] intersect select a, b from Q",
]


@settings(max_examples=40, **SETTINGS)
@given(query=st.sampled_from(QUERIES), s=stream_events(), t=stream_events(), r=relation_events(), q=relation_events())
def test_queries_match_the_reference(query, s, t, r, q):
    assert_same(DDL, query, {"S": s, "T": t, "R": r, "Q": q}, chunks=(1, 7, None))
