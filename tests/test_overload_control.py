"""The overload controller (engine/approx/controller.py), driven by hand: an injected clock and
load measure replace timing, so every test is exact and fast.

- no overload: with the controller on, results equal the reference evaluator's;
- forced overload: results of monotone queries are sub-bags of the exact ones, the query with the
  larger weight keeps the larger rate, and once the load falls every rate steps back to 1.0 and the
  engine's knobs are what they were before;
- the same knob history gives the same results (the controller's decisions replayed by hand).
"""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cqlstream.engine.approx.config import OverloadConfig
from cqlstream.engine.approx.controller import Load
from cqlstream.engine.dsms import Dsms
from cqlstream.engine.errors import KnobError
from tests.engine_harness import _merge_events, feed, run_reference
from tests.plan_harness import Results
from tests.strategies import stream_events

DDL = "register stream S (a int, b int); register stream T (a int, b int);"


class Hand:
    """A clock and a load the test sets."""

    def __init__(self) -> None:
        self.t = 0.0
        self.bytes = 0

    def clock(self) -> float:
        return self.t

    def measure(self) -> Load:
        return Load(self.bytes)


def controlled(hand: Hand, **config) -> Dsms:
    """An engine whose controller sees the hand's load. Admission control measures the real queues
    at push time (tests/test_overload_admission.py): off here unless a test asks for it."""
    config.setdefault("admission", False)
    d = Dsms(clock=hand.clock, overload=OverloadConfig(enabled=True, **config))
    assert d.approx is not None
    d.approx.measure = hand.measure
    d.execute(DDL)
    return d


def rates(d: Dsms) -> dict[int, float]:
    assert d.approx is not None
    return {q: (a["sampling_rate"] if (a := d.approx.of(q)) else 1.0) for q in sorted(d.queries)}


def sampling_knobs(d: Dsms) -> list[float]:
    return [i.sampling_rate for i in d.inputs.values()] + [op.sampling_rate for op in d.plan.operators]


# ---------------------------------------------------------------- the timeline
def test_timeline_sheds_by_weight_and_restores_step_by_step():
    hand = Hand()
    d = controlled(hand, queue_memory_limit=1000, interval=1.0, settle=1, calm=2)
    qs = [d.register_query("select a, Sum(b) from S [Range 5] group by a", weight=w, share=False) for w in (1, 2, 4)]
    d.set_knob("src:T", "sampling_rate", 0.5)  # the user's own knob: kept throughout, given back at the end
    before = sampling_knobs(d)
    hand.bytes = 1100  # just over: each tick cuts a fifth (further over, it would cut to 1/pressure)
    seen = []
    for _ in range(4):
        hand.t += 1.0
        d.tick()
        r = rates(d)
        # each shedding tick cuts the kept input (the sum of the rates) by a fifth at least
        assert sum(r.values()) <= 0.8 * sum(seen[-1].values() if seen else [1.0] * len(r)) + 1e-9
        seen.append(r)
        assert r[qs[0].id] <= r[qs[1].id] <= r[qs[2].id]  # twice the weight never loses more
    assert seen[-1][qs[2].id] < 1.0 and seen[-1][qs[0].id] < seen[-1][qs[2].id]
    a = d.control_table(f"query:{qs[0].id}")["approximation"]
    assert a["sampling_rate"] == seen[-1][qs[0].id] and "queue memory 1.1 KiB > 1000 B" in a["reason"]
    assert a["since"] <= hand.t
    # a tick inside the interval does nothing
    hand.t += 0.5
    assert d.approx is not None and not d.approx.tick()
    # between recover_below and the limit: held
    hand.bytes = 800
    for _ in range(5):
        hand.t += 1.0
        d.tick()
        assert rates(d) == seen[-1]
    # load falls: precision comes back, never faster than one step per `calm` ticks, up to exact
    hand.bytes = 10
    last, ups = seen[-1], 0
    for _ in range(200):
        hand.t += 1.0
        d.tick()
        r = rates(d)
        assert all(r[q] >= last[q] for q in r)
        ups += r != last
        last = r
        if all(v == 1.0 for v in r.values()):
            break
    assert all(v == 1.0 for v in last.values()) and ups > 3
    assert sampling_knobs(d) == before
    assert d.control_table(f"query:{qs[0].id}")["approximation"] is None


