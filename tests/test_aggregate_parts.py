"""A grouped aggregate's batch split into parts of disjoint groups on the engine's threads
(engine/operators/aggregate_parts.py), with the size threshold lowered so small inputs take it:

- against the reference evaluator at 1, 7 and all events per push: count/sum/avg/min/max (and
  DISTINCT), Range/Rows/Partition By windows, relations with deletes, NULL and string keys, few
  and many groups, HAVING inside the aggregate, probed aggregates, group ids reused (COMPACT_MIN
  lowered);
- the raw output — every element's instant, sign, id and row, in order — equal to the one thread
  operator's, also for large pushes past the real threshold;
- a checkpoint (the engine pickled whole) taken midway continuing as the original;
- the group-range cuts themselves.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cqlstream.engine import parallel
from cqlstream.engine.dsms import Dsms
from cqlstream.engine.operators import aggregate_parts
from cqlstream.engine.operators.aggregate import AggregateOp
from cqlstream.engine.operators.aggregate_parts import part_cuts
from tests.engine_harness import _merge_events, assert_same, continue_from_checkpoint, feed

DDL = (
    "register stream S (a int, b int, f float, s varchar(4)); "
    "register relation R (a int, b int, f float, s varchar(4));"
)
SETTINGS = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])

WINDOWS = ["[Range 2]", "[Now]", "[Range Unbounded]", "[Rows 3]", "[Rows 5 Slide 2]", "[Partition By b Rows 1]"]
AGGS = [
    "count(*)",
    "count(a)",
    "sum(a)",
    "avg(a)",
    "min(a)",
    "max(a)",
    "sum(f)",
    "avg(f)",
    "max(s)",
    "min(f)",
    "count(distinct a)",
    "sum(distinct a)",
]
KEYS = [("b",), ("s",), ("a",), ("b", "s"), ("a % 3",), ("f",)]
HAVING = [None, "count(*) > 1", "sum(a) > 2", "max(a) >= 3"]

ints = st.one_of(st.integers(-3, 12), st.just(None))
keys = st.one_of(st.integers(0, 9), st.just(None))  # up to 11 groups: several parts
floats = st.one_of(st.sampled_from([0.5, 0.1, -2.25, 3.0]), st.just(None))
strs = st.one_of(st.sampled_from(["x", "y", "zz", "", "w", "v"]), st.just(None))


@pytest.fixture(params=["counted", "searched"])
def parts(request, monkeypatch):
    """Two engine threads; every batch of two or more events is split (when its groups allow);
    the rows of the other parts before a cell counted per instant, or found by binary search."""
    monkeypatch.setattr(AggregateOp, "PARALLEL_MIN", 2)
    if request.param == "searched":
        monkeypatch.setattr(aggregate_parts, "COUNT_SPAN", 0)
    parallel.set_threads(2)
    yield
    parallel.set_threads(1)


@st.composite
def stream_events(draw, n=30):
    events, t = [], draw(st.integers(0, 2))
    for _ in range(draw(st.integers(0, n))):
        t += draw(st.sampled_from([0, 0, 0, 1, 1, 2]))
        if draw(st.integers(0, 12)) == 0:
            events.append((t, None))
        else:
            events.append((t, (draw(ints), draw(keys), draw(floats), draw(strs))))
    return events


@st.composite
def relation_events(draw, n=30):
    """Bag updates: inserts, deletes of held rows, and updates (a delete and an insert at one instant)."""
    events, held, t = [], [], draw(st.integers(0, 2))
    for _ in range(draw(st.integers(0, n))):
        t += draw(st.sampled_from([0, 0, 1, 2]))
        if held and draw(st.integers(0, 2)) == 0:
            events.append((t, -1, held.pop(draw(st.integers(0, len(held) - 1)))))
            if draw(st.booleans()):
                continue
        row = (draw(ints), draw(keys), draw(floats), draw(strs))
        held.append(row)
        events.append((t, 1, row))
    return events


@st.composite
def query(draw, src):
    ks = draw(st.sampled_from(KEYS))
    aggs = draw(st.lists(st.sampled_from(AGGS), min_size=1, max_size=3, unique=True))
    having = draw(st.sampled_from(HAVING))
    q = f"select {', '.join(list(ks) + aggs)} from {src} group by {', '.join(ks)}"
    return q + (f" having {having}" if having else "")


def raw(query_text: str, inputs: dict, chunk: int | None, threads: int) -> list[tuple]:
    """Every output element (ts, sign, id, row), in order, at `threads` engine threads."""
    parallel.set_threads(threads)
    d = Dsms()
    d.execute(DDL)
    sub = d.subscribe(d.register_query(query_text).id)
    out: list = []

    def poll(_: int) -> None:
        b = sub.poll()
        if b is not None:
            out.extend(zip(b.ts.tolist(), b.sign.tolist(), b.id.tolist(), b.rows()))

    feed(d, _merge_events(inputs), chunk, after=poll)
    d.end()
    poll(0)
    return out


def same_as_one_thread(query_text: str, inputs: dict, chunks=(1, 7, None)) -> None:
    for chunk in chunks:
        two = raw(query_text, inputs, chunk, 2)
        one = raw(query_text, inputs, chunk, 1)
        parallel.set_threads(2)
        assert two == one, f"chunk={chunk}"


@settings(max_examples=120, **SETTINGS)
@given(st.data())
def test_windowed_streams_equal_reference_and_one_thread(parts, data):
    q = data.draw(query(f"S {data.draw(st.sampled_from(WINDOWS))}"))
    inputs = {"S": data.draw(stream_events())}
    assert_same(DDL, q, inputs, float_digits=9)
    same_as_one_thread(q, inputs)


@settings(max_examples=100, **SETTINGS)
@given(st.data())
def test_relations_with_deletes_equal_reference_and_one_thread(parts, data):
    q = data.draw(query("R"))
    inputs = {"R": data.draw(relation_events())}
    assert_same(DDL, q, inputs, float_digits=9)
    same_as_one_thread(q, inputs)


@settings(max_examples=40, **SETTINGS)
@given(st.data())
def test_group_ids_reused_and_compacted(parts, monkeypatch, data):
    """Groups that die and come back, with id reuse and renumbering from a few groups on."""
    monkeypatch.setattr(AggregateOp, "COMPACT_MIN", 4)
    q = data.draw(query("R"))
    inputs = {"R": data.draw(relation_events(50))}
    assert_same(DDL, q, inputs, float_digits=9)
    same_as_one_thread(q, inputs)


PROBE_DDL = (
    "register stream S (a int, b int, c int); register stream T (a int, b int);"
    "register view CT as select a, count(*) as n, sum(b) as s from T [Range 3] group by a;"
)


@settings(max_examples=40, **SETTINGS)
@given(st.data())
def test_probed_aggregate_equals_reference(parts, data):
    small = st.integers(0, 6)
    instants = [k // 3 for k in range(data.draw(st.integers(0, 40)))]  # three tuples per instant
    s = [(ts, (data.draw(small), data.draw(small), data.draw(small))) for ts in instants[::2]]
    t = [(ts, (data.draw(small), data.draw(small))) for ts in instants]
    assert_same(PROBE_DDL, "Rstream(select S.c, CT.n, CT.s from S [Now], CT where S.a = CT.a)", {"S": s, "T": t})


def _big_stream(n: int, groups: int, seed: int) -> tuple[list[tuple], list[int]]:
    """n rows, ten per instant: a in 0..999, b in 0..groups-1, f = a / 4, s one of 7 names or NULL."""
    r = np.random.default_rng(seed)
    a, b = r.integers(0, 1000, n).tolist(), r.integers(0, groups, n).tolist()
    rows = [(x, y, x / 4, "k%d" % (y % 7) if y % 11 else None) for x, y in zip(a, b)]
    return rows, [k // 10 for k in range(n)]


def raw_bulk(query_text: str, rows: list[tuple], ts: list[int], push: int, threads: int) -> list[tuple]:
    """`raw` for large inputs: `push` rows per push and per scheduler run."""
    parallel.set_threads(threads)
    d = Dsms()
    d.execute(DDL)
    sub = d.subscribe(d.register_query(query_text).id)
    out: list = []
    for i in range(0, len(rows), push):
        d.push("S", rows[i : i + push], ts=ts[i : i + push])
        d.run()
        b = sub.poll()
        if b is not None:
            out.extend(zip(b.ts.tolist(), b.sign.tolist(), b.id.tolist(), b.rows()))
    return out


@pytest.mark.parametrize(
    "q",
    [
        "select b, sum(a), count(a) from S [Rows 1000] group by b",
        "select b, sum(a), count(a) from S [Range 100] group by b",
        "select s, b, avg(f), min(a), max(a) from S [Range 50] group by s, b",
        "select b, count(distinct a) from S [Partition By s Rows 40] group by b having count(distinct a) > 3",
    ],
)
def test_large_pushes_past_the_threshold_equal_one_thread(q):
    """The real threshold (AggregateOp.PARALLEL_MIN): pushes of 100,000 rows over 100 groups."""
    assert AggregateOp.PARALLEL_MIN <= 100_000
    rows, ts = _big_stream(200_000, 100, 7)
    try:
        assert raw_bulk(q, rows, ts, 100_000, 2) == raw_bulk(q, rows, ts, 100_000, 1)
    finally:
        parallel.set_threads(1)


def test_a_checkpoint_continues_exactly(parts, tmp_path):
    """The engine pickled whole midway continues as the original, and as one thread would."""
    q = "select b, s, sum(a), max(f), count(*) from R group by b, s"

    def step(e: Dsms, t: int) -> None:
        r = np.random.default_rng(t)
        rows = [(int(r.integers(0, 9)), int(r.integers(0, 6)), float(r.integers(0, 4)), "xy"[t % 2]) for _ in range(6)]
        e.push("R", rows, ts=[t] * 6)
        if t > 2:
            old = np.random.default_rng(t - 3)
            gone = [
                (int(old.integers(0, 9)), int(old.integers(0, 6)), float(old.integers(0, 4)), "xy"[(t - 3) % 2])
                for _ in range(6)
            ]
            e.push("R", gone[:3], ts=[t] * 3, signs=[-1] * 3)
        e.run()

    runs = []
    for threads in (2, 1):
        parallel.set_threads(threads)
        d = Dsms()
        d.execute(DDL)
        h = d.register_query(q)
        (tmp_path / str(threads)).mkdir()
        _, a, b = continue_from_checkpoint(d, h.id, tmp_path / str(threads), step, warm=6, until=15)
        assert a == b and len(a) > 0
        runs.append(a)
    assert runs[0] == runs[1]


def test_cuts_split_events_evenly_over_group_ranges():
    gid = np.repeat(np.arange(6), [5, 1, 1, 5, 0, 4])
    assert part_cuts(gid, 6, 2) == [(0, 3), (3, 6)]
    assert part_cuts(gid, 6, 4) == [(0, 1), (1, 3), (3, 4), (4, 6)]
    assert part_cuts(np.full(9, 2), 5, 2) is None  # one group: nothing to split
    assert part_cuts(np.array([0, 1]), 2, 8) == [(0, 1), (1, 2)]
