"""Distinct, set operations (union/except/intersect: bag, ALL or DISTINCT) and Istream/Dstream/Rstream:
engine vs the reference evaluator (differential), fed 1, 7 and all events per push, plus id
invariants of the engine's output deltas and hand-written edge cases.
"""

from __future__ import annotations

from collections import Counter

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cqlstream.cql.types import FLOAT, INT, VARCHAR
from cqlstream.engine.batch import from_rows
from cqlstream.engine.dsms import Dsms
from cqlstream.engine.operators.base import IdSource
from cqlstream.engine.operators.valuecount import ValueTable, row_codes
from tests import strategies
from tests.engine_harness import assert_same, engine_raw, run_reference

DDL = (
    "register stream S (a int, b int); register stream T (a int, c int); "
    "register relation R (a int, b int); register relation Q (a int, b int);"
)

WINDOWS = [
    "[Range 2]",
    "[Now]",
    "[Range Unbounded]",
    "[Rows 2]",
    "[Rows 5]",
    "[Rows 3 Slide 2]",
    "[Range 3 Slide 2]",
    "[Partition By a Rows 1]",
    "[Range 1]",
]

small = st.one_of(st.integers(0, 2), st.just(None))
SETTINGS = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])


def stream_events(width=2, n=10):
    return strategies.stream_events(n=n, width=width)


def relation_events(n=9):
    return strategies.relation_events(n=n, second=st.integers(0, 2))


@st.composite
def source(draw, stream="S", rel="R"):
    """A relation-valued FROM item: a windowed stream or a relation."""
    if draw(st.integers(0, 3)) == 0:
        return rel
    return f"{stream} {draw(st.sampled_from(WINDOWS))}"


# ------------------------------------------------------------------ running and id invariants


def check_ids(batches, is_stream: bool):
    """Output is ts-sorted per poll and overall; a stream has only `+` with distinct ids; in a
    relation a `−` carries the id of a live `+` of the same value and a `+` id is not live.
    (Within an instant, order is open: a delete may precede the insert it retracts there.)"""
    events = [ev for b in batches for ev in zip(b.ts.tolist(), b.sign.tolist(), b.id.tolist(), b.rows())]
    ts = [e[0] for e in events]
    assert ts == sorted(ts), "output not sorted by ts"
    if is_stream:
        assert all(e[1] == 1 for e in events)
        assert len({e[2] for e in events}) == len(events), "stream element ids repeat"
        return
    live: dict[int, tuple] = {}
    for t, s, i, row in sorted(events, key=lambda e: (e[0], -e[1])):  # inserts of an instant first
        if s > 0:
            assert i not in live, f"insert of a live id at {t}"
            live[i] = row
        else:
            assert live.get(i) == row, f"delete of {row} at {t} with an id that is not a live {row}"
            del live[i]


def check(query, inputs, ddl=DDL, compat=False):
    assert_same(ddl, query, inputs, compat=compat)
    for chunk in (1, None):
        batches, h, _ = engine_raw(ddl, query, inputs, chunk, compat)
        check_ids(batches, h.compiled.plan.is_stream)


# ------------------------------------------------------------------ property tests


@settings(max_examples=120, **SETTINGS)
@given(
    src=source(),
    cols=st.sampled_from(["a", "b", "a, b", "*", "b, a, a"]),
    s=stream_events(),
    r=relation_events(),
    compat=st.booleans(),
)
def test_distinct(src, cols, s, r, compat):
    check(f"select distinct {cols} from {src}", {"S": s, "R": r}, compat=compat)


# plain and ALL are the bag operators, DISTINCT SQL's set versions
SETOPS = [f"{op}{q}" for op in ("union", "except", "intersect") for q in ("", " all", " distinct")]


@settings(max_examples=150, **SETTINGS)
@given(
    left=source("S", "R"),
    right=source("T", "Q"),
    op=st.sampled_from(SETOPS),
    star=st.booleans(),
    s=stream_events(),
    t=stream_events(),
    r=relation_events(),
    q=relation_events(),
    compat=st.booleans(),
)
def test_set_operations(left, right, op, star, s, t, r, q, compat):
    cols = "*" if star else "a"
    query = f"select {cols} from {left} {op} select {cols} from {right}"
    check(query, {"S": s, "T": t, "R": r, "Q": q}, compat=compat)


