"""AggregateOp (engine/operators/aggregate.py): engine vs the reference evaluator (differential),
fed 1, 7 and all events per push, over random streams (windowed) and relations with deletes;
hand-written edge cases (scalar aggregates over empty windows, compat mode, min/max when the
extreme leaves, DISTINCT, float exactness), user-defined aggregates, id invariants of the output
deltas, and unit tests of the vectorized helpers against brute force.
"""

from __future__ import annotations

import math
from collections import Counter
from contextlib import contextmanager

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cqlstream.cql.functions import BUILTIN_AGGREGATES, AggregateFunction
from cqlstream.cql.types import FLOAT, INT
from cqlstream.engine.aggregates.columns import as_dtype
from cqlstream.engine.aggregates.keys import IntInterner
from cqlstream.engine.aggregates.multiset import Multiset, cover
from cqlstream.engine.aggregates.registry import STRATEGIES
from cqlstream.engine.aggregates.strategy import AggregateStrategy
from cqlstream.engine.dsms import Dsms
from cqlstream.engine.kernels import stable_order
from cqlstream.engine.operators.aggregate import AggregateOp
from tests.engine_harness import _merge_events, assert_same, round_floats, run_engine, run_reference

DDL = (
    "register stream S (a int, b int, f float, s varchar(4)); "
    "register relation R (a int, b int, f float, s varchar(4));"
)

WINDOWS = [
    "[Range 2]",
    "[Now]",
    "[Range Unbounded]",
    "[Rows 2]",
    "[Rows 4]",
    "[Rows 3 Slide 2]",
    "[Range 3 Slide 2]",
    "[Partition By b Rows 1]",
    "[Range 1]",
    "[Range 5]",
]

SETTINGS = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])

ints = st.one_of(st.integers(-2, 3), st.just(None))
keys = st.one_of(st.integers(0, 2), st.just(None))
# floats chosen to stress exactness: non-dyadic decimals, and magnitudes that cancel (1e16 + 0.1)
floats = st.one_of(st.sampled_from([0.1, 0.2, -0.3, 1.5, 2.25, 1e16, -1e16, 3.0, 1e-3]), st.just(None))
strs = st.one_of(st.sampled_from(["x", "y", "zz", ""]), st.just(None))


def row():
    return st.tuples(ints, keys, floats, strs)


@st.composite
def stream_events(draw, n=14):
    """Many tuples per instant, gaps, heartbeats, duplicates and NULLs."""
    events, t = [], draw(st.integers(0, 2))
    for _ in range(draw(st.integers(0, n))):
        t += draw(st.sampled_from([0, 0, 0, 1, 1, 2, 5]))
        if draw(st.integers(0, 9)) == 0:
            events.append((t, None))
        else:
            events.append((t, draw(row())))
    return events


@st.composite
def relation_events(draw, n=14):
    """Bag updates with duplicates, NULLs, deletes, and deletes re-inserted at the same instant."""
    events, live, t = [], [], draw(st.integers(0, 2))
    for _ in range(draw(st.integers(0, n))):
        t += draw(st.sampled_from([0, 0, 1, 2, 3]))
        if live and draw(st.integers(0, 2)) < 2 and draw(st.booleans()):
            r = live.pop(draw(st.integers(0, len(live) - 1)))
            events.append((t, -1, r))
            if draw(st.integers(0, 3)) == 0:
                live.append(r)
                events.append((t, +1, r))
        else:
            r = draw(row())
            if live and draw(st.integers(0, 4)) == 0:
                r = live[draw(st.integers(0, len(live) - 1))]  # a duplicate
            live.append(r)
            events.append((t, +1, r))
    return events


AGGS = [
    "count(*)",
    "count(a)",
    "count(distinct a)",
    "sum(a)",
    "sum(distinct a)",
    "avg(a)",
    "avg(distinct a)",
    "min(a)",
    "max(a)",
    "sum(f)",
    "avg(f)",
    "min(f)",
    "max(f)",
    "sum(distinct f)",
    "count(distinct f)",
    "min(s)",
    "max(s)",
    "count(distinct s)",
    "count(s)",
    "sum(a * b)",
    "max(a + b)",
    "count(distinct b)",
    "avg(distinct f)",
    "min(distinct a)",
]
KEYS = [(), ("b",), ("s",), ("b", "s"), ("a % 2",), ("b", "a % 2"), ("f",), ("s", "b", "a")]
HAVING = [None, "count(*) > 1", "sum(a) > 1", "max(a) >= 2", "count(distinct s) >= 1"]


