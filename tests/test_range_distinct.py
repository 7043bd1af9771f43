"""DISTINCT over a Range window read from the window's stream (`Distinct.window`,
engine/operators/range_distinct.py; chosen by cql/logical/rewrites/range_distinct.py).

- against the reference evaluator (the plan without rewrites) at 1, 7 and all events per push,
  paper and compat bounds: Range 0 (Now), 1, 2 and 5 over integer, text and float columns with
  NULLs, several tuples per instant, re-arrivals within, at and after a value's expiry, gaps
  longer than the window; with a probe (under a probed aggregate, Linear Road's VolSMV shape);
- element for element, ids included, what DistinctOp over the window gives (the plan without
  the rule), at every push size, so no output byte changes;
- hand-made edges: a value arriving again one instant before, at and after its expiry, many
  values expiring at one instant, several instants per call;
- the plan (EXPLAIN, operator, a window another query reads stays for it, other windows keep
  the window), a checkpoint continuing exactly, and the state following the live values.
"""

from __future__ import annotations

import importlib

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cqlstream.engine.dsms import Dsms
from cqlstream.engine.operators.range_distinct import RangeDistinctOp
from cqlstream.engine.operators.relational import DistinctOp
from tests.engine_harness import assert_same, continue_from_checkpoint, engine_raw

DDL = (
    "register stream S (a int, b int, c int); register stream T (a int, b int); "
    "register stream U (k varchar(4), x float, n int);"
    "register view DT as select distinct * from T [Range 3];"
)
QUERIES = [
    "select distinct * from T [Range 2]",
    "select distinct * from S [Range 1]",
    "select distinct T.b, T.a from T [Now]",
    "select distinct * from T [Range 5]",
    "select distinct * from U [Range 2]",
    "select distinct * from U [Range 1] where n > 0",
    "select distinct k, n from U [Range 2]",
    "select distinct b from S [Range 3]",
    "Istream(select distinct * from S [Range 2])",
    "Dstream(select distinct * from T [Range 1])",
    # under a probed aggregate (Linear Road's VolSMV under VolSM): net changes per probe interval
    "Rstream(select S.c, X.n from S [Now], (select a, count(*) as n from DT group by a) as X where S.a = X.a)",
    "Rstream(select S.c, X.n from S [Now], "
    "(select b, count(*) as n from (select distinct * from T [Range 1]) as D group by b) as X where S.b = X.b)",
    "Rstream(select U.n, X.c from S [Now], "
    "(select k, count(*) as c from (select distinct * from U [Range 2]) as D group by k) as X, U [Now] "
    "where S.a = U.n and U.k = X.k)",
    # an aggregate over the DISTINCT's relation, read directly
    "select a, count(*) from DT group by a",
]

rule = importlib.import_module("cqlstream.cql.logical.rewrites.range_distinct")
small = st.one_of(st.integers(0, 3), st.just(None))
texts = st.sampled_from(["", "a", "b", "ab", None])
floats = st.sampled_from([0.0, -0.0, 1.5, -2.25, 1e300, None])


@st.composite
def stream_events(draw, width, values=small):
    """Several tuples per instant (duplicates likely) and gaps, some longer than the windows, so
    values come back before, at and after their expiry."""
    events, t = [], draw(st.integers(0, 2))
    for _ in range(draw(st.integers(0, 20))):
        t += draw(st.sampled_from([0, 0, 0, 1, 1, 2, 3, 4, 6]))
        events.append((t, tuple(draw(values) for _ in range(width))))
    return events


@st.composite
def u_events(draw):
    events, t = [], draw(st.integers(0, 2))
    for _ in range(draw(st.integers(0, 20))):
        t += draw(st.sampled_from([0, 0, 1, 1, 2, 3, 5]))
        events.append((t, (draw(texts), draw(floats), draw(small))))
    return events


def _inputs(s, t, u):
    return {"S": s, "T": t, "U": u}


def _fused(d: Dsms) -> bool:
    return any(isinstance(o, RangeDistinctOp) for o in d.plan.operators)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(QUERIES), stream_events(3), stream_events(2), u_events(), st.booleans())
def test_range_distinct_equals_reference(query, s, t, u, compat):
    assert_same(DDL, query, _inputs(s, t, u), compat=compat)


