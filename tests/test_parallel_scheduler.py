"""The `parallel` scheduler (engine/scheduler.py Parallel, engine/parallel_pass.py): the reference
results at 1 and 2 engine threads, on plans of several queries sharing operators; the same raw
batches (tuple ids included) at every thread count and in any order of the ready operators; the
error of the first failing operator in plan order; and the invariants that make it safe, checked
deterministically (a test hook runs the ready operators in the worst order)."""

from __future__ import annotations

import filecmp
import pickle

import pytest
from hypothesis import HealthCheck, given, settings

from bench.linear_road import gen
from bench.linear_road.bench import DESTS, SCRIPTS
from cqlstream.cql.types import INT
from cqlstream.engine import control, parallel
from cqlstream.engine import parallel_pass as PP
from cqlstream.engine.dsms import Dsms
from cqlstream.engine.queues import Queue, lock_of
from cqlstream.engine.scheduler import Parallel, RoundRobin
from cqlstream.io import script_runner
from cqlstream.io.script_runner import run_script
from tests.engine_harness import _merge_events, assert_same, feed, run_reference
from tests.test_differential import DDL as DIFF_DDL
from tests.test_differential import query, relation_events, stream_events

DDL = "register stream S (a int, b int); register stream T (a int, b int); register relation R (a int, b int);"
INPUTS = {
    "S": [(k // 3, (k % 5, k % 3)) for k in range(60)],
    "T": [(k // 2, (k % 4, k % 7)) for k in range(50)],
    "R": [(k, 1, (k % 3, k)) for k in range(0, 12, 2)] + [(13, -1, (0, 6)), (15, 1, (1, 15))],
}
# several queries over shared windows, joins and aggregates: independent operators side by side
QUERIES = [
    "select b, count(*) from S [Range 3] group by b",
    "select b, sum(a) from S [Range 3] group by b",
    "istream(select S.a, T.b from S [Rows 4], T [Range 2] where S.a = T.a)",
    "select distinct a from T [Range 5]",
    "rstream(select S.b, R.b from S [Now], R where S.a = R.a)",
    "select a from S [Range 2] union select a from T [Range 2]",
    "select T.b, count(*) from S [Range 4], T [Range 4] where S.b = T.b group by T.b",
]


@pytest.fixture(params=[1, 2], ids=["threads1", "threads2"])
def threads(request, monkeypatch):
    monkeypatch.setattr(PP, "MIN_ROWS", 0)  # the second thread takes calls of any size
    before = parallel.threads()
    parallel.set_threads(request.param)
    yield request.param
    parallel.set_threads(before)


def last_first(ready: list[int], level: list[float]) -> int:
    """The worst order for a broken dependency: the ready operator of highest plan position."""
    return max(ready)


def run_all_queries(scheduler, chunk, pick=None, monkeypatch=None):
    """Every query of QUERIES in one engine (shared operators), `chunk` events per run: the raw
    batches each subscriber got, ids included."""
    if pick is not None:
        monkeypatch.setattr(PP, "pick", pick)
    d = Dsms(scheduler=scheduler, sys_stream=False)
    d.execute(DDL)
    subs = [d.subscribe(d.register_query(q).id) for q in QUERIES]
    out: list[list] = [[] for _ in subs]

    def poll(_=None):
        for k, s in enumerate(subs):
            b = s.poll()
            out[k].append((b.ts.tolist(), b.sign.tolist(), b.id.tolist(), b.rows()))

    feed(d, _merge_events(INPUTS), chunk, after=poll)
    d.end()
    poll()
    return out


def rows_only(raw):
    return [[(ts, sign, rows) for ts, sign, _, rows in q] for q in raw]


@pytest.mark.parametrize("chunk", [1, 7, None])
def test_each_query_equals_the_reference(threads, chunk):
    for q in QUERIES:
        assert_same(DDL, q, INPUTS, chunks=(chunk,), scheduler=Parallel())


@pytest.mark.parametrize("chunk", [1, 7, None])
def test_shared_plan_same_batches_at_every_thread_count_and_order(threads, chunk, monkeypatch):
    """Ids included: they come from per-operator leases, so neither the threads nor the order of
    the ready operators changes them; rows equal round robin's (whose ids differ)."""
    got = run_all_queries(Parallel(), chunk)
    worst = run_all_queries(Parallel(), chunk, pick=last_first, monkeypatch=monkeypatch)
    assert got == worst
    monkeypatch.undo()
    parallel.set_threads(1)
    assert got == run_all_queries(Parallel(), chunk)
    assert rows_only(got) == rows_only(run_all_queries(RoundRobin(), chunk))
    merged = _merge_events(INPUTS)
    for k, q in enumerate(QUERIES):  # and each subscriber's net result is the reference's
        want = run_reference(DDL, q, INPUTS)
        assert want and merged
        net: dict[int, dict] = {}
        for ts, sign, _, rows in got[k]:
            for t, s, r in zip(ts, sign, rows):
                c = net.setdefault(t, {})
                c[r] = c.get(r, 0) + s
        assert {t: {r: n for r, n in c.items() if n} for t, c in net.items() if any(c.values())} == {
            t: dict(c) for t, c in want.items() if c
        }, q


@pytest.mark.parametrize("budget", [None, 3])
def test_budget_and_max_passes(threads, budget):
    for q in QUERIES[:3]:
        assert_same(DDL, q, INPUTS, chunks=(7,), scheduler=Parallel(budget))


def test_every_call_follows_its_producers_calls(threads, monkeypatch):
    """In each pass an operator is called after every operator writing a queue it reads: checked
    on every call with the worst order of the ready operators (a dependency missing from the
    graph then lets the consumer run first, deterministically)."""
    monkeypatch.setattr(PP, "pick", last_first)
    called: set[int] = set()
    violations = []
    run_pass, call = PP.run_pass, PP.Pass.call

    def pass_(g, *a):
        called.clear()
        return run_pass(g, *a)

    def call_(self, i):
        op = self.g.ops[i]
        for q in PP.reads(op):
            for j, other in enumerate(self.g.ops):
                if j != i and q in PP.outputs(other) and j not in called:
                    violations.append((other.name, op.name))
        called.add(i)
        return call(self, i)

    monkeypatch.setattr(PP, "run_pass", pass_)
    monkeypatch.setattr(PP.Pass, "call", call_)
    run_all_queries(Parallel(), 7)
    assert not violations


def test_queues_are_trimmed_under_their_lock(threads, monkeypatch):
    """Readers of one queue running side by side look at its batches and drop what all of them
    passed holding the queue's lock: checked at every trim (a reader taking without the lock
    fails it at any thread count)."""
    trim = Queue.trim
    bad, trims = [], [0]

    def checked(q):
        trims[0] += 1
        if not lock_of(q).locked():
            bad.append(q.name)
        return trim(q)

    monkeypatch.setattr(Queue, "trim", checked)
    monkeypatch.setattr(PP, "pick", last_first)
    run_all_queries(Parallel(), None)
    run_all_queries(Parallel(), 7)
    assert trims[0] > 0 and not bad


def test_the_first_error_in_plan_order_surfaces_and_the_engine_goes_on(threads, monkeypatch):
    def boom(x, tag):
        if x == 3:
            raise ValueError(f"boom {tag}")
        return x

    for pick in (PP.first_ready, last_first):
        monkeypatch.setattr(PP, "pick", pick)
        seen = []
        for sched in (RoundRobin(), Parallel()):
            d = Dsms(scheduler=sched, sys_stream=False)
            d.catalog.functions.register_scalar("boom", boom, INT, min_args=2, max_args=2)
            d.execute(DDL)
            h1 = d.register_query("select boom(a, 1) from S")
            h2 = d.register_query("select boom(a, 2) from S where b >= 0")
            counts = d.subscribe(d.register_query("select b, count(*) from S [Range 2] group by b").id)
            d.push("S", [(3, 1), (4, 2), (1, 1)], ts=[1, 1, 2])
            with pytest.raises(Exception) as e:
                d.run()
            seen.append((type(e.value), str(e.value)))
            d.deregister(h2.id)  # the query whose operator failed first in plan order
            d.push("S", [(5, 1)], ts=[3])
            with pytest.raises(Exception) as e2:
                d.run()  # the other one fails on the same instant (in the parallel pass: may have already)
            seen.append((type(e2.value), str(e2.value)))
            d.deregister(h1.id)
            d.push("S", [(6, 1)], ts=[4])
            d.end()  # the engine goes on for the others
            seen.append(sorted(counts.poll().rows()))
        assert seen[:3] == seen[3:], seen
        assert "boom 2" in seen[0][1] and "boom 1" in seen[1][1]


def test_a_run_checking_limits_gives_the_same_results(threads):
    """(the pass under limits in detail: tests/test_limits_parallel.py)"""
    d = Dsms(scheduler=Parallel(), sys_stream=False, query_memory_limit=1 << 30)
    d.execute(DDL)
    sub = d.subscribe(d.register_query(QUERIES[0]).id)
    d.push("S", [(1, 2), (3, 2)], ts=[1, 1])
    d.end()
    assert sorted(sub.poll().rows()) == [(2, 2)]


def test_a_pickled_parallel_scheduler_leaves_its_graph_behind(threads):
    """The pass graph is cached by object ids, which mean nothing once unpickled (a checkpoint):
    the restored scheduler keeps its settings and builds its own graph."""
    d = Dsms(scheduler=Parallel(7), sys_stream=False)
    d.execute(DDL)
    d.subscribe(d.register_query(QUERIES[0]).id)
    d.push("S", [(1, 2), (3, 2)], ts=[1, 1])
    d.run()
    assert d.scheduler._graph is not None
    s = pickle.loads(pickle.dumps(d.scheduler))
    assert s._graph is None and s.budget == 7
    e = Dsms(scheduler=s, sys_stream=False)
    e.execute(DDL)
    sub = e.subscribe(e.register_query(QUERIES[0]).id)
    e.push("S", [(1, 2), (3, 2)], ts=[1, 1])
    e.end()
    assert sorted(sub.poll().rows()) == [(2, 2)] and s._graph is not None


def test_engine_table_names_the_scheduler_and_its_threads(threads):
    d = Dsms(scheduler=Parallel(), sys_stream=False)
    knobs = control.table(d, "engine")["knobs"]
    assert knobs["scheduler"] == "parallel"
    assert control.table(d, "engine")["counters"]["engine_threads"] == threads
    control.set_knob(d, "engine", "scheduler", "round-robin")
    assert control.table(d, "engine")["knobs"]["scheduler"] == "round-robin"


def test_linear_road_dests_byte_identical_at_1_and_2_engine_threads(tmp_path, monkeypatch):
    src = tmp_path / "in"
    src.mkdir()
    gen.write(gen.PRESETS["tiny"], src)
    script, _ = SCRIPTS["compat"]
    outs = {}
    for name, n in (("t1", 1), ("t2", 2), ("t2b", 2)):
        outs[name] = tmp_path / name
        run_script(script, out_dir=outs[name], compat=True, source_dir=src, batch_rows=2000, engine_threads=n)
    # the sequential scheduler, with the engine's two threads (for the aggregate's parts)
    monkeypatch.setattr(script_runner, "for_threads", lambda threads, budget=None: RoundRobin(budget))
    outs["rr"] = tmp_path / "rr"
    run_script(script, out_dir=outs["rr"], compat=True, source_dir=src, batch_rows=2000, engine_threads=2)
    for dest in DESTS:
        assert (outs["t1"] / dest).stat().st_size > 0, dest
        for other in ("t2", "t2b", "rr"):
            assert filecmp.cmp(outs["t1"] / dest, outs[other] / dest, shallow=False), (dest, other)


def test_operators_sharing_state_never_run_at_once():
    """Operators holding one store (the shared window store of S's Range windows) or one another
    are ordered in the pass graph: the later in plan order waits for the earlier."""
    d = Dsms(scheduler=Parallel(), sys_stream=False)
    d.execute(DDL)
    for q in QUERIES:
        d.register_query(q)
    g = PP.graph(d.plan.operators)
    pairs = 0
    objs = [{id(x) for x in PP.shared(op)} for op in g.ops]
    before: list[set[int]] = []  # every operator that must have run before each (transitively)
    for j in range(len(g.ops)):
        before.append(set(g.deps[j]).union(*(before[d] for d in g.deps[j])))
        for i in range(j):
            if objs[i] & objs[j]:
                pairs += 1
                assert i in before[j], (g.ops[i].name, g.ops[j].name)
    assert pairs > 0


def test_a_failure_of_the_pass_itself_raises_instead_of_hanging(threads, monkeypatch):
    """A bug in the pass's own bookkeeping on any thread ends the pass with its error."""
    finished = PP.Pass._finished
    calls = [0]

    def failing(self, i):
        calls[0] += 1
        if calls[0] == 3:
            raise RuntimeError("bookkeeping")
        return finished(self, i)

    monkeypatch.setattr(PP.Pass, "_finished", failing)
    monkeypatch.setattr(PP, "pick", last_first)  # the threads' loop, at one thread too
    d = Dsms(scheduler=Parallel(), sys_stream=False)
    d.execute(DDL)
    for q in QUERIES:
        d.register_query(q)
    d.push("S", [(1, 2), (3, 2)], ts=[1, 2])
    with pytest.raises(RuntimeError, match="bookkeeping"):
        d.run()


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(q=query(), s=stream_events(), t=stream_events(), r=relation_events())
def test_random_queries_on_two_threads_equal_the_reference(q, s, t, r):
    """test_differential's generated queries under the parallel scheduler on two threads (the
    second thread taking calls of any size), at 1, 7 and all events per run."""
    before, min_rows = parallel.threads(), PP.MIN_ROWS
    parallel.set_threads(2)
    PP.MIN_ROWS = 0
    try:
        assert_same(DIFF_DDL, q, {"S": s, "T": t, "R": r}, scheduler=Parallel())
    finally:
        parallel.set_threads(before)
        PP.MIN_ROWS = min_rows