@st.composite
def query(draw, src):
    ks = draw(st.sampled_from(KEYS))
    aggs = draw(st.lists(st.sampled_from(AGGS), min_size=1, max_size=4, unique=True))
    having = draw(st.sampled_from(HAVING))
    sel = ", ".join(list(ks) + aggs)
    q = f"select {sel} from {src}"
    if ks:
        q += " group by " + ", ".join(ks)
    if having:
        q += " having " + having
    return q


def check(query_text, inputs, compat=False, chunks=(1, 7, None)):
    assert_same(DDL, query_text, inputs, compat=compat, chunks=chunks, float_digits=9)


# ------------------------------------------------------------------ differential, random


@settings(max_examples=150, **SETTINGS)
@given(st.data())
def test_random_windowed_streams(data):
    win = data.draw(st.sampled_from(WINDOWS))
    q = data.draw(query(f"S {win}"))
    check(q, {"S": data.draw(stream_events())}, compat=data.draw(st.integers(0, 4)) == 0)


@settings(max_examples=120, **SETTINGS)
@given(st.data())
def test_random_relations_with_deletes(data):
    q = data.draw(query("R"))
    check(q, {"R": data.draw(relation_events())}, compat=data.draw(st.integers(0, 4)) == 0)


@settings(max_examples=60, **SETTINGS)
@given(st.data())
def test_random_scalar_aggregates(data):
    """No GROUP BY: one row at every instant from t0 (none over an empty input in compat)."""
    aggs = data.draw(st.lists(st.sampled_from(AGGS), min_size=1, max_size=5, unique=True))
    src = data.draw(st.sampled_from([f"S {w}" for w in WINDOWS] + ["R"]))
    inputs = {"S": data.draw(stream_events())} if src.startswith("S") else {"R": data.draw(relation_events())}
    for compat in (False, True):
        check(f"select {', '.join(aggs)} from {src}", inputs, compat=compat, chunks=(1, None))


@settings(max_examples=40, **SETTINGS)
@given(st.data())
def test_wide_value_domains(data):
    """Groups holding many distinct values: min/max/DISTINCT read only part of a group's state."""
    n = data.draw(st.integers(10, 40))
    vals = data.draw(st.lists(st.integers(0, 60), min_size=n, max_size=n))
    gaps = data.draw(st.lists(st.sampled_from([0, 0, 1, 2]), min_size=n, max_size=n))
    ts = np.cumsum(gaps).tolist()
    s = [(t, (v, v % 2, v / 8, "s%02d" % v)) for t, v in zip(ts, vals)]
    win = data.draw(st.sampled_from(["[Range Unbounded]", "[Range 6]", "[Rows 12]", "[Rows 30]"]))
    q = f"select b, min(a), max(a), count(distinct a), max(s), min(f), sum(distinct a) from S {win} group by b"
    check(q, {"S": s}, chunks=(1, 5, None))
    check(f"select min(a), max(s), count(distinct f) from S {win}", {"S": s}, chunks=(3, None))


# ------------------------------------------------------------------ hand-written edge cases


def test_scalar_over_empty_window_is_count_zero_row():
    inputs = {"S": [(1, (1, 0, 1.0, "x")), (2, (2, 0, 2.0, "y")), (6, None)]}
    q = "select count(*), sum(a), avg(f), min(s), count(distinct a) from S [Range 1]"
    exp = run_reference(DDL, q, inputs)
    got, _ = run_engine(DDL, q, inputs)
    assert got == exp
    # t=3: the first tuple has left; t=4: the window is empty again: count 0, others NULL
    assert got[3] == Counter({(2, 3, 1.5, "x", 2): -1, (1, 2, 2.0, "y", 1): 1})
    assert got[4] == Counter({(1, 2, 2.0, "y", 1): -1, (0, None, None, None, 0): 1})
    check(q, inputs)


def test_scalar_row_exists_from_t0_even_with_no_data():
    inputs = {"S": [(3, None), (5, None)]}
    q = "select count(*), max(a) from S [Range 2]"
    got, _ = run_engine(DDL, q, inputs)
    assert got == {3: Counter({(0, None): 1})}
    check(q, inputs)
    got, _ = run_engine(DDL, q, inputs, compat=True)
    assert got == {}
    check(q, inputs, compat=True)


