"""k-Mon's column elimination (seed 000 §3.3.2; engine/kconstraints/columns.py): the private join
state keeps only the columns the join and the plan above read. Results never change (elimination
on and off both equal the reference, at several batch sizes, while constraints break and spilled
rows come back), the state's bytes shrink by the columns dropped, and a query reading more than
a running join stores gets a join of its own."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bench import kmon as B
from cqlstream.engine.dsms import Dsms
from cqlstream.engine.errors import KnobError
from cqlstream.engine.kconstraints.strategy import KMonConfig
from cqlstream.engine.operators.join import JoinOp
from cqlstream.server import checkpoint
from tests.engine_harness import _merge_events, assert_same, feed
from tests.strategies import relation_events, stream_events


@contextmanager
def elimination(on: bool, retraction: str = "disk") -> Iterator[None]:
    """New engines' k-Mon joins eliminate unread columns (or keep whole rows)."""
    Dsms.kconstraints = KMonConfig(retraction=retraction, eliminate_columns=on)  # type: ignore[attr-defined]
    try:
        yield
    finally:
        del Dsms.kconstraints  # type: ignore[attr-defined]


SETS = [
    ("with constraints (a references T(a) within {k})", "with constraints (unique(a))"),
    ("with constraints (clustered(a, {k}), unique(a))", "with constraints (ordered(a, {k}))"),
    ("with constraints (unique(a), ordered(a, {k}))", "with constraints (unique(a), clustered(a, {k}))"),
]
QUERIES = [
    "select istream(S.b, T.b) from S [rows 4], T [range 3] where S.a = T.a",  # S.c, T.d eliminated
    "select rstream(S.c) from S [rows 3], T [rows 2] where S.a = T.a and S.b < T.b",  # residual: S.b, T.b kept
    "select * from S [rows 3], T [rows 2] where S.a = T.a",  # everything read
    "select S.b, sum(T.d), count(*) from S [range 3], T [rows 3] where S.a = T.a group by S.b",
    "select istream(T.d) from S [rows 4], T [rows 3] where S.a = T.a and S.c > 0",  # a selection below
]


def _wide(events: list) -> list:
    """Stream events with a third column (derived from the others, so duplicates stay possible)."""
    return [(t, None) if r is None else (t, (*r, None if r[1] is None else r[1] % 3)) for t, r in events]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.sampled_from(SETS),
    st.sampled_from(QUERIES),
    st.integers(0, 3),
    stream_events(n=14, first=st.integers(0, 4)),
    stream_events(n=14, first=st.integers(0, 4)),
    st.sampled_from(["disk", "memory"]),
    st.booleans(),
)
def test_elimination_on_and_off_equal_the_reference_while_constraints_break(cons, query, k, s, t, where, on):
    ddl = (
        f"register stream S (a int, b int, c int) {cons[0].format(k=k)};"
        f" register stream T (a int, b int, d int) {cons[1].format(k=k)}"
    )
    with elimination(on, where):
        assert_same(ddl, query, {"S": _wide(s), "T": _wide(t)})


REL_QUERIES = [
    "select istream(S.b, R.b) from S [range 2], R where R.a = S.a",  # S.c, R.e eliminated
    "select S.c, R.e from S [rows 3], R where S.a = R.a and S.b <= R.b",
]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.sampled_from(["with constraints (unique(a))", "with constraints (clustered(a, {k}), unique(a))"]),
    st.sampled_from(REL_QUERIES),
    st.integers(0, 3),
    stream_events(n=14, first=st.integers(0, 4)),
    relation_events(n=14, first=st.integers(0, 4)),
    st.booleans(),
)
def test_a_relation_input_with_deletes_equals_the_reference_with_elimination(cons, query, k, s, r, on):
    """A relation's deletes find their rows (in memory or spilled) by id, whatever columns were
    eliminated, and retract the right output rows."""
    ddl = f"register stream S (a int, b int, c int) {cons.format(k=k)}; register relation R (a int, b int, e int)"
    rel = [(t, sg, (*row, None if row[1] is None else row[1] * 2)) for t, sg, row in r]
    with elimination(on):
        assert_same(ddl, query, {"S": _wide(s), "R": rel})


def _engine(on: bool, prune_columns: bool = True) -> Dsms:
    d = Dsms(prune_columns=prune_columns)
    d.kconstraints = KMonConfig(eliminate_columns=on)  # type: ignore[attr-defined]
    return d


def _join(d: Dsms) -> JoinOp:
    return next(o for o in d.plan.operators if isinstance(o, JoinOp) and o.kmon is not None)


DDL = (
    "register stream S (a int, b int, c int, d int, e int) with constraints (unique(a));"
    " register stream T (a int, x int, y int) with constraints (a references S(a) within 0)"
)
Q = "select istream(S.b, T.x) from S [rows 100], T [rows 100] where S.a = T.a and S.c >= 0"


