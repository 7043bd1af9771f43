"""The plan manager: one shared global plan; queries merge in and leave while data flows.

Checked through the control tables (what a user of the API sees), and against each query run
alone and the reference evaluator.
"""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cqlstream.engine.dsms import Dsms, InputError
from cqlstream.engine.errors import EngineError, InUseError, KnobError
from cqlstream.engine.operators.filterhub import HubMember
from tests.engine_harness import _merge_events, feed, run_engine
from tests.plan_harness import Results, assert_exact_from, collect, reference, run_all, states_from
from tests.strategies import relation_events, stream_events

DDL = "register stream S (A int, B int); register stream T (A int, B int); register relation R (A int, B int)"


def _data(n=300, seed=1, streams=("S", "T")):
    rng = random.Random(seed)
    return {s: [(i // 3, (rng.randrange(10), rng.randrange(5))) for i in range(n)] for s in streams}


def _ops(d, kind):
    return [t for t in d.control_tables() if t["kind"] == "operator" and t["type"] == kind]


# ------------------------------------------------------------------ sharing
def test_100_filter_variants_hold_one_window_store():
    queries = [f"select * from S [Range 60] where A = {k % 10} and B <> {k // 10}" for k in range(100)]
    data = _data(600, streams=("S",))
    results, d = run_all("register stream S (A int, B int)", queries, data, step=97)
    windows = _ops(d, "seq-window")
    assert len(windows) == 1, [w["name"] for w in windows]
    assert windows[0]["queries"] == list(range(1, 101))
    assert windows[0]["counters"]["tuples_in"] == 600  # the stream was windowed once, not 100 times
    for i in (0, 37, 99):  # shared results == the same query alone == the reference
        alone, _ = run_engine("register stream S (A int, B int)", queries[i], data, chunk=97)
        assert results[i] == alone == reference("register stream S (A int, B int)", queries[i], data)


def test_50_queries_with_a_common_join_run_one_join():
    join = "from S [Range 10], T [Range 10] where S.A = T.A"
    queries = [f"select S.A, T.B + {k} {join}" for k in range(25)]
    queries += [f"select S.A, Count(*) {join} group by S.A having Count(*) > {k}" for k in range(25)]
    data = _data(240)
    results, d = run_all(DDL, queries, data, step=41)
    joins = _ops(d, "join")
    assert len(joins) == 1
    assert len(joins[0]["queries"]) == 50
    for i in (0, 24, 25, 49):
        assert results[i] == reference(DDL, queries[i], data), queries[i]


def test_equal_predicates_up_to_order_and_commutativity_share():
    d = Dsms()
    d.execute(DDL)
    d.register_query("select * from S where A > 1 and B = 2")
    d.register_query("select * from S where 2 = B and 1 < A")
    d.register_query("Istream(select S.A from S [Now], T [Now] where S.A = T.A)")
    d.register_query("Istream(select S.A from S [Now], T [Now] where T.A = S.A)")
    assert len(_ops(d, "select")) == 1
    assert len(_ops(d, "join")) == 1


def test_register_deregister_1000_queries_leaves_no_orphans():
    rng = random.Random(7)
    templates = [
        "select * from S [Range {k}] where A = {c}",
        "select B, Count(*) from S [Range {k}] group by B",
        "Istream(select S.A, T.B from S [Range {k}], T [Range 3] where S.A = T.A)",
        "select * from S [Rows {k}]",
        "select A from S where B > {c}",
        "select distinct A from S [Range {k}]",
        "select R.B from R, S [Now] where R.A = S.A",
    ]
    d = Dsms()
    d.execute(DDL)
    live: list[int] = []
    t = 0
    for step in range(1000):
        if live and (rng.random() < 0.45 or len(live) > 60):
            d.deregister(live.pop(rng.randrange(len(live))))
        else:
            q = rng.choice(templates).format(k=rng.randint(1, 4), c=rng.randint(0, 3))
            h = d.register_query(q)
            live.append(h.id)
            if rng.random() < 0.3:
                d.subscribe(h.id)
        if step % 25 == 0:  # data flows all along
            t += 1
            d.push("S", [(rng.randrange(4), rng.randrange(4)) for _ in range(3)], ts=[t] * 3)
            d.push("T", [(rng.randrange(4), rng.randrange(4))], ts=[t])
            d.push("R", [(rng.randrange(4), t)], ts=[t])
            d.run()
        if step % 100 == 0:
            _check_no_orphans(d, set(live))
    for qid in list(live):
        d.deregister(qid)
    _check_no_orphans(d, set())
    assert d.plan.operators == [] and d.plan.stores == {} and d.plan.window_stores == {} and d.plan.late_stores == []
    assert d.plan.filter_hubs == {}
    assert all(pn.op is None for pn in d.plan.nodes.values())  # only the sources are left
    for pn in d.plan.nodes.values():
        assert pn.queue.readers == [] and pn.queue.batches == []
    engine = d.control_table("engine")["counters"]
    assert engine["operators"] == 0 and engine["stores"] == 0 and engine["queries"] == 0


def _check_no_orphans(d, live):
    ops = set(map(id, d.plan.operators))
    for pn in d.plan.nodes.values():
        assert pn.users <= live | {"catalog"}, (pn.key, pn.users)
        assert pn.users, pn.key
        if pn.op is not None:  # scheduled itself, or through its grouped selection
            assert id(getattr(pn.op, "hub", pn.op)) in ops
    members = sum(isinstance(pn.op, HubMember) for pn in d.plan.nodes.values())
    assert len(ops) == sum(pn.op is not None for pn in d.plan.nodes.values()) - members + len(d.plan.filter_hubs)
    for hub in d.plan.filter_hubs.values():
        assert hub.members and all(m in [pn.op for pn in d.plan.nodes.values()] for m in hub.members)
    # every reader of every queue belongs to a live operator, store or subscription
    consumers = {id(r) for op in d.plan.operators for r in op.readers}
    consumers |= {
        id(st.reader) for st in list(d.plan.stores.values()) + list(d.plan.window_stores.values()) + d.plan.late_stores
    }
    consumers |= {id(pn.store.reader) for pn in d.plan.nodes.values() if pn.store is not None}
    consumers |= {id(s.reader) for h in d.queries.values() for s in h.subscriptions if s.reader is not None}
    for pn in d.plan.nodes.values():
        for r in pn.queue.readers:
            assert id(r) in consumers, f"orphan reader on {pn.queue.eid}"
    for h in d.queries.values():
        assert h.pnode is None or h.pnode.key in d.plan.nodes


POOL = [
    "select * from S [Range 3] where A = 1",
    "select * from S [Range 3] where B = 0",
    "select A, Count(*) from S [Range 3] group by A",
    "select Sum(B) from S [Range 3]",
    "Istream(select S.A, T.B from S [Range 3], T [Range 2] where S.A = T.A)",
    "select S.A, T.B from S [Range 3], T [Range 2] where S.A = T.A",
    "Rstream(select distinct A from S [Rows 2])",
    "select R.B, S.B from R, S [Range 1] where R.A = S.A",
    "select * from S [Rows 3]",
    "Dstream(select * from S [Range 2] where A <> 2)",
]
small3 = st.integers(0, 2)


@pytest.mark.parametrize("options", [{}, {"binary_joins": True}, {"compat": True}], ids=["", "binary", "compat"])
@settings(max_examples=40, deadline=None)
@given(
    s=stream_events(first=small3),
    t=stream_events(first=small3),
    r=relation_events(first=small3),
    picks=st.lists(st.integers(0, len(POOL) - 1), min_size=2, max_size=6),
    step=st.sampled_from([1, 5, None]),
)
def test_shared_results_equal_each_query_alone(options, s, t, r, picks, step):
    queries = [POOL[i] for i in picks]
    inputs = {"S": s, "T": t, "R": r}
    results, _ = run_all(DDL, queries, inputs, step=step, **options)
    for i, q in enumerate(queries):
        assert results[i] == reference(DDL, q, inputs, compat=options.get("compat", False)), q


# ------------------------------------------------------------------ late registration
LATE = [  # (running queries, late query)
    (
        ["select * from S [Range 6]"],
        "select * from S [Range 4] where A = 1",
    ),  # a smaller window over the same window store
    (["select * from S [Range 4]"], "select A, Count(*) from S [Range 4] group by A"),  # snapshot of the window
    (
        ["select * from S [Range 4]", "select * from T [Range 3]"],
        "Istream(select S.A, T.B from S [Range 4], T [Range 3] where S.A = T.A)",
    ),
    (["select B, Sum(A) from S [Range 5] group by B"], "select B, Sum(A) from S [Range 5] group by B"),  # identical
    (["select * from R"], "select A, Count(*) from R group by A"),  # relation source snapshot
    (["select * from S [Rows 5]"], "select * from S [Rows 3]"),  # Rows sibling
    (["select * from S [Range 5]", "select * from R"], "select R.B, S.B from R, S [Range 2] where R.A = S.A"),
    ([], "select * from S [Range 3]"),  # no window store yet: complete once the window has filled
    (
        ["select S.A, T.B from S [Range 3], T [Range 2] where S.A = T.A"],  # identical join: recomputed snapshot
        "select S.A, T.B from S [Range 3], T [Range 2] where S.A = T.A",
    ),
    (["select distinct A from S [Range 3]"], "select distinct A from S [Range 3]"),  # result store
    (
        ["select A, Count(*) from S [Range 3] group by A"],  # over a running aggregate: its state
        "select A from (select A, Count(*) as c from S [Range 3] group by A) as X where c > 1",
    ),
]


@pytest.mark.parametrize("running,late", LATE, ids=[q for _, q in LATE])
@settings(max_examples=15, deadline=None)
@given(
    s=stream_events(n=14, first=small3),
    t=stream_events(n=10, first=small3),
    r=relation_events(n=8, first=small3),
    cut=st.integers(1, 20),
)
def test_late_query_exact_from_its_complete_from(running, late, s, t, r, cut):
    inputs = {"S": s, "T": t, "R": r}
    events = _merge_events(inputs)
    d = Dsms()
    d.execute(DDL)
    for q in running:
        d.subscribe(d.register_query(q).id)
    res = Results(d)
    box = {}

    def after(n):
        if n == cut - 1:
            h = d.register_query(late)
            box["h"] = h
            res.watch(h.id, snapshot=True)  # the current relation, then the deltas
        res.poll()

    feed(d, events, 1, after=after)
    if "h" not in box:
        return  # fewer events than the cut: nothing registered late
    d.end()
    res.poll()
    h = box["h"]
    assert h.completeness()["complete"], "these late queries can all start from shared state"
    assert_exact_from(h, res.of(h.id), reference(DDL, late, inputs))


def test_late_unbounded_window_says_it_is_incomplete():
    d = Dsms()
    d.execute(DDL)
    d.push("S", [(1, 1)], ts=[1])
    d.run()
    h = d.register_query("select Count(*) from S [Rows 10]")
    assert h.completeness() == {"complete_from": None, "complete": False}
    assert "started late" in d.explain_plan()


def test_late_range_window_reports_when_its_window_has_filled():
    d = Dsms()
    d.execute(DDL)
    d.push("S", [(1, 1), (2, 2)], ts=[5, 9])
    d.run()
    h = d.register_query("select * from S [Range 4]")
    # the new window misses the elements up to ts 9; an element at ts ≥ 10 is in the window for 5
    # instants (Range 4 holds (t−5, t]), so from instant 10 + 4 on the window is exact
    assert h.completeness() == {"complete_from": 14, "complete": True}


# ------------------------------------------------------------------ freeing, activity, weights
def test_deregister_frees_what_no_other_query_uses():
    d = Dsms()
    d.execute(DDL)
    keep = d.register_query("select B, Sum(A) from S [Range 5] group by B")
    others = [d.register_query(f"select * from S [Range {k}] where A = 1") for k in range(1, 8)]
    others.append(d.register_query("Istream(select S.A from S [Rows 4], T [Rows 4] where S.A = T.A)"))
    data = _data(200)
    feed(d, _merge_events(data), 50)
    before = d.control_table("engine")["counters"]
    for h in others:
        d.deregister(h.id)
    after = d.control_table("engine")["counters"]
    alone = Dsms()
    alone.execute(DDL)
    alone.register_query("select B, Sum(A) from S [Range 5] group by B")
    feed(alone, _merge_events(data), 50)
    solo = alone.control_table("engine")["counters"]
    assert after["operators"] == solo["operators"] < before["operators"]
    assert after["stores"] == solo["stores"] == 1 < before["stores"]  # its window store
    assert after["state_bytes"] == solo["state_bytes"] < before["state_bytes"]
    assert d.attribution()[keep.id]["memory_bytes"] == pytest.approx(alone.attribution()[1]["memory_bytes"])


def test_inactive_query_produces_nothing_and_holds_no_operators():
    d = Dsms()
    d.execute(DDL)
    a = d.register_query("select A, Count(*) from S [Range 3] group by A")
    b = d.register_query("select * from S [Range 3] where B = 1")
    sub = d.subscribe(a.id)
    d.push("S", [(1, 1), (2, 1)], ts=[1, 2])
    d.run()
    n_ops = len(d.plan.operators)
    d.set_knob(f"query:{a.id}", "active", False)
    assert sub.closed and sub.reason == "query deactivated"
    assert len(d.plan.operators) < n_ops  # the aggregate is gone; the shared window stays for b
    assert _ops(d, "seq-window")[0]["queries"] == [b.id]
    assert d.control_table(f"query:{a.id}")["knobs"]["active"] is False
    assert d.subscribe(a.id).poll().rows() == []
    d.push("S", [(1, 0)], ts=[4])
    d.run()
    h = d.set_active(a.id, True)
    assert h.completeness() == {"complete_from": 3, "complete": True}  # from the shared window's contents
    sub2 = d.subscribe(a.id, snapshot=True)
    d.push("S", [(2, 0), (0, 0)], ts=[5, 6])
    d.run()
    got = sub2.poll().elements()
    # the window holds A=1 (ts 1), A=2 (ts 2) at 3; A=1 (ts 4) enters at 4 while ts 1 stays (Range 3
    # holds (t−4, t]); at 5 ts 1 leaves and A=2 (ts 5) enters
    state = {}
    for t, _s, _row in got:
        state.setdefault(t, {})
    net = {}
    for t, s, row in got:
        net[row] = net.get(row, 0) + s
        state[t] = {r for r, c in net.items() if c}
    assert state[3] == {(1, 1), (2, 1)}
    assert state[4] == {(1, 2), (2, 1)}
    assert state[5] == {(1, 1), (2, 2)}


def test_weights_and_scheduler_knobs_do_not_change_results():
    data = _data(300)
    q = "Istream(select S.A, T.B from S [Rows 5], T [Rows 5] where S.A = T.A)"
    want = reference(DDL, q, data)
    d = Dsms()
    d.execute(DDL)
    h = d.register_query(q)
    d.set_knob("engine", "scheduler", "weighted")
    d.set_knob("engine", "budget", 7)
    d.set_weight(h.id, 3.5)
    res = Results(d)
    res.watch(h.id)
    feed(d, _merge_events(data), 13, after=lambda n: res.poll())
    d.end()
    res.poll()
    assert res.of(h.id) == want
    assert d.control_table("engine")["knobs"] == {
        "scheduler": "weighted",
        "budget": 7,
        "share": True,
        "adaptive": "a-greedy",
        "synopsis_joins": True,
        "approximation": "off",
        "queue_memory_limit": 100 << 20,
        "cpu_limit": None,
        "overload_policy": "weighted",
        "overload_admission": "on",
    }
    with pytest.raises(KnobError):
        d.set_knob("engine", "scheduler", "fastest")
    with pytest.raises(KnobError):
        d.set_weight(h.id, 0)


# ------------------------------------------------------------------ control tables
def test_join_probe_order_changes_at_run_time_without_changing_results():
    ddl = DDL + "; register stream U (A int, B int)"
    q = "Istream(select S.B, T.B, U.B from S [Range 3], T [Range 3], U [Range 3] where S.A = T.A and T.A = U.A)"
    data = _data(240, streams=("S", "T", "U"))
    want = reference(ddl, q, data)
    d = Dsms()
    d.execute(ddl)
    h = d.register_query(q)
    res = Results(d)
    res.watch(h.id)
    (join,) = _ops(d, "join")
    orders = [[[1, 2], [2, 0], [0, 1]], [[2, 1], [0, 2], [1, 0]]]
    feed(
        d,
        _merge_events(data),
        20,
        after=lambda n: (
            d.set_knob(join["id"], "probe_orders", orders[n % 2]),
            d.set_knob(join["id"], "index", ["dyadic", "chains"][n % 2]),
            res.poll(),
        ),
    )
    d.end()
    res.poll()
    assert res.of(h.id) == want
    with pytest.raises(KnobError):
        d.set_knob(join["id"], "probe_orders", [[1, 1], [0, 2], [0, 1]])
    with pytest.raises(KnobError):
        d.set_knob(join["id"], "weight", 2)  # a query knob, not an operator's
    with pytest.raises(KnobError):
        d.set_knob(join["id"], "sampling_rate", 1.5)
    with pytest.raises(KnobError):
        d.set_knob(join["id"], "index", "hash")
    with pytest.raises(EngineError, match="no entity 'op:999'") as e:
        d.control_table("op:999")
    assert e.value.code == "unknown_entity"


def test_control_tables_count_and_limit():
    d = Dsms()
    d.execute(DDL)
    h = d.register_query("select * from S [Range 10] where A = 1")
    d.push("S", [(1, 0), (2, 0), (1, 1)], ts=[1, 1, 2])
    d.heartbeat("S", 3)
    d.run()
    (w,) = _ops(d, "seq-window")
    (f,) = _ops(d, "select")
    assert w["counters"]["tuples_in"] == 3 and f["counters"]["tuples_in"] == 3
    assert f["counters"]["tuples_out"] == 2 and f["counters"]["selectivity"] == pytest.approx(2 / 3)
    (store,) = [t for t in d.control_tables() if t["kind"] == "store"]
    assert store["name"] == "window store" and store["counters"]["rows"] == 3 and store["counters"]["bytes"] > 0
    t = d.set_knob(store["id"], "memory_limit", 1)
    assert t["knobs"]["memory_limit"] == 1 and t["counters"]["over_memory_limit"] is True
    t = d.set_knob(w["id"], "memory_limit", 10)
    assert t["knobs"]["memory_limit"] == 10 and t["counters"]["over_memory_limit"] is False
    with pytest.raises(KnobError):
        d.set_knob(w["id"], "memory_limit", -5)
    src = d.control_table("src:S")
    assert src["counters"]["accepted"] == 3 and src["queries"] == [h.id]
    q = d.control_table(f"query:{h.id}")
    assert q["knobs"] == {
        "active": True,
        "weight": 1.0,
        "share": True,
        "memory_limit": None,
        "cpu_limit": None,
        "synopsis_joins": True,
    }
    assert q["counters"]["state"] == "active" and q["counters"]["suspended"] is None
    assert q["counters"]["memory_bytes"] > 0


def test_sampling_rate_sheds_load_at_a_source():
    d = Dsms()
    d.execute(DDL)
    h = d.register_query("select * from S")
    sub = d.subscribe(h.id)
    d.set_knob("src:S", "sampling_rate", 0.5)
    assert d.push("S", [(i, 0) for i in range(1000)], ts=[1] * 1000) == 1000
    d.push("S", [(0, 0)], ts=[2])
    d.run()
    kept = len(sub.poll())
    shed = d.control_table("src:S")["counters"]["shed"]
    assert kept + shed == 1000 and 400 < kept < 600
    with pytest.raises(KnobError):
        d.set_knob("src:R", "sampling_rate", 0.5)  # shedding a relation would lose deletes


def test_explain_plan_text_and_graph():
    d = Dsms()
    d.execute(DDL)
    d.register_query("select * from S [Range 5] where A = 1")
    d.register_query("select A, Count(*) from S [Range 5] group by A")
    text = d.explain_plan()
    assert text.startswith("Global plan: 2 queries, 4 operators")
    assert "seq-window" in text and "queries: [1, 2]" in text
    g = d.explain_plan("json")
    ids = {n["id"] for n in g["nodes"]}
    assert {"query:1", "query:2", "src:S"} <= ids
    for e in g["edges"]:
        assert e["from"] in ids and e["to"] in ids
    window = next(n for n in g["nodes"] if n.get("type") == "seq-window")
    assert sum(e["from"] == window["id"] for e in g["edges"]) == 2  # read by the filter and the aggregate


def test_peek_queue_and_window():
    d = Dsms()
    d.execute(DDL)
    d.register_query("select * from S [Range 5]")
    d.push("S", [(i, i) for i in range(50)], ts=list(range(50)))
    d.run()
    (w,) = _ops(d, "seq-window")
    p = d.peek(w["id"], 3)
    assert p["what"] == "window contents" and [t["row"] for t in p["tuples"]] == [[46, 46], [47, 47], [48, 48]]
    q = d.peek("src:S", 2)
    assert [t["row"] for t in q["tuples"]] == [[48, 48], [49, 49]]
    with pytest.raises(EngineError) as e:
        d.peek("q:999")
    assert e.value.code == "unknown_entity"


def test_drop_source_refused_while_used():
    d = Dsms()
    d.execute(DDL + "; register view V as select * from T [Range 2]")
    h = d.register_query("select * from S")
    with pytest.raises(InUseError, match="query 1"):
        d.drop_source("S")
    with pytest.raises(InUseError, match="view V"):
        d.drop_source("T")
    d.deregister(h.id)
    d.drop_source("S")
    assert d.catalog.get("S") is None
    d.drop_view("V")
    d.drop_source("T")
    with pytest.raises(EngineError, match="no stream or relation 'nope'") as e:
        d.drop_source("nope")
    assert e.value.code == "unknown_source"
    with pytest.raises(EngineError) as e:
        d.drop_view("nope")
    assert e.value.code == "unknown_view"


# ------------------------------------------------------------------ SysStream
def test_sysstream_is_queryable_with_cql():
    now = [1000.0]
    d = Dsms(clock=lambda: now[0])
    d.execute(DDL)
    d.register_query("select * from S")
    h = d.register_query("select entity, value from SysStream [Now] where metric = 'accepted'")
    sub = d.subscribe(h.id)
    for k in range(3):
        d.push("S", [(k, 0)] * 10, ts=[k] * 10)
        now[0] += 1.0
        d.tick()
        d.run()
    rows = [e for e in sub.poll().elements() if e[1] == 1 and e[2][0] == "src:S"]
    assert [r[2][1] for r in rows] == [10.0, 20.0]  # published at each tick; the last is not final yet
    assert d.control_table("engine")["counters"]["sys_rows"] > 0
    with pytest.raises(InputError, match="published by the engine"):
        d.push("SysStream", [("x", "y", 1.0)], ts=[1])
    with pytest.raises(InUseError, match="built in"):
        d.drop_source("SysStream")


# ------------------------------------------------------------------ one window store, many sizes
@settings(max_examples=40, deadline=None)
@given(
    s=stream_events(n=16, first=small3),
    sizes=st.lists(st.integers(0, 5), min_size=2, max_size=4),
    rows=st.lists(st.integers(1, 5), min_size=1, max_size=3),
    step=st.sampled_from([1, 3, None]),
    compat=st.booleans(),
)
def test_windows_of_different_sizes_read_one_store(s, sizes, rows, step, compat):
    queries = [f"select * from S [Range {k}]" for k in sizes] + [f"select * from S [Rows {n}]" for n in rows]
    inputs = {"S": s}
    ddl = "register stream S (A int, B int)"
    results, d = run_all(ddl, queries, inputs, step=step, compat=compat)
    stores = [t for t in d.control_tables() if t["kind"] == "store"]
    assert sorted(t["name"] for t in stores) == ["window store", "window store"]  # one Range, one Rows
    for i, q in enumerate(queries):
        alone, _ = run_engine(ddl, q, inputs, chunk=step, compat=compat)
        assert results[i] == alone, q
        if not compat:
            assert results[i] == reference(ddl, q, inputs), q


def test_window_store_holds_the_largest_extent_once():
    def state(sizes):
        d = Dsms()
        d.execute("register stream S (A int, B int)")
        for k in sizes:
            d.register_query(f"select * from S [Range {k}]")
        for t in range(100):
            d.push("S", [(t, t)], ts=[t])
        d.run()
        return d.control_table("engine")["counters"]["state_bytes"]

    assert state([50]) == state([10, 20, 30, 40, 50]) == state([50] + list(range(1, 50)))


def test_cost_aware_sharing_leaves_a_join_unshared_when_paces_differ():
    q = "Istream(select S.A, T.B from S [Range 3], T [Range 3] where S.A = T.A)"
    d = Dsms()
    d.execute(DDL)
    d.register_query(q)
    d.register_query(q.replace("S.A, T.B", "T.B, S.A"), weight=5)  # within 10x: shared
    assert len(_ops(d, "join")) == 1
    d.set_knob("engine", "scheduler", "weighted")
    d.set_knob("engine", "budget", 100)
    fast = d.register_query(q.replace("S.A, T.B", "S.A"), weight=100)
    joins = _ops(d, "join")
    assert len(joins) == 2
    mine = next(j for j in joins if j["queries"] == [fast.id])
    assert "CIDR §3.2" in mine["note"] and "slowest consumer" in d.explain_plan()
    data = _data(120)
    res = Results(d)
    res.watch(fast.id)
    feed(d, _merge_events(data), 17, after=lambda n: res.poll())
    d.end()
    res.poll()
    assert res.of(fast.id) == reference(DDL, d.queries[fast.id].text, data)


def test_late_identical_aggregate_query_shares_and_starts_from_the_aggregate_state():
    q = "select B, Count(*) from S [Range 4] group by B"
    d = Dsms()
    d.execute(DDL)
    first = d.register_query(q)
    data = _data(60, streams=("S",))
    feed(d, _merge_events(data), 9)
    n_ops = len(d.plan.operators)
    second = d.register_query(q)
    assert len(d.plan.operators) == n_ops  # shared: the aggregate's state gives the current result
    assert second.pnode is first.pnode
    assert second.completeness()["complete_from"] is not None  # registered after data flowed
    sub = d.subscribe(second.id, snapshot=True)
    d.end()
    assert_exact_from(second, collect([sub.poll()]), reference(DDL, q, data))


# ------------------------------------------------------------------ grouped selections
HUB_DDL = "register stream S (A int, B int); register stream N (K varchar(4), V int)"


@settings(max_examples=40, deadline=None)
@given(
    s=stream_events(n=24, first=st.one_of(st.integers(0, 12), st.just(None))),
    consts=st.lists(st.integers(0, 12), min_size=1, max_size=12),
    cuts=st.lists(st.integers(0, 12), min_size=12, max_size=12),
    windowed=st.booleans(),
)
def test_grouped_selection_members_join_and_leave_while_data_flows(s, consts, cuts, windowed):
    """`A = c` selections over one queue share one grouped selection (mask path below 8 members,
    sort path from 8); members registered at any point are exact from their complete_from."""
    src = "S [Range 3]" if windowed else "S"
    queries = [f"select * from {src} where A = {c}" for c in consts]
    inputs = {"S": s}
    d = Dsms()
    d.execute(HUB_DDL)
    res = Results(d)
    handles = {}
    leave = {i: cuts[i] + 3 for i in range(0, len(queries), 3)}  # every third query leaves again

    def after(n):
        for i, q in enumerate(queries):
            if cuts[i] == n and i not in handles:
                h = handles[i] = d.register_query(q)
                res.watch(h.id, snapshot=True)
            if leave.get(i) == n and i in handles:
                res.poll()
                d.deregister(handles[i].id)
                del res.subs[handles[i].id]
        res.poll()

    for i, q in enumerate(queries):
        if cuts[i] == 0:
            handles[i] = d.register_query(q)
            res.watch(handles[i].id)
    feed(d, _merge_events(inputs), 2, after=lambda n: after(n + 1))
    d.end()
    res.poll()
    live = [i for i in handles if i not in leave or leave[i] > (len(s) + 1) // 2]
    if len({consts[i] for i in live}) >= 2 and len(s):
        assert len(d.plan.filter_hubs) == 1
    for i in live:
        h = handles[i]
        assert h.completeness()["complete"]
        assert_exact_from(h, res.of(h.id), reference(HUB_DDL, queries[i], inputs))


def test_grouped_selection_over_strings_and_the_sort_path():
    qs = [f"select V from N where K = '{k}'" for k in ["a", "b", "", "abcd", "x", "y", "z", "q", "r", "s"]]
    events = [(t // 3, (["a", "b", "", "abcd", None, "z"][t % 6], t)) for t in range(120)]
    results, d = run_all(HUB_DDL, qs, {"N": events}, step=11)
    (hub,) = [t for t in d.control_tables() if t.get("type") == "grouped select"]
    assert hub["queries"] == list(range(1, 11)) and hub["counters"]["tuples_in"] == 120
    for i, q in enumerate(qs):
        assert results[i] == reference(HUB_DDL, q, {"N": events}), q
    for h in list(d.queries.values()):
        d.deregister(h.id)
    assert d.plan.filter_hubs == {} and d.plan.operators == []


@settings(max_examples=60, deadline=None)
@given(s=stream_events(first=small3), r=relation_events(first=small3), step=st.sampled_from([1, 4, None]))
def test_join_index_knob_never_changes_results(s, r, step):
    queries = [
        "select * from S [Range 2] as X, S as Y where X.A = Y.A",
        "select R.B, S.B from R, S [Rows 2] where R.A = S.A",
    ]
    inputs = {"S": s, "R": r}

    def dyadic(d):
        joins = [t["id"] for t in d.control_tables() if t.get("type") == "join"]
        assert len(joins) == 2
        for j in joins:
            d.set_knob(j, "index", "dyadic")

    results, _ = run_all(DDL, queries, inputs, step=step, setup=dyadic)
    for i, q in enumerate(queries):
        assert results[i] == reference(DDL, q, inputs), q


CHURN = POOL + [
    "select * from S [Range 2] where A = 0",
    "select * from S [Range 4] where A = 1",
    "select B, Count(*) from S [Range 2] group by B",
    "select distinct B from S [Range 4]",
    "Istream(select * from S [Range 2] where A = 2)",
    "select * from S where A = 1",
    "select S.A, T.B from S [Range 2], T [Range 4] where S.A = T.A",
    "select A, Sum(B) from T [Rows 3] group by A",
    "select * from R where A = 1",
]


@settings(max_examples=60, deadline=None)
@given(
    s=stream_events(n=16, first=small3),
    t=stream_events(n=12, first=small3),
    r=relation_events(n=8, first=small3),
    plan=st.lists(
        st.tuples(st.integers(0, len(CHURN) - 1), st.integers(0, 14), st.integers(0, 20)), min_size=1, max_size=8
    ),
    step=st.sampled_from([1, 3]),
)
def test_queries_coming_and_going_are_exact_from_their_complete_from(s, t, r, plan, step):
    """Random queries registered and deregistered at random points while data flows: every query
    still registered at the end equals the reference from its complete_from on."""
    inputs = {"S": s, "T": t, "R": r}
    d = Dsms()
    d.execute(DDL)
    res = Results(d)
    live: dict[int, tuple] = {}

    def after(n):
        for k, (qi, start, stop) in enumerate(plan):
            if start == n and k not in live:
                h = d.register_query(CHURN[qi])
                live[k] = (h, CHURN[qi])
                res.watch(h.id, snapshot=True)
            if stop == n and k in live and stop > start:
                res.poll()
                h, _ = live.pop(k)
                d.deregister(h.id)
                del res.subs[h.id]
        res.poll()

    after(0)
    feed(d, _merge_events(inputs), step, after=lambda n: after(n + 1))
    d.end()
    res.poll()
    _check_no_orphans(d, {h.id for h, _ in live.values()})
    for h, q in live.values():
        if h.completeness()["complete"]:  # else a late Rows/Unbounded window without history (checked elsewhere)
            assert_exact_from(h, res.of(h.id), reference(DDL, q, inputs))


def test_joins_read_windows_through_views_of_the_window_store():
    """A join over plain windows keeps no copy of their state: it reads views of the stream's
    window store, which keeps what a lagging join still needs."""
    q = "Istream(select S.A, S.B, T.B from S [Range 5], T [Rows 3] where S.A = T.A)"
    inputs = {"S": [(t, (t % 3, t)) for t in range(40)], "T": [(t, (t % 3, -t)) for t in range(0, 40, 7)]}
    d = Dsms()
    d.execute(DDL)
    h = d.register_query(q)
    res = Results(d)
    res.watch(h.id)
    for t, row in inputs["S"]:  # S runs far ahead of T: the join waits for T, S's store must keep up
        d.push("S", [row], ts=[t])
    d.run()
    stores = [t for t in d.control_tables() if t["kind"] == "store"]
    assert sorted(s["name"] for s in stores) == ["window relation (view)"] * 2 + ["window store"] * 2
    assert all(s["counters"]["bytes"] == 0 for s in stores if s["name"].startswith("window relation"))
    for t, row in inputs["T"]:
        d.push("T", [row], ts=[t])
        d.run()
        res.poll()
    d.end()
    res.poll()
    assert res.of(h.id) == reference(DDL, q, inputs)


def test_operator_sampling_rate_sheds_consistently():
    """Shedding at an operator keeps or drops an insert together with its delete, so the relation
    it sees stays a valid one: the aggregate over the sampled window never goes negative and
    equals the reference over the kept elements."""
    q = "select A, Count(*) from S [Range 3] group by A"
    data = _data(300, streams=("S",))
    d = Dsms()
    d.execute(DDL)
    h = d.register_query(q)
    res = Results(d)
    res.watch(h.id)
    (agg,) = _ops(d, "aggregate")
    d.set_knob(agg["id"], "sampling_rate", 0.5)
    feed(d, _merge_events(data), 30, after=lambda n: res.poll())
    d.end()
    res.poll()
    shed = d.control_table(agg["id"])["counters"]["shed"]
    assert shed > 0
    got = res.of(h.id)
    state = states_from(got, 0, max(got))
    assert all(c > 0 for st_ in state.values() for c in st_.values())  # never a negative count
    full = states_from(reference(DDL, q, data), 0, max(got))
    # every group's count is at most the unsampled one, and about half of it overall
    sampled = sum(r[1] for st_ in state.values() for r in st_)
    total = sum(r[1] for st_ in full.values() for r in st_)
    assert 0.35 < sampled / total < 0.65
    for t, rows in state.items():
        counts = {a: c for a, c in full[t]}
        assert all(c <= counts[a] for a, c in rows), t


def test_snapshot_over_a_source_relation_is_taken_where_its_readers_are():
    """Operators over a relation are done through its watermark, one instant before its latest
    updates; the relation's snapshot at that instant undoes those updates."""
    d = Dsms()
    d.execute(DDL)
    h = d.register_query("select A from R where B > 1")
    j = d.register_query("select R.A, S.B from R, S [Range 3] where R.A = S.A")
    d.push("R", [(1, 2), (2, 3)], ts=[1, 1])
    d.push("S", [(1, 7), (2, 8)], ts=[1, 1])
    d.heartbeat("R", 2)
    d.heartbeat("S", 2)
    d.run()
    d.push("R", [(5, 5), (1, 2)], ts=[2, 2], signs=[1, -1])  # not final yet
    d.run()
    sub = d.subscribe(h.id, snapshot=True)
    sub_j = d.subscribe(j.id, snapshot=True)
    assert sorted(sub.poll().elements()) == [(1, 1, (1,)), (1, 1, (2,))]
    assert sorted(sub_j.poll().elements()) == [(1, 1, (1, 7)), (1, 1, (2, 8))]
    d.heartbeat("R", 3)
    d.heartbeat("S", 3)
    d.run()
    assert sorted(sub.poll().elements()) == [(2, -1, (1,)), (2, 1, (5,))]
    assert sorted(sub_j.poll().elements()) == [(2, -1, (1, 7))]


def test_memory_shares_are_whole_bytes():
    """Three queries share one window: each is attributed a third of it, rounded to whole bytes."""
    d = Dsms()
    d.execute(DDL)
    hs = [d.register_query(f"select * from S [Range 10] where A = {k}") for k in range(3)]
    d.push("S", [(1, 0), (2, 0), (1, 1), (0, 7)], ts=[1, 1, 2, 2])
    d.heartbeat("S", 3)
    d.run()
    shares = d.attribution()
    assert all(type(shares[h.id]["memory_bytes"]) is int and shares[h.id]["memory_bytes"] > 0 for h in hs)
    for h in hs:
        assert type(d.control_table(f"query:{h.id}")["counters"]["memory_bytes"]) is int


def test_demo_engine_load_is_a_rate_of_the_cumulative_counter():
    """The demo's `engine_load` query turns SysStream's cumulative `accepted` counter into tuples
    per second: 10 tuples a second in, 10.0 out, however long the source has been running."""
    from cqlstream.demo_shop import QUERIES

    (cql,) = [q for name, q in QUERIES if name == "engine_load"]
    now = [1000.0]
    d = Dsms(clock=lambda: now[0])
    d.execute(DDL)
    d.register_query("select * from S")
    h = d.register_query(cql)
    sub = d.subscribe(h.id)
    for k in range(25):
        d.push("S", [(k, 0)] * 10, ts=[k] * 10)
        now[0] += 1.0
        d.tick()
        d.run()
    rate: dict[str, float | None] = {}
    for _ts, sign, (entity, per_second) in sub.poll().elements():
        if sign == 1:
            rate[entity] = per_second
    assert rate["src:S"] == pytest.approx(10.0)