def test_scalar_row_needs_a_started_source():
    """Only a relation the query does not read has data: the query has no instants, no row."""
    inputs = {"S": [], "R": [(0, 1, (0, 0, None, None)), (3, 1, (1, 1, None, None))]}
    for q in ["select count(*), sum(b), max(a) from S", "select count(*) from S [Range 2]"]:
        got, _ = run_engine(DDL, q, inputs)
        assert got == {}
        check(q, inputs)
    got, _ = run_engine(DDL, "select count(*) from S [Range 2]", {"S": [(2, None)], "R": inputs["R"]})
    assert got == {2: Counter({(0,): 1})}  # a heartbeat starts S's time


def test_scalar_compat_has_no_row_over_empty_window():
    inputs = {"S": [(1, (1, 0, 1.0, "x")), (5, None)]}
    q = "select count(*), sum(a) from S [Range 1]"
    got, _ = run_engine(DDL, q, inputs, compat=True)
    assert got == {1: Counter({(1, 1): 1}), 2: Counter({(1, 1): -1})}  # compat: leaves at τ+N
    check(q, inputs, compat=True)


def test_scalar_row_emitted_when_bound_reaches_t0_only():
    d = Dsms()
    d.execute(DDL)
    h = d.register_query("select count(*) from S [Range 1]")
    sub = d.subscribe(h.id)
    d.push("S", [(1, 1, 1.0, "x")], ts=[5])  # complete through 4 < t0 = 5: nothing yet
    d.run()
    assert len(sub.poll()) == 0
    d.heartbeat("S", 6)  # complete through 5
    d.run()
    out = sub.poll()
    assert out.rows() == [(1,)] and out.ts.tolist() == [5] and out.sign.tolist() == [1]


def test_min_max_when_extreme_leaves_range_and_rows():
    s = [
        (1, (5, 0, 5.0, "m")),
        (2, (1, 0, 1.0, "a")),
        (3, (3, 0, 3.0, "c")),
        (4, (2, 0, 2.0, "b")),
        (5, (9, 0, 9.0, "z")),
        (6, (4, 0, 4.0, "d")),
        (12, None),
    ]
    for win in ["[Range 1]", "[Range 2]", "[Rows 2]", "[Rows 3]", "[Partition By b Rows 2]"]:
        for q in [
            f"select min(a), max(a), min(f), max(f), min(s), max(s) from S {win}",
            f"select b, min(a), max(s) from S {win} group by b",
        ]:
            check(q, {"S": s})
            check(q, {"S": s}, compat=True)


def test_min_max_relation_with_deletes_of_duplicated_extreme():
    r = [
        (1, 1, (5, 0, None, "x")),
        (1, 1, (5, 0, None, "x")),
        (1, 1, (3, 0, None, "y")),
        (2, -1, (5, 0, None, "x")),  # one copy of the max leaves: max stays 5
        (3, -1, (5, 0, None, "x")),  # the other: max falls to 3
        (4, -1, (3, 0, None, "y")),
        (4, 1, (3, 0, None, "y")),  # delete + re-insert: no change
        (5, -1, (3, 0, None, "y")),  # the group is empty
        (6, 1, (None, 0, None, None)),
    ]  # a group of NULLs only: min/max NULL, count(a) 0
    for q in [
        "select b, max(a), min(a), count(a), count(*), max(s) from R group by b",
        "select max(a), min(s), count(distinct a) from R",
    ]:
        got, _ = run_engine(DDL, q, {"R": r})
        check(q, {"R": r})
        assert 4 not in got  # delete + re-insert at one instant changes nothing
    got, _ = run_engine(DDL, "select b, max(a) from R group by b", {"R": r})
    assert got == {
        1: Counter({(0, 5): 1}),
        3: Counter({(0, 5): -1, (0, 3): 1}),
        5: Counter({(0, 3): -1}),
        6: Counter({(0, None): 1}),
    }


def test_count_distinct_with_duplicates_and_deletes():
    r = [
        (1, 1, (1, 0, 0.5, "x")),
        (1, 1, (1, 0, 0.5, "x")),
        (1, 1, (2, 0, None, "y")),
        (2, -1, (1, 0, 0.5, "x")),
        (3, -1, (1, 0, 0.5, "x")),
        (3, 1, (None, 0, 0.5, None)),
        (4, 1, (2, 1, 0.5, "y")),
    ]
    q = (
        "select b, count(distinct a), sum(distinct a), avg(distinct a), count(distinct f), "
        "count(distinct s), count(a) from R group by b"
    )
    check(q, {"R": r})
    got, _ = run_engine(DDL, "select b, count(distinct a) from R group by b", {"R": r})
    assert got == {1: Counter({(0, 2): 1}), 3: Counter({(0, 2): -1, (0, 1): 1}), 4: Counter({(1, 1): 1})}