@settings(max_examples=150, **SETTINGS)
@given(
    op=st.sampled_from(["Istream", "Dstream", "Rstream"]),
    src=source(),
    inner=st.sampled_from(
        [
            "select * from {src}",
            "select a from {src}",
            "select distinct b from {src}",
            "select a from {src} union all select a from Q",
            "select a from {src} except all select a from T [Rows 2]",
            "select b, a from {src} where a is not null",
        ]
    ),
    s=stream_events(),
    t=stream_events(),
    r=relation_events(),
    q=relation_events(),
    compat=st.booleans(),
)
def test_relation_to_stream(op, src, inner, s, t, r, q, compat):
    check(f"{op}({inner.format(src=src)})", {"S": s, "T": t, "R": r, "Q": q}, compat=compat)


@settings(max_examples=60, **SETTINGS)
@given(
    op=st.sampled_from(["Istream", "Dstream", "Rstream"]),
    w=st.sampled_from(["[Rows 2]", "[Range 1]", "[Now]"]),
    w2=st.sampled_from(["[Rows 2]", "[Range 2]", "[Range Unbounded]"]),
    s=stream_events(),
    compat=st.booleans(),
)
def test_views_over_views(op, w, w2, s, compat):
    ddl = DDL + (
        f"register view V1 as {op}(select a, b from S {w}); register view V2 as select distinct a from V1 {w2}; "
    )
    check("select a from V2 except select b from S [Range 1]", {"S": s}, ddl=ddl, compat=compat)
    check(f"Istream(select * from V2 union all select a from V1 {w})", {"S": s}, ddl=ddl, compat=compat)


# ------------------------------------------------------------------ hand-written cases


def test_brief_queries():
    s = [(1, (1, 2)), (1, (1, 2)), (2, (3, None)), (4, (1, 2)), (4, (None, None)), (7, (2, 2)), (9, (1, 1))]
    t = [(0, (1, 5)), (3, (2, 5)), (3, (1, 5)), (8, (1, 1))]
    r = [(0, 1, (1, 2)), (2, 1, (3, 4)), (3, -1, (1, 2)), (3, 1, (1, 2)), (5, -1, (3, 4)), (6, 1, (None, 4))]
    inputs = {"S": s, "T": t, "R": r}
    for q in [
        "Istream(select * from S [Range 3])",
        "Dstream(select * from S [Rows 2])",
        "Rstream(select * from S [Range 2])",
        "select distinct a from S [Rows 5]",
        "select a from S [Rows 3] except all select a from T [Range 2]",
        "select * from R union select * from S [Now]",
        "select * from R union distinct select * from S [Now]",
    ]:
        for compat in (False, True):
            check(q, inputs, compat=compat)


def test_istream_delete_and_reinsert_at_one_instant_is_nothing():
    r = [(1, 1, (1, 2)), (3, -1, (1, 2)), (3, 1, (1, 2)), (3, 1, (5, 5)), (5, 0, None)]
    assert run_reference(DDL, "Istream(select * from R)", {"R": r}) == {
        1: Counter({(1, 2): 1}),
        3: Counter({(5, 5): 1}),
    }
    check("Istream(select * from R)", {"R": r})
    check("Dstream(select * from R)", {"R": r})
    # a value whose count goes 2 → 1 → 2 inside one instant: nothing either
    r2 = [(1, 1, (1, 2)), (1, 1, (1, 2)), (2, -1, (1, 2)), (2, 1, (1, 2)), (4, 0, None)]
    assert run_reference(DDL, "Istream(select * from R)", {"R": r2}) == {1: Counter({(1, 2): 2})}
    check("Istream(select * from R)", {"R": r2})


def test_bag_counts_istream_dstream():
    # R(1) = {x, x}, R(2) = {x, x, x}: Istream gives one x at 2; R(4) = {x}: Dstream two x.
    r = [(1, 1, (1, 1)), (1, 1, (1, 1)), (2, 1, (1, 1)), (4, -1, (1, 1)), (4, -1, (1, 1)), (6, 0, None)]
    assert run_reference(DDL, "Istream(select * from R)", {"R": r}) == {
        1: Counter({(1, 1): 2}),
        2: Counter({(1, 1): 1}),
    }
    assert run_reference(DDL, "Dstream(select * from R)", {"R": r}) == {4: Counter({(1, 1): 2})}
    check("Istream(select * from R)", {"R": r})
    check("Dstream(select * from R)", {"R": r})