def _elements_with_ids(batches) -> list[tuple]:
    """Every (ts, sign, row, id) of raw output batches, in order (reprs: -0.0 is not 0.0)."""
    out = []
    for b in batches:
        if b is not None:
            for (ts, sign, row), i in zip(b.elements(), b.id.tolist()):
                out.append((ts, sign, tuple(repr(v) for v in row), i))
    return out


def _same_as_distinct_over_the_window(query: str, inputs: dict, compat: bool) -> None:
    with pytest.MonkeyPatch.context() as mp:
        for chunk in (1, 7, None):
            new, h, d = engine_raw(DDL, query, inputs, chunk, compat=compat)
            assert _fused(d), h.explain()
            mp.setattr(rule, "fused_window", lambda x: None)
            old, _, d_old = engine_raw(DDL, query, inputs, chunk, compat=compat)
            assert not _fused(d_old) and any(isinstance(o, DistinctOp) for o in d_old.plan.operators)
            mp.undo()
            assert _elements_with_ids(new) == _elements_with_ids(old), f"chunk={chunk}\n{h.explain()}"


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(QUERIES), stream_events(3), stream_events(2), u_events(), st.booleans())
def test_output_and_ids_are_the_distinct_ops(query, s, t, u, compat):
    """Element for element, ids included, in order: what DistinctOp over the window gives."""
    _same_as_distinct_over_the_window(query, _inputs(s, t, u), compat)


def _edge_events() -> list:
    """Range 3 (life 4 paper, 3 compat): value (1, 0) at 10, then again one instant before its
    paper expiry, at it, after it; ten values all at 20 (expiring at one instant), three of them
    back at the instant they expire; (2, 2) every instant for a while."""
    t = [(10, (1, 0)), (13, (1, 0)), (17, (1, 0)), (22, (1, 0))]
    t += [(20, (k, 5)) for k in range(10)] + [(20, (3, 5))]
    t += [(24, (k, 5)) for k in (0, 4, 9)] + [(23, (k, 5)) for k in (1, 2)]
    t += [(i, (2, 2)) for i in range(5, 30)]
    t += [(i, (None, None)) for i in (6, 9, 13, 14, 19)]
    return sorted(t, key=lambda e: e[0])


@pytest.mark.parametrize("compat", [False, True])
@pytest.mark.parametrize("chunk", [1, 3, 7, None])
def test_edges_of_expiry(chunk, compat):
    query = "select distinct * from T [Range 3]"
    inputs = _inputs([], _edge_events(), [])
    assert_same(DDL, query, inputs, compat=compat, chunks=(chunk,))
    _same_as_distinct_over_the_window(query, inputs, compat)


@pytest.mark.parametrize("compat", [False, True])
def test_the_expiry_instant(compat):
    """(1, 0) at 10 stays while t < 10 + life: life 4 paper ([t−3, t]), 3 compat ((t−3, t])."""
    life = 3 if compat else 4
    d = Dsms(compat=compat)
    d.execute(DDL)
    h = d.register_query("select distinct * from T [Range 3]")
    sub = d.subscribe(h.id)
    d.push("T", [(1, 0)], ts=[10])
    d.heartbeat("T", 30)
    d.run()
    assert sub.poll().elements() == [(10, 1, (1, 0)), (10 + life, -1, (1, 0))]


def test_several_instants_per_call_and_many_expiring_at_once():
    """One call holding 40 instants: 100 values at 0, half back at 2; the other half leave
    together at 0 + life, the rest at 2 + life; 200 values at 30 leave after the call."""
    events = [(0, (k, 1)) for k in range(100)] + [(2, (k, 1)) for k in range(0, 100, 2)]
    events += [(30, (k, 2)) for k in range(200)] + [(39, None)]
    for compat in (False, True):
        assert_same(DDL, "select distinct * from T [Range 2]", _inputs([], events, []), compat=compat)
        _same_as_distinct_over_the_window("select distinct * from T [Range 2]", _inputs([], events, []), compat)


def _register(query: str, compat: bool = False):
    d = Dsms(compat=compat)
    d.execute(DDL)
    return d, d.register_query(query)


def test_explain_and_operator():
    d, h = _register("select distinct * from T [Range 3]")
    text = h.explain()
    assert "DISTINCT; input read as [RANGE 3] by last-seen instants" in text
    assert "WINDOW" not in text
    op = next(o for o in d.plan.operators if isinstance(o, RangeDistinctOp))
    assert op.control_table()["type"] == "range distinct"
    assert not any(type(o).__name__ == "WindowOp" for o in d.plan.operators)