def test_cpu_limit_uses_engine_seconds_per_clock_second():
    hand = Hand()
    d = controlled(hand, queue_memory_limit=None, cpu_limit=0.5, interval=1.0, settle=1)
    d.approx.measure = d.approx._measure  # the real measure, on the injected clock
    h = d.register_query("select a, b from S where a > 0", share=False)
    op = d.plan.operators[0]
    d.tick()  # first mark
    op.counters.seconds += 0.9  # the engine was busy 0.9 s of the next second
    hand.t += 1.0
    d.tick()
    assert rates(d)[h.id] < 1.0
    assert "engine cpu 0.90 s/s > 0.5 s/s" in d.control_table(f"query:{h.id}")["approximation"]["reason"]


def test_sysstream_publishes_every_change():
    hand = Hand()
    d = controlled(hand, queue_memory_limit=1000, interval=1.0, settle=1)
    h = d.register_query("select a from S where a > 0", share=False)
    watch = d.register_query("select entity, value from SysStream where metric = 'approximation'")
    sub = d.subscribe(watch.id)
    hand.bytes = 5000
    for _ in range(3):
        hand.t += 1.0
        d.tick()
        d.run()
    hand.bytes, hand.t = 800, hand.t + 1.0  # held: no change, but the last instant becomes final
    d.tick()
    d.run()
    rows = sub.poll().rows()
    assert rows and all(e == f"query:{h.id}" for e, _ in rows)
    assert [v for _, v in rows] == sorted((v for _, v in rows), reverse=True)
    assert rows[-1][1] == rates(d)[h.id]


def test_knobs():
    d = Dsms()
    assert d.control_table("engine")["knobs"]["approximation"] == "off"
    d.execute(DDL)
    assert "approximation" not in d.control_table(f"query:{d.register_query('select b from S').id}")
    h = d.register_query("select a from S")
    d.set_knob("engine", "queue_memory_limit", 2048)
    d.set_knob("engine", "approximation", "on")
    t = d.control_table("engine")
    assert t["knobs"]["approximation"] == "on" and t["knobs"]["queue_memory_limit"] == 2048
    assert d.control_table(f"query:{h.id}")["approximation"] is None
    assert d.approx is not None and d.approx.config.queue_memory_limit == 2048
    for knob, bad in [
        ("approximation", "maybe"),
        ("queue_memory_limit", -1),
        ("cpu_limit", 0),
        ("overload_policy", "x"),
    ]:
        with pytest.raises(KnobError):
            d.set_knob("engine", knob, bad)
    d.set_knob("engine", "overload_policy", "uniform")
    d.set_knob("engine", "approximation", "off")
    assert d.approx is None and "approximation" not in d.control_table(f"query:{h.id}")


def test_uniform_policy_ignores_weights():
    hand = Hand()
    d = controlled(hand, queue_memory_limit=1000, interval=1.0, settle=1, policy="uniform")
    qs = [d.register_query("select a from S where b > 0", weight=w, share=False) for w in (1, 8)]
    hand.bytes = 5000
    for _ in range(6):
        hand.t += 1.0
        d.tick()
    r = rates(d)
    assert r[qs[0].id] == r[qs[1].id] < 1.0


# ---------------------------------------------------------------- results
QUERIES = [
    "select a, Sum(b), Count(*) from S [Range 3] group by a",
    "Istream(select * from S [Range 2], T [Rows 2] where S.a = T.a)",
    "select distinct b from S [Rows 3]",
    "Rstream(select a, Max(b) from T [Now] group by a)",
]


def _feed_ticking(d: Dsms, hand: Hand, inputs, loads=None) -> Results:
    """Feed one event per push, one scheduler run and one controller tick per event (`loads[i]`:
    the load measured at tick i)."""
    res = Results(d)
    for h in d.queries.values():
        res.watch(h.id)

    def after(n: int) -> None:
        if loads is not None:
            hand.bytes = loads(n)
        hand.t += 1.0
        d.tick()
        res.poll()

    feed(d, _merge_events(inputs), 1, after=after)
    d.end()
    res.poll()
    return res


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_no_overload_changes_no_result(data):
    inputs = {"S": data.draw(stream_events(n=12)), "T": data.draw(stream_events(n=12))}
    hand = Hand()
    d = controlled(hand, queue_memory_limit=1 << 30, cpu_limit=100.0, interval=0.0, admission=True)
    d.approx.measure = d.approx._measure  # the real queue bytes; the hand clock never moves the cpu
    hs = [d.register_query(q) for q in QUERIES]
    res = _feed_ticking(d, hand, inputs)
    for q, h in zip(QUERIES, hs):
        assert res.of(h.id) == run_reference(DDL, q, inputs), q
    assert d.approx is not None and not d.approx.history


