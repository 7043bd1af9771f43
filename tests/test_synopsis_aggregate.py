"""The synopsis aggregate (engine/bounded_aggregate.py, engine/operators/synopsis_aggregate.py): a
COUNT / SUM / AVG / MAX / MIN over a join of streams read whole that the characterization judges
bounded (Theorem 8.6, §8.2) runs on partial aggregates per bucket; its relation (retractions and
updates included) equals the reference evaluator's at push sizes 1, 5 and all, NULL arguments
too; its state stops growing on long inputs, within the verdict's bound; other aggregates keep
the ordinary plan."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cqlstream.cli import main
from cqlstream.engine.dsms import Dsms
from cqlstream.engine.errors import KnobError
from cqlstream.engine.operators.synopsis_aggregate import SynopsisAggregateOp
from cqlstream.engine.synopsis_plan import SynopsisAggregatePlan, synopsis_node
from cqlstream.server import checkpoint
from tests.engine_harness import assert_same
from tests.test_bounded_synopsis import ARITY, DDL, _generated

BOUNDED_AGGREGATES = [
    # Example 8.7: SUM of the unbounded S.B per (A, C) group, pushed below the join
    "select S.A, T.D, sum(S.B) from S, T where S.A < 20 and T.D < 20 and S.A > 10 and T.D > 10 group by S.A, T.D",
    # an equality join on bounded attributes; every aggregate of unbounded attributes of both streams
    "select S.A, count(*), sum(T.E), avg(T.E), max(T.E), min(S.B), count(S.C) from S, T "
    "where S.A = T.D and S.A > 10 and T.D < 20 group by S.A",
    # Q7's join, a scalar aggregate: buckets cut at 10..20
    "select count(*), sum(S.C), max(S.C) from S, T where S.B < T.D and T.D > 10 and S.B < 20 and S.A = 10",
    # three streams, MAX / MIN only (no inequality join left to summarize by an extreme)
    "select max(S.C), min(S.C), count(S.C) from S, T, V where S.A = T.D and T.D = V.F and S.A > 9 and V.F < 13",
    # grouped on the bounded T.E, an inequality join the constants make redundant
    "select T.E, count(*), avg(S.A) from S, T where S.B < T.D and S.B < 12 and T.D > 14 and T.D < 17 "
    "and T.E > 0 and T.E < 5 group by T.E",
    # under Istream, and a self-join
    "select istream(count(*), sum(S.B)) from S, T where S.A = T.D and S.A > 10 and S.A < 13",
    "select count(*), max(X.C) from S, S as X where S.A = X.A and S.A > 10 and S.A < 13",
]


def _stream(name: str):
    value = st.one_of(st.integers(5, 25), st.sampled_from([9, 10, 11, 12, 19, 20]), st.just(None))
    row = st.tuples(*[value] * ARITY[name])
    return st.lists(st.tuples(st.integers(0, 6), row), max_size=10).map(lambda evs: sorted(evs, key=lambda e: e[0]))


@pytest.mark.parametrize("query", BOUNDED_AGGREGATES)
@settings(max_examples=10, deadline=None)
@given(s=_stream("S"), t=_stream("T"), v=_stream("V"))
def test_the_synopsis_aggregate_equals_the_reference(query, s, t, v):
    assert_same(DDL, query, {"S": s, "T": t, "V": v}, chunks=(1, 5, None))


def _register(query: str, **options):
    d = Dsms(**options)
    d.execute(DDL)
    return d, d.register_query(query)


@pytest.mark.parametrize("query", BOUNDED_AGGREGATES)
def test_the_planner_runs_a_bounded_aggregate_on_synopses(query):
    d, h = _register(query)
    assert isinstance(synopsis_node(h.physical_plan), SynopsisAggregatePlan)
    assert any(isinstance(op, SynopsisAggregateOp) for op in d.plan.operators)
    assert h.memory_verdict.engine_plan.startswith("bounded: run as a synopsis aggregate")
    assert "SYNOPSIS AGGREGATE" in h.explain()
    _, off = _register(query, synopsis_joins=False)
    assert synopsis_node(off.physical_plan) is None


@pytest.mark.parametrize(
    "query",
    [
        "select S.A, count(*) from S, T where S.B = T.D group by S.A",  # unbounded
        "select max(S.B) from S, T where S.B < T.D",  # unbounded (C3; bounded ones: test_synopsis_aggregate_extremes)
        "select count(distinct S.B) from S, T where S.A = T.D and S.A = 1 and S.B > 0 and S.B < 4",  # holistic
        "select count(*) from S [rows 3], T [rows 3] where S.A = T.D",  # outside the characterization
        "select count(*) from S, T where S.A = T.D and S.A > 10 and S.A < 13 having count(*) > 2",
    ],
)
def test_other_aggregates_keep_the_ordinary_plan(query):
    _, h = _register(query)
    assert synopsis_node(h.physical_plan) is None


@pytest.mark.parametrize("query", BOUNDED_AGGREGATES[:3])
def test_the_state_stops_growing_within_the_bound(query):
    assert_state_stops_growing(query)


def assert_state_stops_growing(query: str) -> None:
    """59 instants of 300 tuples per stream after one tuple in every bucket: the synopsis
    aggregate's units stay within the verdict's bound and stop changing."""
    d, h = _register(query)
    sub = d.subscribe(h.id)
    op = next(o for o in d.plan.operators if isinstance(o, SynopsisAggregateOp))
    rng = np.random.default_rng(7)
    # first one tuple in every bucket and group (each column at every value around the constants),
    # so that later growth could only come from state that is not bounded
    for name in ("S", "T", "V"):
        grid = np.stack(np.meshgrid(*[np.arange(4, 23)] * ARITY[name], indexing="ij"), -1).reshape(-1, ARITY[name])
        d.push(name, [tuple(int(x) for x in r) for r in grid], ts=[0] * len(grid))
    units, mem = [], []
    for step in range(1, 60):
        for name in ("S", "T", "V"):
            rows = _generated(rng, 300, step, ARITY[name])
            d.push(name, [tuple(int(x) for x in r) for r in rows], ts=[step] * len(rows))
        d.run()
        sub.poll()
        units.append(op.agg.units())
        mem.append(d.control_table(f"query:{h.id}")["counters"]["memory_bytes"])
    bound = h.memory_verdict.memory_units
    assert bound is not None and max(units) <= bound, (max(units), bound)
    assert units[-1] == units[0] and mem[-1] == mem[len(mem) // 2], (units, mem)


def test_a_checkpoint_restores_the_groups(tmp_path):
    """The engine is checkpointed by pickling it whole: a copy taken midway continues exactly as
    the original (same updates of the groups, same synopsis)."""
    assert_checkpoint_continues(BOUNDED_AGGREGATES[1], tmp_path)


def assert_checkpoint_continues(query: str, tmp_path) -> None:
    """Checkpoint after 2 of 8 instants; the loaded copy and the original emit the same updates
    (retractions among them) over the other 6."""
    d, h = _register(query)
    sub = d.subscribe(h.id)
    rng = np.random.default_rng(9)

    def step(e: Dsms, t: int, rows: dict) -> None:
        for name, rs in rows.items():
            e.push(name, rs, ts=[t] * len(rs))
        e.run()

    batches = [
        {n: [tuple(int(x) for x in r) for r in _generated(rng, 60, t, ARITY[n])] for n in ("S", "T")} for t in range(8)
    ]
    for t in range(2):
        step(d, t, batches[t])
    sub.poll()
    path = checkpoint.write(tmp_path, 1, {"dsms": d}, d.catalog.functions)
    copy = checkpoint.load(path, d.catalog.functions)[1]["dsms"]
    copy_sub = copy.queries[h.id].subscriptions[0]
    for t in range(2, 8):
        step(d, t, batches[t])
        step(copy, t, batches[t])
    a, b = sub.poll().elements(), copy_sub.poll().elements()
    assert a == b and any(e[1] == -1 for e in a), a


# ---------------------------------------------------------------- the synopsis_joins knob and option


def test_the_engine_knob_sets_the_default_of_later_queries():
    d = Dsms()
    d.execute(DDL)
    before = d.register_query(BOUNDED_AGGREGATES[0])
    d.set_knob("engine", "synopsis_joins", False)
    assert d.control_table("engine")["knobs"]["synopsis_joins"] is False
    after = d.register_query(BOUNDED_AGGREGATES[0])
    assert synopsis_node(before.physical_plan) is not None and synopsis_node(after.physical_plan) is None
    assert d.control_table(f"query:{after.id}")["knobs"]["synopsis_joins"] is False
    with pytest.raises(KnobError):
        d.set_knob("engine", "synopsis_joins", "yes")


def test_the_query_knob_replans_the_query_with_the_same_results():
    """Switched off, the query runs on windows, the ordinary join and aggregate; on again, on the
    synopsis aggregate; either way its results from then on are the reference's."""
    rows = {"S": [(11, 1, 5), (12, 2, 6)], "T": [(11, 3), (12, 4), (11, 5)]}
    outs = []
    for on in (True, False):
        d, h = _register(BOUNDED_AGGREGATES[1])
        d.set_knob(f"query:{h.id}", "synopsis_joins", on)
        assert d.control_table(f"query:{h.id}")["knobs"]["synopsis_joins"] is on
        assert any(isinstance(op, SynopsisAggregateOp) for op in d.plan.operators) is on
        sub = d.subscribe(h.id)
        for name, rs in rows.items():
            d.push(name, rs, ts=[1] * len(rs))
        d.run()
        with pytest.raises(KnobError):
            d.set_knob(f"query:{h.id}", "synopsis_joins", 1)
        d.end()
        outs.append(sorted(r for _, s, r in sub.poll().elements() if s == 1))
    assert outs[0] == outs[1] and outs[0], outs


def test_cqlstream_run_takes_the_option(tmp_path):
    """`cqlstream run --synopsis-joins off` writes the same bytes as the default (on)."""
    (tmp_path / "s.dat").write_text("i,i,i,i\n1,11,5,1\n1,12,7,2\n2,11,-3,3\n3,12,9,4\n")
    (tmp_path / "t.dat").write_text("i,i,i\n1,11,1\n2,12,2\n3,11,3\n")
    (tmp_path / "run.cql").write_text(
        "table : register stream S (A integer, B integer, C integer);\nsource : s.dat\n"
        "table : register stream T (D integer, E integer);\nsource : t.dat\n"
        f"query : {BOUNDED_AGGREGATES[1]};\ndest : out.txt\n"
    )
    got = []
    for flag in ("on", "off"):
        assert (
            main(["run", str(tmp_path / "run.cql"), "--out-dir", str(tmp_path / flag), "--synopsis-joins", flag]) == 0
        )
        got.append((tmp_path / flag / "out.txt").read_text())
    assert got[0] == got[1] and got[0].count("\n") > 2, got
