"""Per-query limits on the `parallel` scheduler (engine/parallel_pass.py, engine/limits.py): the
pass runs as a graph checked per call on a ledger (tests/test_limits_graph.py), or by levels with
the check between levels for a check of its own (the level test below), so at 1 and 2 engine
threads, and in any
order of the ready operators, the same query is suspended for the same reason after the same
results, the others' results are those of an engine without it, and nothing downstream of a call
that put a query over its limit runs before the check; a join on a worker thread still abandons
a call before allocating over the limits (`reserve`); time limits count each thread's own CPU
time (operators' `Counters.cpu`)."""

from __future__ import annotations

import filecmp
import itertools
import threading
import time
import tracemalloc
from collections.abc import Iterator

import pytest

from cqlstream.engine import parallel
from cqlstream.engine import parallel_pass as PP
from cqlstream.engine.dsms import Dsms
from cqlstream.engine.scheduler import Parallel, RoundRobin
from tests.engine_harness import _merge_events, feed
from tests.test_limits_reserve import CROSS as BIG_CROSS
from tests.test_limits_reserve import DDL as CROSS_DDL
from tests.test_limits_reserve import N as CROSS_N
from tests.test_limits_reserve import _feed as cross_feed

DDL = "register stream S (a int, b int); register stream T (a int, b int);"
FREE = [  # unlimited queries sharing windows with each other and with the limited one
    "select b, count(*) from S [Range 3] group by b",
    "select b, sum(a) from S [Range 3] group by b",
    "istream(select S.a, T.b from S [Rows 4], T [Range 2] where S.a = T.a)",
    "select distinct a from T [Range 5]",
    "select a from S [Range 2] union select a from T [Range 2]",
    "select count(*) from S [Range Unbounded]",
]
LIMITED = "select S.a, S.b, T.b from S [Range Unbounded], T [Range Unbounded] where S.a = T.a"
INPUTS = {"S": [(k // 6, (k % 3, k)) for k in range(600)], "T": [(k // 4, (k % 3, -k)) for k in range(400)]}


@pytest.fixture(params=[1, 2], ids=["threads1", "threads2"])
def threads(request, monkeypatch) -> Iterator[int]:
    monkeypatch.setattr(PP, "MIN_ROWS", 0)  # the second thread takes calls of any size
    before = parallel.threads()
    parallel.set_threads(request.param)
    yield request.param
    parallel.set_threads(before)


def last_first(ready: list[int], level: list[float]) -> int:
    return max(ready)


def workers_only(monkeypatch) -> None:
    """Every operator call of a pass on an engine worker: the calling thread only waits (at 2
    threads; at 1 the pass stays on the calling thread)."""
    loop = PP.Pass.loop

    def loop_(self, helper=False):
        if helper or parallel.threads() == 1:
            return loop(self, helper)
        with self.cv:
            while not (self.left == 0 or self.broken or self.halted):
                self.cv.wait()

    monkeypatch.setattr(PP.Pass, "loop", loop_)


def scenario(scheduler, limit: int | None, chunk: int = 7, free_only: bool = False):
    """FREE and LIMITED (its memory_limit `limit`) in one engine over INPUTS, `chunk` events per
    run: each subscriber's raw batches (ids included) and each query's (state, reason)."""
    d = Dsms(scheduler=scheduler, sys_stream=False)
    d.execute(DDL)
    hs = [d.register_query(q) for q in (FREE if free_only else [*FREE, LIMITED])]
    if not free_only:
        d.set_knob(f"query:{hs[-1].id}", "memory_limit", limit)
    subs = [d.subscribe(h.id) for h in hs]
    out: list[list] = [[] for _ in subs]

    def poll(_=None):
        for k, s in enumerate(subs):
            b = s.poll()
            out[k].append((b.ts.tolist(), b.sign.tolist(), b.id.tolist(), b.rows()))

    feed(d, _merge_events(INPUTS), chunk, after=poll)
    d.end()
    poll()
    return out, [(h.state, h.suspended) for h in hs]


def rows_only(raw):
    return [sorted((t, s, r) for ts, sign, _, rows in q for t, s, r in zip(ts, sign, rows)) for q in raw]


def count_checked_passes(monkeypatch) -> list[int]:
    """Counts (in its one element) the parallel passes run with a limit check."""
    checked = [0]
    run_pass = PP.run_pass

    def counted(g, budget, ids, level, check=None):
        checked[0] += check is not None
        return run_pass(g, budget, ids, level, check)

    monkeypatch.setattr(PP, "run_pass", counted)
    return checked


@pytest.mark.parametrize("limit", [1 << 13, 1 << 15])
def test_memory_limit_suspends_the_same_query_at_every_thread_count_and_order(threads, limit, monkeypatch):
    checked = count_checked_passes(monkeypatch)
    got, states = scenario(Parallel(), limit)
    assert checked[0] > 0  # the runs checking limits went through the pass
    assert states[-1][0] == "suspended" and states[-1][1].startswith("memory: query ")
    assert all(s == ("active", None) for s in states[:-1])
    assert sum(len(ts) for ts, _, _, _ in got[-1]) > 0, "the limited query had results before"
    monkeypatch.setattr(PP, "pick", last_first)
    assert scenario(Parallel(), limit) == (got, states)  # ids included
    monkeypatch.setattr(PP, "pick", PP.first_ready)
    parallel.set_threads(1)
    assert scenario(Parallel(), limit) == (got, states)
    # round robin (checking after each call) suspends it for the same reason, after the same
    # results; the other queries' results are those of an engine without the limited query
    rr, rr_states = scenario(RoundRobin(), limit)
    assert rr_states == states and rows_only(rr) == rows_only(got)
    alone, _ = scenario(Parallel(), None, free_only=True)
    assert rows_only(alone) == rows_only(got[:-1])


def test_no_limit_hit_same_batches_as_without_limits(threads):
    limited, states = scenario(Parallel(), 1 << 30)
    assert states[-1] == ("active", None)
    d_free, _ = scenario(Parallel(), None)  # the knob null, no engine default: nothing checks
    assert limited == d_free


def test_the_check_follows_each_level_before_the_next_starts(threads, monkeypatch):
    """Every call of the pass starts after all calls of lower levels ended and, when they did
    work, after the check that followed them; after a check that found a query over its limit,
    no call starts in that pass."""
    events: list[tuple] = []
    lock = threading.Lock()
    call = PP.Pass.call
    serials = itertools.count()

    def number(p) -> int:  # a pass's own number (ids of ended passes are reused)
        if not hasattr(p, "serial"):
            p.serial = next(serials)
        return p.serial

    def call_(self, i):
        with lock:
            if self.check is not None:  # a pass checking limits
                events.append(("start", number(self), self.g.depth[i]))
        n, err = call(self, i)
        with lock:
            if self.check is not None:
                events.append(("end", number(self), self.g.depth[i], n))
        return n, err

    monkeypatch.setattr(PP.Pass, "call", call_)
    monkeypatch.setattr(PP, "pick", last_first)
    d = Dsms(scheduler=Parallel(), sys_stream=False)
    check = d.guard.check

    def check_():
        over = check()
        with lock:
            events.append(("check", number(PP.passes[-1]) if PP.passes else None, over))
        return over

    d.guard.check = check_  # type: ignore[method-assign]
    d.execute(DDL)
    hs = [d.register_query(q) for q in [*FREE, LIMITED]]
    d.set_knob(f"query:{hs[-1].id}", "memory_limit", 1 << 14)
    feed(d, _merge_events(INPUTS), 7)
    assert hs[-1].state == "suspended"
    levels, stops = 0, 0
    for p in {e[1] for e in events if e[0] == "start"}:
        seq = [e for e in events if e[1] == p]
        for k, e in enumerate(seq):
            if e[0] != "start":
                continue
            before = seq[:k]
            assert not any(x[0] == "check" and x[2] for x in before), "a call after the check stopped the pass"
            lower = [x for x in before if x[0] == "end" and x[2] < e[2]]
            started_lower = [x for x in before if x[0] == "start" and x[2] < e[2]]
            assert len(lower) == len(started_lower), "a call started before a lower level ended"
            for level in {x[2] for x in lower if x[3]}:  # each lower level that did work
                last = max(j for j, x in enumerate(before) if x[0] == "end" and x[2] == level)
                assert any(x[0] == "check" for x in before[last:]), "no check between levels that did work"
                levels += 1
        stops += any(x[0] == "check" and x[2] for x in seq)
    assert levels > 0 and stops >= 1


def test_a_join_on_a_worker_abandons_its_call_before_allocating(threads, monkeypatch):
    """test_limits_reserve's cross product with every call on an engine worker: the worker sees
    the run's guard, so the call stops before the 110 MB result is gathered."""
    workers_only(monkeypatch)
    on: set[str] = set()
    call = PP.Pass.call
    monkeypatch.setattr(PP.Pass, "call", lambda self, i: (on.add(threading.current_thread().name), call(self, i))[1])
    d = Dsms(query_memory_limit=4 << 20, scheduler=Parallel())
    d.execute(CROSS_DDL)
    q = d.register_query(BIG_CROSS)
    d.subscribe(q.id)
    tracemalloc.start()
    try:
        cross_feed(d)
        d.run()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert q.state == "suspended" and "would hold" in q.suspended and "about to allocate" in q.suspended, q.suspended
    assert peak < 120 << 20, peak
    assert on == ({"MainThread"} if threads == 1 else {n for n in on if n.startswith("cqlstream-engine")}) and on


def test_a_join_shared_with_an_unlimited_query_goes_on(threads, monkeypatch):
    workers_only(monkeypatch)
    d = Dsms(scheduler=Parallel())
    d.execute(CROSS_DDL)
    limited, free = d.register_query(BIG_CROSS), d.register_query(BIG_CROSS)
    d.set_knob(f"query:{limited.id}", "memory_limit", 4 << 20)
    sub = d.subscribe(free.id)
    cross_feed(d)
    d.run()
    assert limited.state == "suspended" and "would hold" not in limited.suspended  # the check after the level
    assert free.state == "active" and len(sub.poll()) == CROSS_N * CROSS_N


CPU_DDL = "register stream S (A integer, B integer); register stream T (C integer, D integer)"
CPU_CROSS = "select * from S [Range Unbounded], T [Range Unbounded]"
CPU_OTHER = "select A, count(*), sum(B) from S [Range 5] group by A"


def test_cpu_limit_suspends_on_two_threads(threads, monkeypatch):
    """tests/server/test_limits' cpu case on the parallel pass, every call on a worker."""
    workers_only(monkeypatch)
    d = Dsms(query_cpu_limit=0.05, scheduler=Parallel(300))
    solo = Dsms()
    for e in (d, solo):
        e.execute(CPU_DDL)
    cross = d.register_query(CPU_CROSS)
    other, other_solo = d.register_query(CPU_OTHER), solo.register_query(CPU_OTHER)
    d.set_knob(f"query:{other.id}", "cpu_limit", 600)
    subs = [d.subscribe(other.id), solo.subscribe(other_solo.id)]
    for k in range(1, 40):
        for e in (d, solo):
            e.push("S", [(k % 5, i) for i in range(300)], [k] * 300)
            e.push("T", [(i, k) for i in range(300)], [k] * 300)
    d.run()
    solo.run()
    assert cross.state == "suspended" and cross.suspended.startswith(f"cpu: query {cross.id} took ")
    assert other.state == "active"
    got, want = subs[0].poll().elements(), subs[1].poll().elements()
    assert sorted(got) == sorted(want) and len(want) > 0


class ThreadClock:
    """A stand-in for time.thread_time: each thread's own clock, one second further at each read."""

    def __init__(self) -> None:
        self.now: dict[int, float] = {}
        self.lock = threading.Lock()

    def __call__(self) -> float:
        with self.lock:
            t = self.now.get(threading.get_ident(), 0.0) + 1.0
            self.now[threading.get_ident()] = t
            return t


def test_operator_cpu_is_the_thread_time_of_the_thread_that_ran_it(threads, monkeypatch):
    """Each call that did work adds the CPU time of its own thread (the clock is read twice per
    call: one second per call), wherever it ran; attribution splits it among the queries."""
    workers_only(monkeypatch)
    monkeypatch.setattr(time, "thread_time", ThreadClock())
    d = Dsms(scheduler=Parallel(), sys_stream=False)
    d.execute(DDL)
    hs = [d.register_query(q) for q in FREE]
    feed(d, _merge_events(INPUTS), 50)
    monkeypatch.undo()
    ops = d.plan.operators
    assert sum(op.counters.calls for op in ops) > 0
    for op in ops:
        assert op.counters.cpu == pytest.approx(op.counters.calls), op.name  # sums of clock differences
    total = sum(a["cpu_seconds"] for a in d.attribution().values())
    assert total == pytest.approx(sum(op.counters.calls for op in ops if op.counters.calls))
    assert len(hs) == len(d.attribution())


def test_workers_time_on_a_callers_tasks_counts_as_the_callers(monkeypatch):
    """parallel.run_all adds a worker's CPU time on the caller's tasks to the caller's `helped()`
    (an operator handing parts of its call over counts them), not when asked not to."""
    before = parallel.threads()
    parallel.set_threads(2)
    monkeypatch.setattr(time, "thread_time", ThreadClock())
    try:
        for count, want in ((True, 1.0), (False, 0.0)):
            h0 = parallel.helped()
            ran = _handed_over(count)
            assert ran.startswith("cqlstream-engine")
            assert parallel.helped() - h0 == pytest.approx(want)  # the box may hold earlier real times
    finally:
        parallel.set_threads(before)


def _handed_over(count_help: bool) -> str:
    """run_all of two tasks, the second surely on the worker: the name of its thread."""
    started = threading.Event()
    ran: list[str] = []

    def first() -> None:
        assert started.wait(10)  # the second task is running on the worker

    def second() -> None:
        started.set()
        ran.append(threading.current_thread().name)

    parallel.run_all([first, second], count_help=count_help)
    return ran[0]


TWO = [  # two limited cross products sharing S's and T's windows: both stop before allocating
    "select * from S [Range Unbounded], T [Range Unbounded]",
    "select * from S [Rows 100000], T [Rows 100000] where S.B >= T.D - 100000",
]


def test_two_joins_abandoned_in_one_level_alike_at_every_thread_count(threads, monkeypatch):
    """Both joins of one level reserve over their limits: both calls are abandoned (one does not
    keep the other from starting) and both queries are suspended at once, each weighed against
    the same frozen sizes: the same overruns, bytes included, at 1 and 2 threads and in either
    order of the ready operators."""

    def overruns() -> list[tuple[int, float, int]]:
        d = Dsms(query_memory_limit=4 << 20, scheduler=Parallel())
        seen: list[tuple[int, float, int]] = []
        suspend = d._suspend_over

        def recorded() -> None:
            seen.extend((o.query_id, o.held, o.allocating) for o in d.guard.over)
            suspend()

        d._suspend_over = recorded  # type: ignore[method-assign]
        d.execute(CROSS_DDL)
        hs = [d.register_query(q) for q in TWO]
        cross_feed(d)
        d.run()
        assert all(h.state == "suspended" and "would hold" in h.suspended for h in hs), [h.suspended for h in hs]
        return seen

    got = overruns()
    assert len(got) == 2 and all(a > 0 for _, _, a in got)
    monkeypatch.setattr(PP, "pick", last_first)
    assert overruns() == got
    monkeypatch.setattr(PP, "pick", PP.first_ready)
    parallel.set_threads(1)
    assert overruns() == got


def test_linear_road_under_limits_byte_identical_at_1_and_2_engine_threads(tmp_path, monkeypatch):
    """STREAM's Linear Road script (37 views and queries) with a memory limit on every query that
    none reaches: its passes run by levels with a check between them, at 2 threads the dests are
    the bytes of 1 thread's and of a run without limits."""
    from functools import partial

    from bench.linear_road import gen
    from bench.linear_road.bench import DESTS, SCRIPTS
    from cqlstream.io import script_runner
    from cqlstream.io.script_runner import run_script

    src = tmp_path / "in"
    src.mkdir()
    gen.write(gen.PRESETS["tiny"], src)
    script, _ = SCRIPTS["compat"]
    outs = {"plain": tmp_path / "plain"}
    run_script(script, out_dir=outs["plain"], compat=True, source_dir=src, batch_rows=2000, engine_threads=2)
    checked = count_checked_passes(monkeypatch)
    monkeypatch.setattr(script_runner, "Dsms", partial(Dsms, query_memory_limit=1 << 40))
    for name, n in (("t1", 1), ("t2", 2)):
        outs[name] = tmp_path / name
        run_script(script, out_dir=outs[name], compat=True, source_dir=src, batch_rows=2000, engine_threads=n)
    assert checked[0] > 0  # the 2-thread run's passes checked the limits
    for dest in DESTS:
        assert (outs["plain"] / dest).stat().st_size > 0, dest
        for other in ("t1", "t2"):
            assert filecmp.cmp(outs["plain"] / dest, outs[other] / dest, shallow=False), (dest, other)
