"""The synopsis join as a physical operator (engine/operators/synopsis_join.py): the planner runs
a registered query the characterization judges bounded (π̃ or π over several streams) with it,
results equal the reference evaluator's at several push sizes, its state stops growing on long
inputs within the verdict's bound, `synopsis_joins=False` falls back to the ordinary plan, and it
survives a checkpoint (server/checkpoint.py pickles the engine whole)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cqlstream.engine.dsms import Dsms
from cqlstream.engine.operators.synopsis_join import SynopsisJoinOp
from cqlstream.engine.synopsis_plan import SynopsisJoinPlan
from cqlstream.server import checkpoint
from tests.engine_harness import assert_same
from tests.test_bounded_synopsis import ARITY, BOUNDED_DISTINCT, BOUNDED_JOINS, DDL, _generated

QUERIES = BOUNDED_JOINS + BOUNDED_DISTINCT


def _stream(name: str):
    value = st.one_of(st.integers(5, 25), st.sampled_from([9, 10, 11, 12, 19, 20]))
    row = st.tuples(*[value] * ARITY[name])
    return st.lists(st.tuples(st.integers(0, 6), row), max_size=10).map(sorted)


@pytest.mark.parametrize("query", QUERIES)
@settings(max_examples=8, deadline=None)
@given(s=_stream("S"), t=_stream("T"), v=_stream("V"))
def test_the_operator_equals_the_reference_at_several_push_sizes(query, s, t, v):
    assert_same(DDL, query, {"S": s, "T": t, "V": v}, chunks=(1, 5, None))


def _register(query: str, **options):
    d = Dsms(**options)
    d.execute(DDL)
    h = d.register_query(query)
    return d, h


@pytest.mark.parametrize("query", QUERIES)
def test_the_planner_runs_a_bounded_join_as_a_synopsis_join(query):
    d, h = _register(query)
    assert isinstance(h.physical_plan, SynopsisJoinPlan)
    assert any(isinstance(op, SynopsisJoinOp) for op in d.plan.operators)
    v = h.memory_verdict
    assert v.bounded is True and v.engine_plan.startswith("bounded: run as a synopsis join")
    assert "SYNOPSIS JOIN" in h.explain()
    off, h_off = _register(query, synopsis_joins=False)
    assert not isinstance(h_off.physical_plan, SynopsisJoinPlan)
    assert not any(isinstance(op, SynopsisJoinOp) for op in off.plan.operators)
    assert h_off.memory_verdict.engine_plan.startswith("grows")


@pytest.mark.parametrize(
    "query",
    [
        "select S.A from S, T where S.A = T.D",  # unbounded: the ordinary join
        "select S.A from S [rows 5], T [rows 5] where S.A = T.D",  # outside the characterization
        "select S.A from S where S.A > 10",  # one stream: a filter, nothing to join
        "select S.A, 1 from S, T where S.A = T.D and S.A > 10 and T.D < 20",  # a constant in the result
    ],
)
def test_other_queries_keep_the_ordinary_plan(query):
    _, h = _register(query)
    assert not isinstance(h.physical_plan, SynopsisJoinPlan)


def _feed(d: Dsms, h, steps: int, batch: int = 300) -> list[tuple[int, int]]:
    """Long generated input whose unbounded attributes take new values all the time; after each
    step (the operator's units, the query's memory_bytes)."""
    sub = d.subscribe(h.id)
    op = next(o for o in d.plan.operators if isinstance(o, SynopsisJoinOp))
    rng = np.random.default_rng(5)
    # first, one tuple in every bucket (each column at every value from below the smallest constant
    # to above the largest), so that later growth could only come from state that is not bounded
    for name in ("S", "T", "V"):
        grid = np.stack(np.meshgrid(*[np.arange(8, 23)] * ARITY[name], indexing="ij"), -1).reshape(-1, ARITY[name])
        d.push(name, [tuple(int(x) for x in r) for r in grid], ts=[0] * len(grid))
    d.run()
    sub.poll()
    sizes = []
    for step in range(1, steps):
        for name in ("S", "T", "V"):
            rows = _generated(rng, batch, step, ARITY[name])
            d.push(name, [tuple(int(x) for x in r) for r in rows], ts=[step] * len(rows))
        d.run()
        sub.poll()
        sizes.append((op.join.units(), d.control_table(f"query:{h.id}")["counters"]["memory_bytes"]))
    return sizes


@pytest.mark.parametrize("query", QUERIES)
def test_the_operator_state_stops_growing_within_the_bound(query):
    d, h = _register(query)
    sizes = _feed(d, h, 80)
    units, mem = zip(*sizes)
    assert max(units) <= h.memory_verdict.memory_units
    if "distinct" in query:  # a bucket holds one or two representatives as they change
        assert max(units[40:]) <= max(units[:40]) and max(mem[40:]) <= max(mem[:40]), (units, mem)
    else:  # every bucket is there from the start: a first tuple and a count each
        assert units[0] == units[-1] and mem[0] == mem[-1], (units, mem)
    table = d.control_table(next(o.eid for o in d.plan.operators if isinstance(o, SynopsisJoinOp)) or "")
    assert table["synopsis"]["units"] == units[-1] and table["synopsis"]["bound_units"] == h.memory_verdict.memory_units


def test_the_ordinary_join_grows_on_the_same_input():
    d, h = _register(BOUNDED_JOINS[2], synopsis_joins=False)
    sub = d.subscribe(h.id)
    rng = np.random.default_rng(5)
    mem = []
    for step in range(30):
        for name in ("S", "T"):
            rows = _generated(rng, 100, step, ARITY[name])
            d.push(name, [tuple(int(x) for x in r) for r in rows], ts=[step] * len(rows))
        d.run()
        sub.poll()
        mem.append(d.control_table(f"query:{h.id}")["counters"]["memory_bytes"])
    assert mem[10] < mem[20] < mem[-1]


@pytest.mark.parametrize("query", [BOUNDED_JOINS[2], BOUNDED_DISTINCT[6]])
def test_a_checkpoint_restores_the_synopses(query, tmp_path):
    """The engine is checkpointed by pickling it whole: a copy taken midway continues exactly as
    the original (same results, same synopsis)."""
    d, h = _register(query)
    sub = d.subscribe(h.id)
    rng = np.random.default_rng(9)

    def step(e: Dsms, t: int, rows: dict) -> None:
        for name, rs in rows.items():
            e.push(name, rs, ts=[t] * len(rs))
        e.run()

    batches = [
        {n: [tuple(int(x) for x in r) for r in _generated(rng, 3 if t < 2 else 60, t, ARITY[n])] for n in ("S", "T")}
        for t in range(10)
    ]
    for t in range(2):
        step(d, t, batches[t])
    sub.poll()
    path = checkpoint.write(tmp_path, 1, {"dsms": d}, d.catalog.functions)
    copy = checkpoint.load(path, d.catalog.functions)[1]["dsms"]
    copy_sub = copy.queries[h.id].subscriptions[0]
    for t in range(2, 10):
        step(d, t, batches[t])
        step(copy, t, batches[t])
    a, b = sub.poll().elements(), copy_sub.poll().elements()
    assert a == b and len(a) > 0
    ops = [next(o for o in e.plan.operators if isinstance(o, SynopsisJoinOp)) for e in (d, copy)]
    assert ops[0].join.units() == ops[1].join.units()


@pytest.mark.parametrize(
    "query",
    [
        "select S.A from S, S as X where S.A = X.B and S.A > 10 and S.A < 13",  # π̃, per-value counts
        "select distinct S.B from S, S as X where S.B > X.C and X.A = 10 and S.B > 9 and S.B < 12",  # π
    ],
)
def test_a_self_join_occurrence_keeps_a_tuple_whose_null_only_another_reads(query):
    """A tuple with a NULL in a column only the other occurrence reads still joins as this one
    (the operator used to drop it for both)."""
    inputs = {"S": [(1, (11, 11, None)), (2, (10, None, 5)), (3, (11, 11, 4)), (3, (12, 11, None))]}
    assert_same(DDL, query, inputs, chunks=(1, None))