MONOTONE = [
    "select * from S where a > 0",
    "Rstream(select S.a, S.b, T.b from S [Range 3], T [Range 3] where S.a = T.a)",
    "Rstream(select * from S [Range 2] where b > 3)",  # time windows only: a Rows window of a sample is no sub-bag
]


def _inputs(n: int = 400) -> dict[str, list]:
    import random

    rnd = random.Random(7)
    return {name: [(i // 4, (rnd.randint(0, 3), rnd.randint(0, 9))) for i in range(n)] for name in ("S", "T")}


def _subbag(got: dict[int, Counter], want: dict[int, Counter]) -> bool:
    return all(not (c - want.get(t, Counter())) for t, c in got.items())


@pytest.mark.parametrize("share", [True, False])
def test_forced_overload_gives_sub_bags_and_restores(share):
    inputs = _inputs()
    hand = Hand()
    d = controlled(hand, queue_memory_limit=1, interval=0.0, settle=1, calm=1)
    hs = [d.register_query(q, weight=w, share=share) for q, w in zip(MONOTONE, (1, 2, 4))]
    half = len(_merge_events(inputs)) // 2
    res = _feed_ticking(d, hand, inputs, loads=lambda n: 10 if n < half else 0)
    shed = 0
    for q, h in zip(MONOTONE, hs):
        want, got = run_reference(DDL, q, inputs), res.of(h.id)
        assert _subbag(got, want), q
        missing = sum(sum(c.values()) for c in want.values()) - sum(sum(c.values()) for c in got.values())
        shed += missing > 0
        # restored well before the end: the last instants are exact again
        late = max(want) - 3
        assert {t: c for t, c in got.items() if t >= late} == {t: c for t, c in want.items() if t >= late}, q
    assert shed == len(MONOTONE)
    assert all(v == 1.0 for v in rates(d).values()) and all(v == 1.0 for v in sampling_knobs(d))
    assert d.approx is not None and min(c.sampling_rate for c in d.approx.history) < 0.5


def test_same_knob_history_same_results():
    """The controller's changes, replayed as plain knob settings at the same points of the input,
    give the same results: it decides between engine calls, nothing else depends on timing."""
    inputs = _inputs(200)
    events = _merge_events(inputs)
    hand = Hand()
    d = controlled(hand, queue_memory_limit=1, interval=0.0, settle=1, calm=1)
    hs = [d.register_query(q, weight=w, share=False) for q, w in zip(MONOTONE, (1, 2, 4))]
    knob_log: list[list[float]] = []
    res = Results(d)
    for h in hs:
        res.watch(h.id)

    def after(n: int) -> None:
        hand.bytes = 10 if n < len(events) // 2 else 0
        hand.t += 1.0
        d.tick()
        knob_log.append(sampling_knobs(d))
        res.poll()

    feed(d, events, 1, after=after)
    d.end()
    res.poll()

    replay = Dsms()
    replay.execute(DDL)
    rs = [replay.register_query(q, weight=w, share=False) for q, w in zip(MONOTONE, (1, 2, 4))]
    res2 = Results(replay)
    for h in rs:
        res2.watch(h.id)
    objs = list(replay.inputs.values()) + list(replay.plan.operators)

    def after2(n: int) -> None:
        for obj, v in zip(objs, knob_log[n]):
            obj.sampling_rate = v
        res2.poll()

    feed(replay, events, 1, after=after2)
    replay.end()
    res2.poll()
    assert any(v < 1.0 for row in knob_log for v in row)
    for h, h2 in zip(hs, rs):
        assert res.of(h.id) == res2.of(h2.id)


def test_far_over_the_limit_cuts_to_one_over_the_pressure_in_one_tick():
    hand = Hand()
    d = controlled(hand, queue_memory_limit=1000, interval=1.0, settle=1)
    for w in (1, 2, 4):
        d.register_query("select a from S where b > 0", weight=w, share=False)
    hand.bytes, hand.t = 5000, 1.0
    d.tick()
    kept = sum(rates(d).values())
    assert kept <= 3 / 5 + 1e-9 and kept > 3 * 0.01