def test_a_window_read_by_another_query_stays_for_it():
    d = Dsms()
    d.execute(DDL)
    d.register_query("select distinct * from T [Range 3]")
    d.register_query("select a, count(*) from T [Range 3] group by a")
    kinds = sorted(type(o).__name__ for o in d.plan.operators)
    assert kinds.count("RangeDistinctOp") == 1 and kinds.count("WindowOp") == 1


@pytest.mark.parametrize(
    "query",
    [
        "select distinct * from T [Rows 2]",
        "select distinct * from T [Range 4 Slide 2]",
        "select distinct * from T [Range Unbounded]",
        "select distinct * from T [Partition By T.a Rows 1]",
        "select distinct a + 1 from T [Range 2]",  # (an expression between them)
    ],
)
def test_other_inputs_keep_the_distinct_op(query):
    d, h = _register(query)
    assert "last-seen" not in h.explain()
    assert not _fused(d) and any(isinstance(o, DistinctOp) for o in d.plan.operators)


def test_a_checkpoint_continues_exactly(tmp_path):
    d, h = _register("select distinct * from T [Range 3]")

    def step(e: Dsms, t: int) -> None:
        r = np.random.default_rng(t)
        e.push("T", [(int(x), 0) for x in r.integers(0, 12, 3)], ts=[t] * 3)
        e.heartbeat("S", t)
        e.heartbeat("U", t)
        e.run()

    copy, a, b = continue_from_checkpoint(d, h.id, tmp_path, step, warm=5, until=14)
    assert a == b and len(a) > 0
    ops = [next(o for o in e.plan.operators if isinstance(o, RangeDistinctOp)) for e in (d, copy)]
    assert len(ops[0].table) == len(ops[1].table) > 0


@pytest.mark.parametrize("compat", [False, True])
@pytest.mark.parametrize("text", [False, True])
def test_state_follows_the_live_values(compat, text):
    """After each instant, the map holds the values present and the FIFO no entry due; slots are
    reused, so the table does not grow with the history (integer keys and dict keys alike)."""
    d, _ = _register("select distinct * from U [Range 3]" if text else "select distinct * from T [Range 3]", compat)
    op = next(o for o in d.plan.operators if isinstance(o, RangeDistinctOp))
    life = 3 if compat else 4
    seen: list[tuple[int, tuple]] = []
    for t in range(0, 300):
        rows = [("k%d" % ((t * 7 + j) % 50), float(j), t % 3) if text else ((t * 7 + j) % 50, t % 3) for j in range(3)]
        if t % 5:
            d.push("U" if text else "T", rows, ts=[t] * 3)
            seen += [(t, r) for r in rows]
        for name in "STU":
            d.heartbeat(name, t)
        d.run()
        done = op.done_through
        if done is None:
            continue
        live = {r for ts, r in seen if ts <= done < ts + life}
        assert len(op.table) == len(live), t
        assert not len(op.fifo_at) or int(op.fifo_at[0]) > done
    assert op.table.cap <= 4 * 64  # slots reused: not one per value ever seen


@pytest.mark.parametrize("compat", [False, True])
def test_keys_repacked_then_moved_to_the_dict(compat):
    """Values that widen the packed key layout (a re-pack of the live keys) and then outgrow 62
    bits (the live values move to the dict for good) while earlier values are still present and
    leave afterwards by their FIFO entries: their slots' keys follow the map."""
    big = 1 << 40
    events = [(t, (t % 4, 1)) for t in range(0, 6)]
    events += [(6, (1000, 2)), (7, (2000, 3))]
    events += [(8, (big, -big)), (9, (-big, big)), (9, (1, 1))]
    events += [(t, (t % 3, 1)) for t in range(12, 18)] + [(25, None)]
    inputs = _inputs([], events, [])
    assert_same(DDL, "select distinct * from T [Range 3]", inputs, compat=compat)
    _same_as_distinct_over_the_window("select distinct * from T [Range 3]", inputs, compat)
    _, _, d = engine_raw(DDL, "select distinct * from T [Range 3]", inputs, None, compat=compat)
    op = next(o for o in d.plan.operators if isinstance(o, RangeDistinctOp))
    assert not op.table.packing and len(op.table) == 0  # (all gone by 25)