def test_unchanged_value_emits_nothing():
    # count stays 2 while the tuples in the Rows window change: no output at those instants
    s = [(1, (1, 0, None, None)), (1, (2, 0, None, None)), (2, (3, 0, None, None)), (3, (4, 0, None, None))]
    got, _ = run_engine(DDL, "select count(*) from S [Rows 2]", {"S": s})
    assert got == {1: Counter({(2,): 1})}
    got, _ = run_engine(DDL, "select b, sum(a) from S [Rows 2] group by b", {"S": s})
    assert set(got) == {1, 2, 3}


def test_unchanged_rows_are_not_reemitted():
    """Not only the net: the raw output has no −/+ pair for a row that did not change."""
    s = [
        (1, (1, 0, None, None)),
        (1, (2, 0, None, None)),
        (2, (3, 0, None, None)),
        (3, (4, 0, None, None)),
        (3, (9, 1, None, None)),
        (4, (5, 0, None, None)),
        (6, None),
    ]
    for chunk in (1, None):
        d = Dsms()
        d.execute(DDL)
        h = d.register_query("select b, count(*) from S [Rows 2] group by b")
        sub = d.subscribe(h.id)
        step = chunk or len(s)
        for lo in range(0, len(s), step):
            part = [e for e in s[lo : lo + step] if e[1] is not None]
            if part:
                d.push("S", [e[1] for e in part], ts=[e[0] for e in part])
            d.run()
        d.end()
        out = sub.poll()
        raw = sorted(zip(out.ts.tolist(), out.sign.tolist(), out.rows()))
        # t=1: +(0,2); t=2: the window's tuples change, group 0's count does not: nothing;
        # t=3: group 1 is born with count 1, group 0 drops to 1; t=4: (9,1),(5,0): unchanged
        assert raw == [(1, 1, (0, 2)), (3, -1, (0, 2)), (3, 1, (0, 1)), (3, 1, (1, 1))]


def test_group_compaction(monkeypatch):
    """Many short-lived groups: group ids are renumbered (state follows the live groups)."""
    monkeypatch.setattr(AggregateOp, "COMPACT_MIN", 8)
    s = [(t, (t % 7, t, float(t % 5), "k" + str(t % 3))) for t in range(1, 60)]
    s += [(t, (t % 7, 2 * t, 0.5, None)) for t in range(20, 40)] + [(70, None)]
    s.sort(key=lambda e: e[0])
    for q in [
        "select b, count(*), sum(a), min(s), count(distinct a) from S [Range 2] group by b",
        "select b, s, max(f), avg(a) from S [Rows 3] group by b, s",
        "select b, cnt(a), spread(a) from S [Now] group by b",
    ]:
        if "cnt(" in q:
            assert_udaf(q, q.replace("cnt(a)", "count(a)").replace("spread(a)", "max(a) - min(a)"), {"S": s})
        else:
            check(q, {"S": s})
    d = Dsms()
    d.execute(DDL)
    d.register_query("select b, count(*) from S [Now] group by b")
    d.push("S", [(0, t, 0.0, "x") for t in range(100)], ts=list(range(100)))
    d.end()
    op = next(o for o in d.plan.operators if isinstance(o, AggregateOp))
    assert op.gkeys.n < 50  # compacted: not one id per key ever seen


def test_many_tuples_per_instant_and_null_keys():
    s = [(1, (i % 4, None if i % 3 == 0 else i % 2, float(i) / 8, "x" if i % 2 else None)) for i in range(30)]
    s += [(2, (i, i % 2, 0.25, "y")) for i in range(10)] + [(9, None)]
    for q in [
        "select b, count(*), sum(a), avg(f), max(s) from S [Rows 7] group by b",
        "select b, s, count(*), min(a) from S [Range 1] group by b, s",
        "select a % 2, count(distinct b) from S [Rows 25] group by a % 2",
    ]:
        check(q, {"S": s})