def test_rstream_over_gaps():
    s = [(2, (1, 1)), (2, (1, 1)), (3, (2, None)), (20, (3, 3)), (40, (4, 4))]
    r = [(0, 1, (7, 7)), (10, 1, (8, 8)), (15, -1, (7, 7)), (30, 0, None)]
    for q in [
        "Rstream(select * from S [Range 5])",
        "Rstream(select * from R)",
        "Rstream(select a from S [Rows 2])",
        "Rstream(select * from S [Range 3] union all select * from R)",
    ]:
        for compat in (False, True):
            check(q, {"S": s, "R": r}, compat=compat)
    got = run_reference(DDL, "Rstream(select * from R)", {"R": r})
    assert got[14] == Counter({(7, 7): 1, (8, 8): 1}) and got[30] == Counter({(8, 8): 1})


def test_compat_no_output_at_last_instant():
    s = [(1, (1, 1)), (2, (2, 2)), (3, (3, 3))]
    for op in ("Istream", "Rstream"):
        batches, _, _ = engine_raw(DDL, f"{op}(select * from S [Rows 2])", {"S": s}, None, compat=True)
        ts = {t for b in batches for t in b.ts.tolist()}
        assert 3 not in ts and 2 in ts
        batches, _, _ = engine_raw(DDL, f"{op}(select * from S [Rows 2])", {"S": s}, None, compat=False)
        assert 3 in {t for b in batches for t in b.ts.tolist()}
    batches, _, _ = engine_raw(DDL, "Dstream(select * from S [Rows 1])", {"S": s}, 1, compat=True)
    assert {t for b in batches for t in b.ts.tolist()} == {2}
    # the last instant is L over all sources, even one this query does not read
    check("Istream(select * from S [Rows 2])", {"S": s, "T": [(5, (0, 0))]}, compat=True)


def test_strings_floats_and_nulls():
    ddl = "register stream S (a varchar(8), f float); register relation R (a varchar(8), f float);"
    s = [
        (1, ("x", 1.5)),
        (1, ("x", 1.5)),
        (1, (None, 1.5)),
        (2, ("y", None)),
        (2, (None, None)),
        (3, ("x", 1.5)),
        (3, ("", 0.0)),
        (4, ("xx", -0.0)),
        (6, None),
    ]
    r = [(0, 1, ("x", 1.5)), (2, 1, (None, None)), (3, -1, ("x", 1.5)), (5, 1, ("", 0.0))]
    for q in [
        "select distinct * from S [Rows 3]",
        "select * from S [Range 2] except select * from R",
        "select * from S [Range 2] except distinct select * from R",
        "select * from S [Range 2] intersect distinct select * from R",
        "select * from S [Range 2] intersect all select * from R",
        "Istream(select * from S [Rows 2])",
        "Rstream(select * from S [Range 1] union select * from R)",
        "Rstream(select * from S [Range 1] union distinct select * from R)",
        "Dstream(select distinct f from S [Rows 2])",
    ]:
        check(q, {"S": s, "R": r}, ddl=ddl)


def test_many_instants_in_one_batch_and_long_runs():
    rng = np.random.default_rng(1)
    n = 400
    ts = np.sort(rng.integers(0, 150, n))
    s = [(int(t), (int(rng.integers(0, 4)), int(rng.integers(0, 3)))) for t in ts]
    tt = [(int(t), (int(rng.integers(0, 4)), 0)) for t in np.sort(rng.integers(0, 150, 200))]
    for q in [
        "Istream(select a from S [Rows 7])",
        "Dstream(select a, b from S [Range 3])",
        "Rstream(select distinct a from S [Rows 4])",
        "select distinct b from S [Range 5]",
        "select a from S [Rows 9] except all select a from T [Rows 4]",
        "select a from S [Rows 9] intersect all select a from T [Range 6]",
        "select a from S [Range 4] union select a from T [Now]",
        "select a from S [Range 4] union distinct select a from T [Now]",
        "select a from S [Rows 9] except distinct select a from T [Rows 4]",
    ]:
        assert_same(DDL, q, {"S": s, "T": tt}, chunks=(13, None))


def test_istream_keeps_no_state():
    """Istream needs no per-value state: a value's count change at an instant is the net sign of
    its rows there (each call sees whole instants)."""
    d = Dsms()
    d.execute("register stream S (a int, b int);")
    h = d.register_query("Istream(select * from S [Rows 10])")
    sub = d.subscribe(h.id)
    n = 5000
    d.push("S", [(i, i % 7) for i in range(n)], ts=list(range(n)))
    d.end()
    out = sub.poll()
    assert len(out) == n
    op = next(o for o in d.plan.operators if o.kind == "istream")
    assert op.state_bytes() == 0