def _lr_like_events(seed: int, instants: int = 200, width: int = 60) -> list:
    """Linear Road's VolSMV shape: per instant a few of `width` vehicles report (minute, vehicle,
    segment) — a value arrives once or twice within half a minute and leaves a window later —
    and now and then a vehicle is back after longer than the window (a gap: several stays)."""
    r = np.random.default_rng(seed)
    events = []
    for t in range(instants):
        for v in r.choice(width, 3, replace=False).tolist():
            events.append((t, (t // 30, v, int(r.integers(0, 3)))))
    return events


def _regular_events(width: int = 12, instants: int = 150) -> list:
    """Linear Road's reports: vehicle v every 5 instants, its segment changing every 10, the
    minute every 30: a value (minute, vehicle, segment) arrives twice, 5 apart, and never again
    — calls spanning many instants give each value one `+` and one `−`."""
    return [(t, (t // 30, v, (t // 10 + v) % 3)) for t in range(instants) for v in range(width) if (t + v) % 5 == 0]


@pytest.mark.parametrize("compat", [False, True])
@pytest.mark.parametrize("seed", [1, 2])
def test_row_order_and_value_order_paths(seed, compat, monkeypatch):
    """Calls whose values each have at most a `+` and a `−` (emitted in row order, no sort) and
    calls with more (several stays of a value in one call, a stay ending at a re-arrival, or a
    `+` and `−` one probe interval nets: emitted in value order) — both met, with and without
    a probe, equal to the reference and to DistinctOp over the window at 1, 7 and all per push."""
    calls = {"rows": 0, "values": 0}
    rows, values = RangeDistinctOp._emit_rows, RangeDistinctOp._emit

    def by_rows(self, ev, *a):
        calls["rows"] += 1
        return rows(self, ev, *a)

    def by_values(self, ev, *a):
        calls["values"] += len(ev.slot) > 0
        return values(self, ev, *a)

    monkeypatch.setattr(RangeDistinctOp, "_emit_rows", by_rows)
    monkeypatch.setattr(RangeDistinctOp, "_emit", by_values)
    inputs = _inputs(_lr_like_events(seed), [], [])
    regular = _inputs(_regular_events(), [], [])
    probe = _lr_like_events(seed + 10, width=4)
    probes = [(t, (r[1] % 4, 0)) for t, r in probe if t % (30 if seed == 1 else 7) == 0]
    probed = {"S": inputs["S"], "T": probes, "U": []}
    probed_regular = {"S": regular["S"], "T": probes, "U": []}
    for query, ins in [
        ("select distinct * from S [Range 20]", inputs),
        ("select distinct * from S [Range 3]", inputs),
        ("select distinct * from S [Range 7]", regular),
        (
            "Rstream(select T.a, X.n from T [Now], "
            "(select b, count(*) as n from (select distinct * from S [Range 7]) as D group by b) as X "
            "where T.a = X.b)",
            probed_regular,
        ),
        (
            "Rstream(select T.a, X.n from T [Now], "
            "(select b, count(*) as n from (select distinct * from S [Range 20]) as D group by b) as X "
            "where T.a = X.b)",
            probed,
        ),
    ]:
        assert_same(
            "register stream S (a int, b int, c int); register stream T (a int, b int);", query, ins, compat=compat
        )
        _same_as_distinct_over_the_window_ddl(
            "register stream S (a int, b int, c int); register stream T (a int, b int);", query, ins, compat
        )
        for chunk in (1, 7, None):  # the operator's own output, element for element: as in value order
            rows_first = _range_distinct_output(query, ins, chunk, compat)
            with pytest.MonkeyPatch.context() as mp:
                mp.setattr(range_distinct_module, "_row_events", lambda *a: None)
                assert _range_distinct_output(query, ins, chunk, compat) == rows_first, chunk
    assert calls["rows"] > 0 and calls["values"] > 0, calls


range_distinct_module = importlib.import_module("cqlstream.engine.operators.range_distinct")


def _range_distinct_output(query: str, inputs: dict, chunk: int | None, compat: bool) -> list[tuple]:
    """Every element (ids included) the RangeDistinctOp emits, in order."""
    got: list = []
    process = RangeDistinctOp.process

    def recorded(self, ins, bound):
        out = process(self, ins, bound)
        got.append(out)
        return out

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(RangeDistinctOp, "process", recorded)
        engine_raw(
            "register stream S (a int, b int, c int); register stream T (a int, b int);",
            query,
            inputs,
            chunk,
            compat=compat,
        )
    return _elements_with_ids(got)


def _same_as_distinct_over_the_window_ddl(ddl: str, query: str, inputs: dict, compat: bool) -> None:
    with pytest.MonkeyPatch.context() as mp:
        for chunk in (1, 7, None):
            new, h, d = engine_raw(ddl, query, inputs, chunk, compat=compat)
            assert _fused(d), h.explain()
            mp.setattr(rule, "fused_window", lambda x: None)
            old, _, _ = engine_raw(ddl, query, inputs, chunk, compat=compat)
            mp.undo()
            assert _elements_with_ids(new) == _elements_with_ids(old), f"chunk={chunk}\n{h.explain()}"


@pytest.mark.parametrize("compat", [False, True])
def test_keys_too_wide_to_pack_with_positions(compat):
    """Values whose packed keys take 62 bits leave no room for the row positions beside them in
    one int64: the carry and the batch are then sorted by a stable argsort (the table still packs)."""
    big = 1 << 58  # (three of them: 60 bits, with the second column's 2: the layout's 62)
    events = [(t, ((t % 3) * big, t % 2)) for t in range(0, 40)] + [(t, (big, 1)) for t in range(50, 60, 3)]
    inputs = _inputs([], events, [])
    assert_same(DDL, "select distinct * from T [Range 3]", inputs, compat=compat)
    _same_as_distinct_over_the_window("select distinct * from T [Range 3]", inputs, compat)
    _, _, d = engine_raw(DDL, "select distinct * from T [Range 3]", inputs, None, compat=compat)
    op = next(o for o in d.plan.operators if isinstance(o, RangeDistinctOp))
    assert op.table.packing and sum(op.table.layout.bits) + 2 > 63


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 300), max_size=40), st.lists(st.integers(0, 300), max_size=40), st.integers(0, 1 << 40))
def test_merge_by_instant_is_the_stable_merge(d_at, i_at, shift):
    """Both sequences sorted; at one instant the first's come first (narrow spans counted per
    instant, wide ones — `shift` apart — by binary search)."""
    from cqlstream.engine.operators.range_distinct import _merge_by_instant

    d = np.sort(np.array(d_at, np.int64))
    i = np.sort(np.array(i_at, np.int64)) + shift
    to_i, to_d = _merge_by_instant(d, i)
    merged = np.empty(len(d) + len(i), np.int64)
    merged[to_i] = i
    merged[to_d] = d
    tagged = sorted([(x, 0, k) for k, x in enumerate(d.tolist())] + [(x, 1, k) for k, x in enumerate(i.tolist())])
    assert merged.tolist() == [x for x, _, _ in tagged]
    assert sorted(to_d.tolist()) == [p for p, (_, w, _) in enumerate(tagged) if w == 0]


def test_a_checkpoint_of_the_hash_map_table_loads_as_the_carry():
    """Session 17's table pickled its present values in a hash map (`imap`, per slot `pkey`):
    loading it gives the same values, sorted by key, beside the same slots."""
    from cqlstream.engine.operators.intmap import IntMap

    d, _ = _register("select distinct * from T [Range 3]")
    for t in range(10):
        d.push("T", [(t % 4, 1), (t, 2)], ts=[t, t])
        d.heartbeat("T", t)
        d.run()
    op = next(o for o in d.plan.operators if isinstance(o, RangeDistinctOp))
    table = op.table
    state = {k: v for k, v in table.__dict__.items() if k not in ("packing", "ckey", "cslot", "_runs")}
    old = IntMap()
    old.insert(table.ckey[::-1].copy(), table.cslot[::-1].copy())
    state.update(imap=old, pkey=np.zeros(table.cap, np.int64))
    loaded = type(table).__new__(type(table))
    loaded.__setstate__(state)
    assert loaded.packing and loaded.imap is None and "pkey" not in loaded.__dict__
    assert loaded.ckey.tolist() == table.ckey.tolist() and loaded.cslot.tolist() == table.cslot.tolist()
    assert len(loaded) == len(table) > 0
