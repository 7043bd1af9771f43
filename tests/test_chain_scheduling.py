"""Chain scheduling (engine/adaptive/chain.py, engine/scheduler.py): the thesis' two toy
schedules reproduce its memory-over-time tables; the lower envelope cuts paths into the chains
the thesis names; on the engine every scheduler gives the same results, switchable at run time."""

from __future__ import annotations

import pytest

from cqlstream.engine import control
from cqlstream.engine.adaptive.chain import Stage, chain_priorities, chart, envelope, greedy_priorities, simulate
from cqlstream.engine.dsms import Dsms
from cqlstream.engine.scheduler import SCHEDULERS, Chain, paths, priorities
from tests.engine_harness import assert_same

ARRIVALS = [1.0] * 7  # n elements at each of t = 0..6 (queue sizes in units of n)
CASE1 = ([1, 1], [0.2, 0.0])  # O1 (1 unit, sel 0.2) → O2 (1 unit for its 0.2 n, sel 0)
CASE2 = ([1, 1, 1], [0.9, 1.0, 0.0])  # O1 (sel 0.9) → O2 (sel 1) → O3 (sel 0), 1 unit each
TABLES = {  # the thesis' tables: queue size at t = 0..6 and the average
    ("fifo", 1): ([1.0, 1.2, 2.0, 2.2, 3.0, 3.2, 4.0], 2.4),
    ("greedy", 1): ([1.0, 1.2, 1.4, 1.6, 1.8, 2.0, 2.2], 1.6),
    ("fifo", 2): ([1.0, 1.9, 2.9, 3.0, 3.9, 4.9, 5.0], 3.2),
    ("greedy", 2): ([1.0, 1.9, 2.8, 3.7, 4.6, 5.5, 6.4], 3.7),
}


@pytest.mark.parametrize("policy,case", sorted(TABLES))
def test_toy_schedules_reproduce_the_tables(policy, case):
    sizes, avg = TABLES[policy, case]
    got = simulate(policy, *(CASE1 if case == 1 else CASE2), ARRIVALS)
    assert got == pytest.approx(sizes)
    assert round(sum(got) / len(got), 1) == avg


@pytest.mark.parametrize("case", [1, 2])
def test_chain_is_never_worse_than_fifo_or_greedy(case):
    """Case 1: Chain runs like Greedy (O1 alone is the steepest chain); case 2: like FIFO (the
    chain {O1, O2, O3} removes n in 3 units, O1 alone 0.1 n per unit)."""
    spec = CASE1 if case == 1 else CASE2
    chain = simulate("chain", *spec, ARRIVALS)
    best = min((simulate(p, *spec, ARRIVALS) for p in ("fifo", "greedy")), key=sum)
    assert chain == pytest.approx(best)


def test_lower_envelope_chains():
    pts1 = chart([Stage(1, 0.2), Stage(5, 0.0)])  # O2 costs 5 per own input tuple: 1 unit per 0.2 n
    assert [v for p in pts1 for v in p] == pytest.approx([0, 1, 1, 0.2, 2, 0])
    assert [(i, j) for i, j, _ in envelope(pts1)] == [(0, 1), (1, 2)]
    assert chain_priorities(pts1) == pytest.approx([0.8, 0.2])
    pts2 = chart([Stage(1, 0.9), Stage(1 / 0.9, 1.0), Stage(1 / 0.9, 0.0)])
    assert [(i, j) for i, j, _ in envelope(pts2)] == [(0, 3)]
    assert chain_priorities(pts2) == pytest.approx([1 / 3] * 3)
    assert greedy_priorities(pts2) == pytest.approx([0.1, 0.0, 0.9])


def test_engine_paths_and_chain_priorities_from_counters():
    d = Dsms()
    d.execute("register stream S (a int, b int)")
    d.register_query("select a + b as c from S where a > 0")
    ops = d.plan.operators
    (path,) = paths(ops)
    assert [op.kind for op in path] == ["select", "project", "output"][: len(path)]
    # a cheap selection keeping 10%, then costly operators: the selection is a chain alone
    for op, (secs, n_in, n_out) in zip(path, [(1.0, 1000, 100), (10.0, 100, 100), (1.0, 100, 100)]):
        op.counters.seconds, op.counters.tuples_in, op.counters.tuples_out = secs, n_in, n_out
    p = priorities(ops, Chain.rule)
    assert p[id(path[0])] > p[id(path[1])] == p[id(path[-1])]


QUERIES = [
    "select a + b as c from S where a > 1 and b < 3",
    "select b, count(*) from S [Range 3] where a <> 0 group by b",
    "istream(select S.a, T.b from S [Rows 2], T [Range 2] where S.a = T.a)",
]


@pytest.mark.parametrize("name", sorted(SCHEDULERS))
@pytest.mark.parametrize("budget", [None, 2])
def test_every_scheduler_gives_the_reference_results(name, budget):
    ddl = "register stream S (a int, b int); register stream T (a int, b int);"
    inputs = {
        "S": [(k // 2, (k % 4, k % 3)) for k in range(40)],
        "T": [(k // 3, (k % 4, k % 5)) for k in range(30)],
    }
    for q in QUERIES:
        assert_same(ddl, q, inputs, chunks=(1, 7), scheduler=SCHEDULERS[name](budget))


def test_scheduler_switches_at_run_time():
    d = Dsms()
    d.execute("register stream S (a int, b int)")
    h = d.register_query("select a from S where a > 1")
    sub = d.subscribe(h.id)
    got = []
    for k, name in enumerate(["round-robin", "chain", "greedy", "fifo", "chain"]):
        control.set_knob(d, "engine", "scheduler", name)
        control.set_knob(d, "engine", "budget", 1)
        assert control.table(d, "engine")["knobs"]["scheduler"] == name
        d.push("S", [(k, 0), (k + 2, 1)], ts=[k, k])
        d.run()
        got += [r[0] for r in sub.poll().rows()]
    d.end()
    got += [r[0] for r in sub.poll().rows()]
    assert got == [2, 3, 2, 4, 3, 5, 4, 6]


@pytest.mark.parametrize("name,starves", [("chain", True), ("chain-latency", False)])
def test_latency_bound_prevents_starvation(name, starves):
    """One operator call per tick and fresh input on the high-priority path every tick: Chain
    never gets to the costly path; under a latency bound its tuples run once they are overdue."""
    sched = SCHEDULERS[name](None)
    sched.max_latency = 5
    d = Dsms(scheduler=sched, sys_stream=False)
    d.execute("register stream S (a int); register stream T (a int)")
    cheap = d.subscribe(d.register_query("select a from S where a > 8").id)
    costly = d.subscribe(d.register_query("select a * 2 + a * 3 + a * 4 + a * 5 as x from T").id)
    for t in range(3):  # warm the counters so the chains have measured costs and selectivities
        d.push("S", [(k,) for k in range(10)], ts=[t] * 10)
        d.push("T", [(1,)], ts=[t])
        d.run()
    for op in d.plan.operators:  # the S path drops 90% cheaply; the T path costs much, drops nothing
        heavy = any(q.name == "T" for q in op.inputs) or "x" in op.name
        op.counters.seconds = 1.0 if heavy else 0.001
    cheap.poll(), costly.poll()
    for t in range(3, 40):
        d.push("S", [(k,) for k in range(10)], ts=[t] * 10)
        d.push("T", [(1,)], ts=[t])
        d.run(max_passes=1)
    assert len(cheap.poll()) > 0
    assert (len(costly.poll()) == 0) is starves