def test_value_table_codes_and_changes():
    types = [INT, FLOAT, VARCHAR]
    t = ValueTable(types, IdSource(), sides=1)
    rows = [
        (1, 1.0, "a"),
        (1, 1.0, "a"),
        (None, 1.0, "a"),
        (1, None, "a"),
        (1, 1.0, None),
        (None, None, None),
        (1, 1.0, "a"),
    ]
    b = from_rows(rows, types, ts=[1, 1, 1, 2, 2, 2, 3], sign=[1, 1, 1, 1, 1, 1, -1])
    enc = t.encode(b)
    codes = enc.slot
    assert len(set(codes.tolist())) == 5 and codes[0] == codes[1] == codes[6]
    ch = t.changes(enc, b.ts, b.sign.astype(np.int64)[None])
    by = {(int(s), int(ts)): (int(bf), int(af)) for s, ts, bf, af in zip(ch.slot, ch.ts, ch.before[0], ch.after[0])}
    assert by[(int(codes[0]), 1)] == (0, 2) and by[(int(codes[0]), 3)] == (2, 1)
    t.finish(enc)
    assert len(t) == 5
    again = t.encode(from_rows([(None, None, None), (1, 1.0, "a")], types, ts=[4, 4]))
    assert again.slot.tolist() == [codes[5], codes[0]]


@settings(max_examples=40, **SETTINGS)
@given(
    op=st.sampled_from(SETOPS), w1=st.sampled_from(["[Rows 2]", "[Range 1]"]), s=stream_events(), r=relation_events()
)
def test_set_operation_of_a_source_with_itself(op, w1, s, r):
    """Both sides read one queue (shared plan), so their input ids coincide."""
    check(f"select * from R {op} select * from R", {"R": r})
    check(f"select a from S {w1} {op} select a from S [Rows 3]", {"S": s})


def test_wide_integer_ranges_and_many_columns():
    """Column codes: huge integer ranges (np.unique path), key products beyond int64 (re-densify)."""
    ddl = "register stream S (a int, b int, c int, d int, e int); register relation R (a int, b int, c int, d int, e int);"
    rng = np.random.default_rng(3)
    big = [-(2**62), 2**62, 0, 2**41, None]
    s = [
        (
            int(t),
            tuple(big[int(rng.integers(0, 5))] if rng.random() < 0.5 else int(rng.integers(-2, 2)) for _ in range(5)),
        )
        for t in np.sort(rng.integers(0, 30, 120))
    ]
    r = [(0, 1, s[0][1]), (3, 1, s[1][1]), (6, -1, s[0][1]), (9, 1, s[2][1])]
    for q in [
        "select distinct * from S [Rows 6]",
        "Istream(select * from S [Range 2])",
        "select * from S [Rows 10] except all select * from R",
        "Rstream(select distinct a, e from S [Rows 3])",
    ]:
        check(q, {"S": s, "R": r}, ddl=ddl)
    codes, k = row_codes(
        [np.array([2**62, -(2**62), 2**62]), np.array([1, 2, 1]), np.array([2**61, 0, 2**61])],
        [None, np.array([False, True, False]), None],
    )
    assert k == 2 and codes[0] == codes[2] != codes[1]


def test_tie_order_over_windows_matches_reference():
    """A Rows window over an Istream/Dstream/Rstream output sees the order of the elements emitted
    at one instant: Istream emits the newest inserts of each value, Dstream the oldest deletes,
    Rstream R(t) in insertion order, each in arrival order (the reference's order over windows)."""
    x, y = (1, 1), (2, 2)
    cases = [
        ("Istream(select * from S [Now])", [(1, x), (2, x), (2, y), (2, x), (3, None)]),
        ("Dstream(select * from S [Now])", [(1, x), (1, y), (1, x), (2, x), (3, None)]),
        ("Rstream(select * from S [Range 1])", [(1, x), (1, y), (2, x), (2, None), (3, y), (4, None)]),
    ]
    for view, s in cases:
        ddl = DDL + f"register view V as {view};"
        for rows in (1, 2):
            check(f"select * from V [Rows {rows}]", {"S": s}, ddl=ddl)


def test_nan_is_one_value():
    t = ValueTable([FLOAT], IdSource())
    for k in range(3):
        b = from_rows([(float("nan"),), (1.0,), (float("nan"),)], [FLOAT], ts=[k] * 3)
        enc = t.encode(b)
        ch = t.changes(enc, b.ts, b.sign.astype(np.int64)[None])
        t.finish(enc)
        assert len(t) == 2 and sorted(ch.after[0].tolist()) == [k + 1, 2 * (k + 1)]