def test_explain_and_the_control_table_show_the_columns_kept_and_eliminated():
    d = Dsms()
    d.execute(DDL)
    h = d.register_query(Q)
    line = next(x for x in h.explain().splitlines() if x.startswith("k-constraints"))
    assert "state keeps columns [S.a, S.b] (eliminated: S.c, S.d, S.e) ⋈ [T.a, T.x] (eliminated: T.y)" in line
    ct = _join(d).kmon.control_table()
    assert ct["columns"][0]["kept"] == ["S.a", "S.b"] and ct["columns"][0]["read_above"] == ["S.b"]
    assert ct["columns"][1]["eliminated"] == ["T.y"] and ct["counters"]["eliminated_columns"] == 4
    assert ct["knobs"]["eliminate_columns"] is True


def test_select_star_keeps_every_column():
    d = Dsms()
    d.execute(DDL)
    d.register_query("select * from S [rows 100], T [rows 100] where S.a = T.a")
    assert _join(d).kept is None and not _join(d).kmon.columns.eliminated(0)


def _feed(d: Dsms, n: int, start: int = 0) -> None:
    d.push("S", [(i, 10 * i, i % 5, i, i) for i in range(start, start + n)], ts=[start + 1] * n)
    d.push("T", [(i, 100 * i, i) for i in range(start, start + n // 2)], ts=[start + 2] * (n // 2))
    d.heartbeat("S", start + 3)
    d.heartbeat("T", start + 3)
    d.run()


@pytest.mark.parametrize("on", [True, False])
def test_state_bytes_shrink_by_the_columns_eliminated(on):
    """S rows waiting for their T partner (memory) and T rows spilled after meeting theirs (disk):
    with elimination, an S row keeps 2 of its 5 int columns and a T row 2 of 3 (8 bytes each, plus
    ts, sign and id: 17 bytes)."""
    d = _engine(on)
    d.execute(DDL)
    d.register_query(Q)
    _feed(d, 40)
    join = _join(d)
    s_rows, t_rows = len(join.state[0]), len(join.state[1])
    assert s_rows == 40 and t_rows == 0 and len(join.kmon.stores[1]) == 20  # many-one: T rows met S and left
    widths = (2, 2) if on else (5, 3)
    assert join.kmon.state_bytes()["memory"] == s_rows * B.row_bytes(widths[0])
    assert join.state_bytes() == s_rows * B.row_bytes(widths[0])
    spilled = join.kmon.stores[1].take_matching(np.arange(40))
    assert spilled.b.width == widths[1] and len(spilled) == 20


def test_the_knob_switches_elimination_before_data_and_is_refused_after():
    d = Dsms()
    d.execute(DDL)
    d.register_query(Q)
    join = _join(d)
    d.set_knob(join.kmon.eid, "eliminate_columns", False)
    assert join.kept is None and join.kmon.config.eliminate_columns is False
    d.set_knob(join.kmon.eid, "eliminate_columns", True)
    assert join.kept == [(0, 1), (0, 1)]
    _feed(d, 10)
    with pytest.raises(KnobError, match="before data flows"):
        d.set_knob(join.kmon.eid, "eliminate_columns", False)
    with pytest.raises(KnobError):
        d.set_knob(join.kmon.eid, "eliminate_columns", "no")


def _results(d: Dsms, sub) -> Counter:
    b = sub.poll()
    return Counter(zip(b.ts.tolist(), d.rows(b), b.sign.tolist()))


@pytest.mark.parametrize("on", [True, False])
def test_a_query_sharing_the_join_before_data_widens_the_columns_kept(on):
    """Two queries over one join reading different columns: the join keeps the union of their
    reads, and both get the reference's results."""
    d = _engine(on)
    d.execute(DDL)
    q2 = "select istream(S.d, T.y) from S [rows 100], T [rows 100] where S.a = T.a and S.c >= 0"
    h1, h2 = d.register_query(Q), d.register_query(q2)
    join = _join(d)
    assert all(o is join for o in d.plan.operators if isinstance(o, JoinOp))  # shared
    if on:
        assert join.kept == [(0, 1, 3), (0, 1, 2)]
    subs = [d.subscribe(h.id) for h in (h1, h2)]
    _feed(d, 30)
    _feed(d, 30, start=30)
    got = [_results(d, s) for s in subs]
    assert got[0] == Counter((2 if i < 15 else 32, (10 * i, 100 * i), 1) for i in range(15)) + Counter(
        (32, (10 * i, 100 * i), 1) for i in range(30, 45)
    )
    assert got[1] == Counter((2, (i, i), 1) for i in range(15)) + Counter((32, (i, i), 1) for i in range(30, 45))


def test_a_later_query_reading_eliminated_columns_gets_its_own_join():
    """Rows already stored lack the eliminated columns: a query registered while data flows that
    reads one of them is planned without sharing that join (and gets exact results from its
    start); one reading only kept columns shares it (through the join's snapshot)."""
    outs = {}
    for on in (True, False):
        # (without the plan's column pruning, which would give the late query a join of its own
        # whether k-Mon eliminates or not: tests/test_column_pruning.py)
        d = _engine(on, prune_columns=False)
        d.execute(DDL)
        d.register_query(Q)
        _feed(d, 20)
        narrow = d.register_query("select S.b from S [rows 100], T [rows 100] where S.a = T.a and S.c >= 0")
        wide = d.register_query("select S.e, T.y from S [rows 100], T [rows 100] where S.a = T.a and S.c >= 0")
        joins = [o for o in d.plan.operators if isinstance(o, JoinOp)]
        assert len(joins) == (2 if on else 1)
        if on:
            assert "not shared: a k-Mon join below eliminated columns" in d.explain_plan()
        subs = [d.subscribe(h.id) for h in (narrow, wide)]
        _feed(d, 20, start=20)
        d.end()
        outs[on] = [_results(d, s) for s in subs]
        assert sum(outs[on][1].values()) > 0
    assert outs[True] == outs[False]


@pytest.mark.parametrize("on", [True, False])
def test_a_checkpoint_of_an_eliminating_join_continues_exactly(tmp_path, on):
    d = _engine(on)
    d.execute(DDL)
    h = d.register_query(Q)
    sub = d.subscribe(h.id)
    _feed(d, 30)
    sub.poll()
    path = checkpoint.write(tmp_path, 1, {"dsms": d}, d.catalog.functions)
    copy = checkpoint.load(path, d.catalog.functions)[1]["dsms"]
    copy_sub = copy.queries[h.id].subscriptions[0]
    for e in (d, copy):
        _feed(e, 30, start=30)
        e.end()
    a, b = sub.poll().elements(), copy_sub.poll().elements()
    assert a == b and len(a) == 15
    assert _join(copy).kept == _join(d).kept and _join(copy).kmon.columns.kept == _join(d).kmon.columns.kept


@pytest.mark.parametrize("chunk", [400, 1000])
def test_a_constraint_violated_midway_brings_back_rows_without_their_eliminated_columns(chunk):
    """RIDS(20) breaks halfway: the parents spilled without their unread columns come back and
    join exactly as with whole rows and as without k-Mon."""
    n = 3000
    k = np.where(np.arange(n) < n // 2, 20, 300)
    w = B.gen_rids(n, k, seed=5)
    base = B.run(w, "none", 0, 2000, chunk=chunk, payload=3)
    on = B.run(w, "RIDS", 20, 2000, KMonConfig(), chunk=chunk, payload=3)
    off = B.run(w, "RIDS", 20, 2000, KMonConfig(eliminate_columns=False), chunk=chunk, payload=3)
    assert on.strategy.withdrawals and on.strategy.restored > 0
    assert Counter(on.results) == Counter(base.results) == Counter(off.results) and len(base.results) > 1000
    assert on.strategy.join.kept == [(0, 1), (0, 1)] and off.strategy.join.kept is None
    assert on.mem == off.mem  # the same rows, fewer bytes
    assert all(a < b for a, b in zip(on.state_bytes, off.state_bytes) if b)


def test_one_event_per_push_gives_the_same_results_with_elimination_and_without():
    """A one-event-per-push feed (other batching than assert_same's) gives the same results."""
    ddl = (
        "register stream S (a int, b int, c int) with constraints (unique(a)); register stream T (a int, b int, d int)"
    )
    q = "select istream(S.b, T.b) from S [rows 4], T [rows 3] where S.a = T.a"
    ev = {"S": [(t, (t % 4, t, 1)) for t in range(20)], "T": [(t, (t % 5, -t, 2)) for t in range(20)]}
    got = {}
    for on in (True, False):
        d = _engine(on)
        d.execute(ddl)
        h = d.register_query(q)
        sub = d.subscribe(h.id)
        feed(d, _merge_events(ev), 3)
        d.end()
        got[on] = _results(d, sub)
    assert got[True] == got[False] and sum(got[True].values()) > 5


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    stream_events(n=12, first=st.integers(0, 3)),
    stream_events(n=12, first=st.integers(0, 3)),
    stream_events(n=12, first=st.integers(0, 3)),
    st.booleans(),
)
def test_a_binary_join_tree_step_keeps_what_the_next_step_reads(s, t, u, on):
    """With binary joins, (S ⋈ T) ⋈ U: the first step's k-Mon state keeps the columns the second
    step's predicate and the projection read, nothing else."""
    ddl = (
        "register stream S (a int, b int, c int) with constraints (unique(a));"
        " register stream T (a int, b int, d int) with constraints (a references S(a) within 1);"
        " register stream U (a int, b int, e int)"
    )
    q = "select istream(T.d, U.e) from S [rows 3], T [rows 4], U [rows 3] where S.a = T.a and T.b = U.b"
    with elimination(on):
        assert_same(ddl, q, {"S": _wide(s), "T": _wide(t), "U": _wide(u)}, binary_joins=True)
    d = Dsms(binary_joins=True)
    d.kconstraints = KMonConfig(eliminate_columns=on)  # type: ignore[attr-defined]
    d.execute(ddl)
    d.register_query(q)
    join = _join(d)
    assert join.kept == ([(0,), (0, 1, 2)] if on else None)
