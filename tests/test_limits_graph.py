"""Query limits on the `parallel` scheduler's pass run as a graph (engine/parallel_pass.py,
engine/limits_ledger.py): the check follows every call that did work, in plan order, on the
sizes the calls before it left, so at 1 and 2 engine threads and in any order of the ready
operators the same queries are suspended, in the same order, with the same reasons, after the
same output, as round robin's check after each call suspends them."""

from __future__ import annotations

import threading

import pytest

from cqlstream.engine import parallel
from cqlstream.engine import parallel_pass as PP
from cqlstream.engine.dsms import Dsms
from cqlstream.engine.limits_ledger import Ledger
from cqlstream.engine.scheduler import Parallel, RoundRobin
from tests import test_limits_parallel as limits_parallel
from tests.engine_harness import _merge_events, feed
from tests.test_limits_reserve import CROSS as BIG_CROSS
from tests.test_limits_reserve import DDL as CROSS_DDL
from tests.test_limits_reserve import _feed as cross_feed

DDL = "register stream S (a int, b int); register stream T (a int, b int);"
# queries sharing windows, a join and an aggregate with each other: several with limits
QUERIES = [
    "select b, count(*) from S [Range 3] group by b",
    "select S.a, S.b, T.b from S [Range Unbounded], T [Range Unbounded] where S.a = T.a",
    "select b, sum(a) from S [Range 3] group by b",
    "istream(select S.a, T.b from S [Rows 4], T [Range 2] where S.a = T.a)",
    "select distinct a, b from T [Range Unbounded]",
    "select a from S [Range 2] union select a from T [Range 2]",
    "select S.a, count(*) from S [Range Unbounded], T [Range Unbounded] where S.a = T.a group by S.a",
    "select count(*) from S [Range Unbounded]",
]
INPUTS = {"S": [(k // 6, (k % 3, k)) for k in range(600)], "T": [(k // 4, (k % 5, -k)) for k in range(400)]}
# (query position, memory limit): a few queries sharing operators, limits crossed at different runs
CASES = {
    "one": {1: 1 << 14},
    "two_sharing": {1: 1 << 15, 6: 1 << 14, 4: 1 << 13},
    "all_low": {k: 1 << 12 for k in range(len(QUERIES))},
    "engine_default": {},  # the engine's query_memory_limit for all
}


threads = limits_parallel.threads  # the fixture: 1 and 2 engine threads, any call on the second
last_first = limits_parallel.last_first  # the worst order of ready operators


def scenario(scheduler, limits: dict[int, int], chunk: int = 7, default: int | None = None):
    """QUERIES with the memory `limits`, INPUTS in runs of `chunk` events: per query its output
    per run (rows sorted within a run, and the raw batches with ids), its (state, reason), and the
    order of the suspensions."""
    d = Dsms(scheduler=scheduler, sys_stream=False, query_memory_limit=default)
    d.execute(DDL)
    hs = [d.register_query(q) for q in QUERIES]
    for k, lim in limits.items():
        d.set_knob(f"query:{hs[k].id}", "memory_limit", lim)
    subs = [d.subscribe(h.id) for h in hs]
    rows: list[list] = [[] for _ in subs]
    raw: list[list] = [[] for _ in subs]

    def poll(_=None):
        for k, s in enumerate(subs):
            b = s.poll()
            rows[k].append(sorted(zip(b.ts.tolist(), b.sign.tolist(), b.rows())))
            raw[k].append((b.ts.tolist(), b.sign.tolist(), b.id.tolist(), b.rows()))

    feed(d, _merge_events(INPUTS), chunk, after=poll)
    d.end()
    poll()
    return rows, raw, [(h.state, h.suspended) for h in hs], list(d.new_suspensions)


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("chunk", [1, 7, 1000])
def test_limits_as_a_graph_suspend_as_round_robin(threads, case, chunk, monkeypatch):
    default = 1 << 13 if case == "engine_default" else None
    rows, raw, states, order = scenario(Parallel(), CASES[case], chunk, default)
    if chunk != 1000 or case != "one":
        assert any(s == "suspended" for s, _ in states), states
    # round robin (one thread, a check after each call): the same queries, order and reasons
    # (the bytes in them included), and the same output in every run
    rr_rows, _, rr_states, rr_order = scenario(RoundRobin(), CASES[case], chunk, default)
    assert (states, order) == (rr_states, rr_order)
    assert rows == rr_rows
    # any order of the ready operators, at this thread count: the same batches, ids included
    monkeypatch.setattr(PP, "pick", last_first)
    assert scenario(Parallel(), CASES[case], chunk, default) == (rows, raw, states, order)


def test_same_ids_at_one_and_two_threads(monkeypatch):
    monkeypatch.setattr(PP, "MIN_ROWS", 0)
    before = parallel.threads()
    try:
        got = []
        for n in (1, 2):
            parallel.set_threads(n)
            got.append(scenario(Parallel(), CASES["two_sharing"], 7))
        assert got[0] == got[1]
    finally:
        parallel.set_threads(before)


def test_the_ledger_reads_what_the_live_check_reads(monkeypatch):
    """On one thread in plan order the state after each call is the one the check reads: the
    ledger's figure for every limited query equals `LimitGuard.held` on the live state after every
    commit of every pass, before any query is found over (no limit is reached here)."""
    parallel.set_threads(1)
    compared = [0]
    commit = PP.Pass._commit

    def commit_(self):
        commit(self)
        led = self.ledger
        if led is not None and not led.suspended:
            for qid in led.limited:
                assert led._sum(qid) == self.guard.held(qid), (qid, self.cp)
                compared[0] += 1

    monkeypatch.setattr(PP.Pass, "_commit", commit_)
    scenario(Parallel(), {k: 1 << 40 for k in range(len(QUERIES))}, 5)
    assert compared[0] > 100


def test_calls_run_ahead_of_the_checks_and_reservations_wait_for_them(monkeypatch):
    """The pass is a graph: calls start while calls before them in plan order are not checked yet.
    A reservation decides only once every call before its own is checked (committed)."""
    monkeypatch.setattr(PP, "MIN_ROWS", 0)
    before = parallel.threads()
    parallel.set_threads(2)
    starts: list[tuple[int, int]] = []
    decided: list[tuple[int, int]] = []
    lock = threading.Lock()
    call, reserve = PP.Pass.call, PP.Pass.reserve

    def call_(self, i):
        with lock:
            if self.ledger is not None:
                starts.append((i, self.cp))
        return call(self, i)

    def reserve_(self, op, nbytes):
        try:
            return reserve(self, op, nbytes)
        finally:
            decided.append((PP._at.pos[1], self.cp))

    monkeypatch.setattr(PP.Pass, "call", call_)
    monkeypatch.setattr(PP.Pass, "reserve", reserve_)
    try:
        _, _, states, _ = scenario(Parallel(), CASES["two_sharing"], 1000)
        d = Dsms(query_memory_limit=4 << 20, scheduler=Parallel())
        d.execute(CROSS_DDL)
        d.subscribe(d.register_query(BIG_CROSS).id)
        cross_feed(d)
        d.run()
    finally:
        parallel.set_threads(before)
    assert any(s == "suspended" for s, _ in states)
    assert any(cp < i for i, cp in starts), "nothing ran ahead of the checks: not a graph"
    assert decided and all(cp == i for i, cp in decided)


def test_reserve_on_a_worker_as_a_graph(threads):
    """A cross product abandoned before its allocation (`reserve`), found as round robin finds it."""
    got = []
    for sched in (Parallel(), RoundRobin()):
        d = Dsms(query_memory_limit=4 << 20, scheduler=sched)
        d.execute(CROSS_DDL)
        q = d.register_query(BIG_CROSS)
        d.subscribe(q.id)
        cross_feed(d)
        d.run()
        got.append((q.state, q.suspended))
    assert got[0] == got[1] and "about to allocate" in got[0][1]


def test_ledger_built_per_pass_from_the_plan():
    d = Dsms(scheduler=Parallel(), sys_stream=False, query_memory_limit=1 << 30)
    d.execute(DDL)
    for q in QUERIES:
        d.register_query(q)
    led = Ledger(d.guard, d.plan.operators)
    assert set(led.limited) == set(d.queries) and led.touch and led.models
    for qid in led.limited:
        assert led._sum(qid) == d.guard.held(qid)