def test_float_sums_do_not_drift_or_lose_small_values():
    # 1e16 entering and leaving must not swallow 0.1; the reference sums exactly (math.fsum)
    vals = [1e16, 0.1, -1e16, 0.2, 1e16, 0.3, 1e-3, -1e16] * 4
    s = [(t + 1, (0, 0, v, None)) for t, v in enumerate(vals)] + [(len(vals) + 5, None)]
    for win in ["[Rows 2]", "[Rows 3]", "[Range 2]", "[Range Unbounded]"]:
        check(f"select sum(f), avg(f), sum(distinct f) from S {win}", {"S": s})


def test_float_sum_exact_over_long_stream():
    rng = np.random.default_rng(3)
    n = 20000
    v = np.round(rng.normal(0, 1, n) * 10.0 ** rng.integers(-3, 9, n), 3)
    d = Dsms()
    d.execute(DDL)
    h = d.register_query("select sum(f) from S [Rows 50]")
    sub = d.subscribe(h.id)
    ts = np.arange(n) // 3
    for lo in range(0, n, 4096):
        d.push("S", [(0, 0, float(x), "x") for x in v[lo : lo + 4096]], ts=ts[lo : lo + 4096])
        d.run()
    d.end()
    out = sub.poll()
    last = {}
    for (val,), t, sg in zip(out.rows(), out.ts.tolist(), out.sign.tolist()):
        if sg > 0:
            last[t] = val
    lt = max(last)
    k = int(np.searchsorted(ts, lt, side="right"))
    exact = math.fsum(v[max(0, k - 50) : k].tolist())
    assert abs(last[lt] - exact) <= 1e-9 * max(1.0, abs(exact))


def test_integer_sums_are_exact_int64():
    big = 2**53 + 1
    s = [(1, (big, 0, None, None)), (1, (1, 0, None, None)), (2, (-big, 0, None, None)), (4, None)]
    got, _ = run_engine(DDL, "select sum(a), count(a) from S [Range Unbounded]", {"S": s})
    assert got[1] == Counter({(big + 1, 2): 1})  # the t0 row is born with the data
    assert got[2] == Counter({(big + 1, 2): -1, (1, 3): 1})


def test_expression_keys_and_having():
    s = [(t, (t % 5 - 2, t % 3, t / 4, "abc"[t % 3])) for t in range(1, 25)] + [(30, None)]
    for q in [
        "select a % 2, b * 2, count(*), sum(f) from S [Range 4] group by a % 2, b * 2 having count(*) > 1",
        "select s || 'q', max(a) from S [Rows 5] group by s || 'q' having max(a) > 0",
        "select b, count(*) from S [Range 3] group by b having sum(a) > 0",
    ]:
        check(q, {"S": s})


def test_null_typed_argument_and_key():
    s = [(1, (1, 0, None, None)), (2, (2, 1, None, None)), (4, None)]
    check("select b, sum(null), count(null), max(null) from S [Range 1] group by b", {"S": s})
    check("select null, count(*) from S [Range 1] group by null", {"S": s})


# ------------------------------------------------------------------ user-defined aggregates


class MySum:
    def init(self):
        return [0, 0]

    def add(self, st, v):
        return [st[0] + v, st[1] + 1]

    def remove(self, st, v):
        return [st[0] - v, st[1] - 1]

    def result(self, st):
        return st[0] if st[1] else None


class Spread:
    """max − min over a multiset (mutated in place)."""

    def init(self):
        return Counter()

    def add(self, st, v):
        st[v] += 1
        return st

    def remove(self, st, v):
        st[v] -= 1
        if not st[v]:
            del st[v]
        return st

    def result(self, st):
        return max(st) - min(st) if st else None


class ExactFSum(Spread):
    """Float sum of a multiset, exactly rounded (math.fsum), as the reference's sum."""

    def result(self, st):
        return math.fsum(v * k for v, k in st.items()) if st else None


class Cnt:
    def init(self):
        return 0

    def add(self, st, v):
        return st + 1

    def remove(self, st, v):
        return st - 1

    def result(self, st):
        return st


def _udafs(reg):
    reg.register_aggregate("mysum", MySum(), INT)
    reg.register_aggregate("spread", Spread(), INT)
    reg.register_aggregate("cnt", Cnt(), INT)
    reg.register_aggregate("fsum", ExactFSum(), FLOAT)


