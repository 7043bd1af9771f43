"""Time and input: ordering, slack, heartbeats, clocks, silence timeout, skew, end of input,
whole-push rejection, and scheduling budgets that must not change results."""

from __future__ import annotations

import pytest

from cqlstream.engine.dsms import Dsms
from cqlstream.engine.inputs import InputError
from cqlstream.engine.scheduler import RoundRobin
from tests.engine_harness import net_by_instant


def make(ddl="register stream S (a int, b int);", query="select * from S [Range 1]", **kw):
    d = Dsms(**kw)
    d.execute(ddl)
    h = d.register_query(query)
    return d, d.subscribe(h.id)


def rows(sub):
    b = sub.poll()
    return list(zip(b.ts.tolist(), b.sign.tolist(), b.rows()))


def test_out_of_order_push_is_rejected_whole_and_names_the_row():
    d, sub = make()
    d.push("S", [(1, 1)], ts=[5])
    with pytest.raises(InputError) as e:
        d.push("S", [(2, 2), (3, 3), (4, 4)], ts=[6, 7, 3])
    assert e.value.row == 2 and "3" in str(e.value)
    with pytest.raises(InputError) as e:
        d.push("S", [(2, 2)], ts=[4])
    assert "already accepted" in str(e.value)
    d.push("S", [(9, 9)], ts=[6])  # the stream keeps serving; nothing from the rejected push leaked
    d.end()
    assert [r for r in rows(sub) if r[1] > 0] == [(5, 1, (1, 1)), (6, 1, (9, 9))]


def test_wrong_width_and_type_name_row_and_field():
    d, _ = make()
    with pytest.raises(InputError) as e:
        d.push("S", [(1, 2), (1, 2, 3)], ts=[1, 1])
    assert e.value.row == 1
    with pytest.raises(InputError) as e:
        d.push("S", [(1, 2), (1, "x")], ts=[1, 1])
    assert e.value.row == 1 and e.value.field == "1"
    with pytest.raises(InputError):
        d.push("Nope", [(1, 2)], ts=[1])


def test_heartbeat_makes_instants_final():
    d, sub = make(query="select * from S")
    d.push("S", [(1, 1), (2, 2)], ts=[1, 3])
    d.run()
    assert [r[0] for r in rows(sub)] == [1]  # instant 3 may still receive tuples
    assert sub.final_through == 2
    d.heartbeat("S", 10)
    d.run()
    assert [r[0] for r in rows(sub)] == [3]
    assert sub.final_through == 9


def test_slack_reorders_within_bound_and_counts_late_tuples():
    ddl = "register stream S (a int, b int) with (slack = 2);"
    d, sub = make(ddl, "select * from S")
    d.push("S", [(1, 0), (3, 0), (2, 0)], ts=[1, 3, 2])  # 2 arrives after 3: within slack
    d.push("S", [(6, 0)], ts=[6])  # releases through 3
    d.push("S", [(0, 0)], ts=[0])  # later than the slack: dropped and counted
    d.end()
    assert [r[0] for r in rows(sub)] == [1, 2, 3, 6]
    assert d.inputs["s"].late == 1


def test_end_of_input_flushes_the_last_instant():
    d, sub = make(query="select * from S [Rows 1]")
    d.push("S", [(1, 1), (2, 2)], ts=[1, 2])
    d.run()
    assert net_by_instant(sub.poll()) == {1: {(1, 1): 1}}
    d.end()
    assert net_by_instant(sub.poll()) == {2: {(1, 1): -1, (2, 2): 1}}


class FakeClock:
    def __init__(self, t=100.0):
        self.t = t

    def __call__(self):
        return self.t


def test_system_timestamped_stream_is_stamped_and_heartbeaten_by_the_clock():
    clock = FakeClock(100.0)
    d, sub = make("register stream S (a int, b int) with (timestamp = system);", "select * from S", clock=clock)
    d.push("S", [(1, 1)])
    with pytest.raises(InputError):
        d.push("S", [(1, 1)], ts=[5])
    clock.t = 103.5
    d.tick()
    d.run()
    assert rows(sub) == [(100, 1, (1, 1))]
    assert sub.final_through == 102


def test_silence_timeout_advances_a_quiet_source_and_says_so():
    clock = FakeClock(0.0)
    d, sub = make(
        "register stream S (a int, b int); register stream T (a int, b int);",
        "select * from S [Range 5], T [Range 5] where S.a = T.a",
        clock=clock,
        silence_timeout=2.0,
    )
    d.push("S", [(1, 1)], ts=[1])
    d.push("T", [(1, 2)], ts=[1])
    clock.t = 1.0
    d.push("S", [(2, 2)], ts=[8])
    d.run()
    assert sub.poll().rows() == []  # T has not passed instant 1
    clock.t = 3.5
    d.tick()
    d.run()
    assert net_by_instant(sub.poll()) == {1: {(1, 1, 1, 2): 1}, 7: {(1, 1, 1, 2): -1}}
    assert any("'T' silent" in n for n in d.notices)


def test_skew_bound_advances_lagging_streams():
    d, sub = make(
        "register stream S (a int, b int); register stream T (a int, b int);",
        "select * from S [Now], T [Now] where S.a = T.a",
        skew=3,
    )
    d.push("S", [(1, 1)], ts=[1])
    d.push("T", [(1, 2)], ts=[1])
    d.push("S", [(5, 5)], ts=[10])  # T cannot be more than 3 behind: complete through 6
    d.run()
    assert net_by_instant(sub.poll()) == {1: {(1, 1, 1, 2): 1}, 2: {(1, 1, 1, 2): -1}}
    assert sub.final_through == 6


def test_relation_delete_of_missing_tuple_rejects_whole_push():
    d, sub = make("register relation R (a int, b int);", "select * from R")
    d.push("R", [(1, 1)], ts=[1], signs=[1])
    with pytest.raises(InputError) as e:
        d.push("R", [(2, 2), (3, 3)], ts=[2, 2], signs=[1, -1])
    assert e.value.row == 1
    d.push("R", [(1, 1)], ts=[3], signs=[-1])
    d.end()
    assert net_by_instant(sub.poll()) == {1: {(1, 1): 1}, 3: {(1, 1): -1}}


def test_static_relation_rejects_updates_after_time_starts():
    d, _ = make(
        "register stream S (a int, b int); register static relation D (a int);", "select S.a from S, D where S.a = D.a"
    )
    d.push("D", [(1,)], ts=[1], signs=[1])
    d.push("S", [(1, 1)], ts=[1])
    with pytest.raises(InputError) as e:
        d.push("D", [(2,)], ts=[4], signs=[1])
    assert "static" in str(e.value)


@pytest.mark.parametrize("budget", [1, 3, 50])
def test_work_budget_does_not_change_results(budget):
    results = []
    for sched in (RoundRobin(), RoundRobin(budget=budget)):
        d, sub = make(query="select * from S [Rows 2]", scheduler=sched)
        for t in range(1, 30):
            d.push("S", [(t % 4, t % 3)] * (t % 3 + 1), ts=[t] * (t % 3 + 1))
            if t % 5 == 0:
                d.run(max_passes=1)  # partial progress between pushes
        d.end()
        results.append(net_by_instant(sub.poll()))
    assert results[0] == results[1]


def test_a_query_nobody_reads_keeps_no_results():
    d = Dsms()
    d.execute("register stream S (a int, b int);")
    h = d.register_query("select a, count(*) from S [Rows 5] group by a")
    for t in range(1, 200):
        d.push("S", [(t % 7, t)], ts=[t])
        d.run()
    assert h.queue.batches == [] and h.queue.tuples_in > 0