def assert_udaf(engine_query, reference_query, inputs, compat=False):
    expected = round_floats(run_reference(DDL, reference_query, inputs, compat=compat))
    for chunk in (1, 7, None):
        got, _ = run_engine(DDL, engine_query, inputs, chunk=chunk, compat=compat, functions_setup=_udafs)
        assert round_floats(got) == expected, (chunk, got, expected)


@settings(max_examples=40, **SETTINGS)
@given(st.data())
def test_udaf_matches_builtin_equivalents(data):
    src = data.draw(st.sampled_from([f"S {w}" for w in WINDOWS[:6]] + ["R"]))
    inputs = {"S": data.draw(stream_events())} if src.startswith("S") else {"R": data.draw(relation_events())}
    ks = data.draw(st.sampled_from([(), ("b",), ("s",)]))
    pre = "".join(k + ", " for k in ks)
    grp = (" group by " + ", ".join(ks)) if ks else ""
    mine = f"select {pre}mysum(a), spread(a), cnt(distinct s), fsum(f) from {src}{grp}"
    ref = f"select {pre}sum(a), max(a) - min(a), count(distinct s), sum(f) from {src}{grp}"
    compat = data.draw(st.booleans())
    assert_udaf(mine, ref, inputs, compat=compat)


def test_udaf_scalar_over_empty_input():
    inputs = {"S": [(1, None), (3, None)]}
    got, _ = run_engine(DDL, "select mysum(a), cnt(a) from S [Range 1]", inputs, functions_setup=_udafs)
    assert got == {1: Counter({(None, 0): 1})}


# ------------------------------------------------------------------ output delta invariants


@settings(max_examples=40, **SETTINGS)
@given(st.data())
def test_deletes_retract_the_ids_of_their_inserts(data):
    win = data.draw(st.sampled_from(WINDOWS))
    q = data.draw(query(f"S {win}")).split(" having ")[0]
    d = Dsms()
    d.execute(DDL)
    h = d.register_query(q)
    sub = d.subscribe(h.id)
    events = _merge_events({"S": data.draw(stream_events())})
    for name, ev in events:
        if ev[1] is None:
            d.heartbeat(name, ev[0])
        else:
            d.push(name, [ev[1]], ts=[ev[0]])
        d.run()
    d.end()
    out = sub.poll()
    assert np.all(out.ts[1:] >= out.ts[:-1])
    live = {}
    groups = Counter()
    nkeys = q.count(" group by ") and len(q.split(" group by ")[1].split(", "))
    for r, i, s in zip(out.rows(), out.id.tolist(), out.sign.tolist()):
        if s > 0:
            assert i not in live
            live[i] = r
        else:
            assert live.pop(i) == r
    for r in live.values():
        groups[r[:nkeys]] += 1
    assert all(c == 1 for c in groups.values())  # one row per group


# ------------------------------------------------------------------ helpers vs brute force


@settings(max_examples=150, **SETTINGS)
@given(st.integers(1, 40), st.lists(st.tuples(st.integers(0, 40), st.integers(0, 40), st.integers(0, 99)), max_size=30))
def test_cover_is_min_and_max_over_covering_intervals(ncells, ivs):
    starts = np.array([min(a, b) % ncells for a, b, _ in ivs], np.int64)
    ends = np.array([min(max(a, b), ncells) for a, b, _ in ivs], np.int64)
    vals = np.array([v for _, _, v in ivs], np.int64)
    lo = cover(ncells, starts, ends, vals, 10**9, np.minimum)
    hi = cover(ncells, starts, ends, vals, -1, np.maximum)
    for c in range(ncells):
        cov = [v for s, e, v in zip(starts.tolist(), ends.tolist(), vals.tolist()) if s <= c < e]
        assert lo[c] == (min(cov) if cov else 10**9)
        assert hi[c] == (max(cov) if cov else -1)


@settings(max_examples=100, **SETTINGS)
@given(st.lists(st.lists(st.integers(-(2**62), 2**62) | st.integers(-50, 50), max_size=20), max_size=6))
def test_int_interner_is_a_consistent_dense_map(batches):
    it = IntInterner()
    seen = {}
    for b in batches:
        ids = it.map(np.array(b, np.int64)).tolist()
        for k, i in zip(b, ids):
            assert seen.setdefault(k, i) == i
    assert sorted(seen.values()) == list(range(len(seen)))


@given(st.lists(st.integers(0, 70000), max_size=50))
def test_stable_order(keys):
    k = np.array(keys, np.int64)
    for nk in (max(keys, default=0) + 1, 1 << 40):
        o = stable_order(k, 0, nk - 1)
        assert o.tolist() == sorted(range(len(keys)), key=lambda i: (keys[i], i))


def test_operator_is_constructed_by_the_planner():
    d = Dsms()
    d.execute(DDL)
    d.register_query("select b, count(*) from S [Rows 3] group by b")
    assert any(isinstance(op, AggregateOp) for op in d.plan.operators)


@st.composite
def multiset_batches(draw):
    """Batches of (gid, value, ts, sign) events, ts-sorted, keeping every live count ≥ 0 at the
    end of each instant (within an instant a delete may come before its insert)."""
    kind = draw(st.sampled_from(["int", "float", "str"]))
    vals = {
        "int": st.integers(-40, 40),
        "float": st.sampled_from([-2.5, -0.0, 0.0, 0.1, 1.0, 7.25, 1e9]),
        "str": st.sampled_from(["", "a", "ab", "b", "zz", "é"]),
    }[kind]
    live, t, batches = Counter(), 0, []
    for _ in range(draw(st.integers(1, 4))):
        t += 1  # every call brings later instants
        evs = []
        for _ in range(draw(st.integers(0, 25))):
            t += draw(st.sampled_from([0, 0, 1, 3]))
            inst = []
            if live and draw(st.booleans()):
                (g, v) = draw(st.sampled_from(sorted(live, key=repr)))
                live[(g, v)] -= 1
                live += Counter()
                inst.append((g, v, t, -1))
            else:
                g, v = draw(st.integers(0, 3)), draw(vals)
                live[(g, v)] += 1
                inst.append((g, v, t, 1))
                if draw(st.integers(0, 3)) == 0:  # a transient −1 first (as a window may emit): net +1
                    inst = [(g, v, t, -1), (g, v, t, 1), (g, v, t, 1)]
            evs += inst
        extra = draw(st.lists(st.tuples(st.integers(0, 4), st.integers(0, 3)), max_size=3))  # cells w/o events
        batches.append((kind, evs, [(g, t + dt) for g, dt in extra]))
    return batches


@settings(max_examples=200, **SETTINGS)
@given(multiset_batches())
def test_multiset_transitions_and_extremes_match_a_model(batches):
    dt = {"int": np.int64, "float": np.float64, "str": object}[batches[0][0]]
    ms = Multiset(dt)
    model = Counter()
    for _, evs, extra in batches:
        cells = sorted({(g, t) for g, _, t, _ in evs} | set(extra))
        cell_ix = {c: i for i, c in enumerate(cells)}
        g_e = np.array([e[0] for e in evs], np.int64)
        v_e = np.array([e[1] for e in evs], dtype=dt) if evs else np.zeros(0, dt)
        s_e = np.array([e[3] for e in evs], np.int64)
        cell_e = np.array([cell_ix[(e[0], e[2])] for e in evs], np.int64)
        cell_g = np.array([c[0] for c in cells], np.int64)
        trans, ext = ms.update(g_e, v_e, s_e, cell_e, cell_g, ["min", "max"])
        want_trans = []
        for g, v, _t, sg in evs:  # events are in ts order; the model applies them one by one
            before = model[(g, v)]
            model[(g, v)] += sg
            want_trans.append(1 if before == 0 and sg > 0 else -1 if model[(g, v)] == 0 and sg < 0 else 0)
        assert trans.tolist() == want_trans
        # extremes at each cell: the model replayed up to the end of that cell's instant
        replay = Counter({k: c for k, c in model.items()})
        for g, v, _t, sg in reversed(evs):
            replay[(g, v)] -= sg
        for i, (g, t) in enumerate(cells):
            now = Counter(replay)
            for gg, v, tt, sg in evs:
                if tt <= t:
                    now[(gg, v)] += sg
            present = [v for (gg, v), c in now.items() if gg == g and c > 0]
            for kind, fn in (("min", min), ("max", max)):
                vals, valid = ext[kind]
                if present:
                    assert valid[i] and vals[i] == fn(present), (kind, g, t, present, vals[i])
                else:
                    assert not valid[i]
        # the state holds exactly the live pairs, sorted by (gid, value)
        live = sorted((k for k, c in model.items() if c > 0), key=lambda k: (k[0], k[1]))
        got = list(zip(ms.g.tolist(), ms.v.tolist()))
        assert got == live
        assert ms.c.tolist() == [model[k] for k in live]


# ------------------------------------------------------------------ adding an aggregate


class Extent(AggregateStrategy):
    """A toy built-in aggregate, added the way docs/architecture.md describes: extent(x) =
    max(x) − min(x) over the group's live values (NULL when it has none), read off the argument's
    multiset, so it stays exact when the extremes leave the window."""

    extremes = ("min", "max")

    def values(self, cx):
        lo, valid = cx.extremes[(self.ai, "min")]
        hi, _ = cx.extremes[(self.ai, "max")]
        return as_dtype(np.where(valid, hi - lo, 0), self.dt), ~valid


@contextmanager
def extent_registered():
    """The two registrations of a new aggregate: its strategy (engine/aggregates/registry.py)
    and its catalog entry with the result type (cql/functions.py)."""
    entry = AggregateFunction("extent", lambda a: a[0] if a[0].kind in ("int", "float") else "expects a number")
    STRATEGIES["extent"] = Extent
    BUILTIN_AGGREGATES["extent"] = entry
    try:
        yield
    finally:
        del STRATEGIES["extent"], BUILTIN_AGGREGATES["extent"]


@settings(max_examples=40, **SETTINGS)
@given(st.data())
def test_a_new_aggregate_through_the_registry(data):
    src = data.draw(st.sampled_from([f"S {w}" for w in WINDOWS] + ["R"]))
    inputs = {"S": data.draw(stream_events())} if src.startswith("S") else {"R": data.draw(relation_events())}
    ks = data.draw(st.sampled_from([(), ("b",), ("s",), ("b", "s")]))
    pre = "".join(k + ", " for k in ks)
    grp = (" group by " + ", ".join(ks)) if ks else ""
    mine = f"select {pre}extent(a), extent(f), count(*) from {src}{grp}"
    model = f"select {pre}max(a) - min(a), max(f) - min(f), count(*) from {src}{grp}"
    expected = round_floats(run_reference(DDL, model, inputs))
    with extent_registered():
        for chunk in (1, 5, None):
            got, _ = run_engine(DDL, mine, inputs, chunk=chunk)
            assert round_floats(got) == expected, (chunk, got, expected)


def test_a_new_aggregate_over_deletions_of_its_extremes():
    inputs = {
        "R": [
            (1, +1, (5, 1, 0.5, "x")),
            (1, +1, (2, 1, 1.0, "x")),
            (2, +1, (9, 1, 4.0, "y")),
            (3, -1, (9, 1, 4.0, "y")),
            (4, -1, (2, 1, 1.0, "x")),
        ]
    }
    with extent_registered():
        got, _ = run_engine(DDL, "select b, extent(a), extent(f) from R group by b", inputs)
    old, mid, last = (1, 3, 0.5), (1, 7, 3.5), (1, 0, 0.0)  # deltas per instant: the max, then the min leaves
    assert got == {
        1: Counter({old: 1}),
        2: Counter({mid: 1, old: -1}),
        3: Counter({old: 1, mid: -1}),
        4: Counter({last: 1, old: -1}),
    }
    assert "extent" not in STRATEGIES  # registrations undone


def test_current_rows_are_the_live_output_rows():
    """AggregateOp.current_rows: every group's current row, with the id it was inserted with."""
    d = Dsms()
    d.execute(DDL)
    h = d.register_query("select b, count(*), max(s), sum(f) from S [Range 2] group by b")
    sub = d.subscribe(h.id)
    rows = [(1, 0, 0.5, "x"), (2, 1, None, "y"), (3, 0, 1.5, None), (4, None, 2.0, "zz"), (5, 1, 0.25, "")]
    for t, r in enumerate(rows, start=1):
        d.push("S", [r], ts=[t])
        d.run()
    d.heartbeat("S", 6)
    d.run()
    live = {}
    out = sub.poll()
    for r, i, s in zip(out.rows(), out.id.tolist(), out.sign.tolist()):
        if s > 0:
            live[i] = r
        else:
            del live[i]
    (op,) = [o for o in d.plan.operators if isinstance(o, AggregateOp)]
    cur = op.current_rows(6)
    assert cur.ts.tolist() == [6] * len(live) and cur.sign.tolist() == [1] * len(live)
    assert dict(zip(cur.id.tolist(), cur.rows())) == live
    assert {r[0] for r in live.values()} == {0, None, 1}  # the window holds the rows of t 3, 4, 5
