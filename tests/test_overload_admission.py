"""Admission control at push time (engine/approx/admission.py).

- no overload: with admission on, results equal the reference evaluator's and nothing is refused
  (property test);
- forced overload: after every push the engine's queue memory (queues and what operators hold
  pending) is under its limit, the query with the larger weight keeps the larger rate, refused
  rows are counted per source, per query and engine-wide and published on SysStream, and the
  results of monotone queries are sub-bags of the exact ones;
- the decisions replayed (as a log's replay does) give the same results;
- `overload_admission off` refuses nothing.
"""

from __future__ import annotations

import random
from collections import Counter

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cqlstream.engine.approx.admission import Decision
from cqlstream.engine.approx.config import OverloadConfig
from cqlstream.engine.approx.controller import queue_bytes
from cqlstream.engine.dsms import Dsms
from tests.engine_harness import _merge_events, feed, run_reference
from tests.plan_harness import Results
from tests.strategies import stream_events

DDL = "register stream S (a int, b int); register stream T (a int, b int);"
QUERIES = [
    "select * from S where a > 1",
    "select a, Count(*) from S [Range 3] group by a",
    "Istream(select S.a, T.b from S [Rows 2], T [Range 2] where S.a = T.a)",
    "select Distinct b from T [Range 4]",
]
MONOTONE = [
    "select * from S where a > 0",
    "Rstream(select * from S [Range 2] where b > 3)",
    "Rstream(select a, b from S [Range 3] where b < 8)",
]


def _engine(limit: int, **config) -> Dsms:
    d = Dsms(clock=lambda: 0.0, overload=OverloadConfig(enabled=True, queue_memory_limit=limit, **config))
    d.execute(DDL)
    return d


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_no_overload_admission_changes_no_result(data):
    inputs = {"S": data.draw(stream_events(n=12)), "T": data.draw(stream_events(n=12))}
    d = _engine(1 << 30)
    hs = [d.register_query(q) for q in QUERIES]
    res = Results(d)
    for h in hs:
        res.watch(h.id)
    feed(d, _merge_events(inputs), 1, after=lambda n: res.poll())
    d.end()
    res.poll()
    for q, h in zip(QUERIES, hs):
        assert res.of(h.id) == run_reference(DDL, q, inputs), q
    assert d.admission.refused == 0 and d.approx is not None and not d.approx.history


def _events(n: int = 1200, seed: int = 7) -> list[tuple[int, tuple[int, int]]]:
    rnd = random.Random(seed)
    return [(i // 40, (rnd.randint(0, 3), rnd.randint(0, 9))) for i in range(n)]


def _push_all(d: Dsms, events, per_push: int = 80, run_every: int = 3, decisions=None, log=None) -> Results:
    """Push `per_push` events at a time on S, running the engine only every `run_every` pushes (so
    the queues fill); `decisions`: replay these admission decisions; `log`: record them."""
    res = Results(d)
    for h in d.queries.values():
        res.watch(h.id)
    for k, i in enumerate(range(0, len(events), per_push)):
        chunk = events[i : i + per_push]
        rows, ts = [r for _, r in chunk], [t for t, _ in chunk]
        if decisions is None:
            d.push("S", rows, ts)
        else:
            from cqlstream.engine.inputs import rows_to_batch

            inp = d.inputs["s"]
            d.push_batch("S", rows_to_batch(rows, inp.types, ts, None), decision=decisions[k], replayed=True)
        if log is not None:
            log.append(d.admission.last)
        if k % run_every == run_every - 1:
            d.run()
            res.poll()
    d.end()
    res.poll()
    return res


def _subbag(got: dict[int, Counter], want: dict[int, Counter]) -> bool:
    return all(not (c - want.get(t, Counter())) for t, c in got.items())


def _exact(query: str, events) -> dict[int, Counter]:
    return run_reference(DDL, query, {"S": events, "T": []})


def test_forced_overload_stays_under_the_limit_and_weights_decide():
    events = _events()
    limit = 9000
    d = _engine(limit)
    hs = [d.register_query(q, weight=w, share=False) for q, w in zip(MONOTONE, (1, 2, 4))]
    over = []
    orig = d.push

    def push(name, rows, ts=None, signs=None):
        n = orig(name, rows, ts, signs)
        over.append(queue_bytes(d) - limit)
        return n

    d.push = push  # type: ignore[method-assign]
    res = _push_all(d, events)
    assert over and max(over) <= 0, max(over)
    a, adm = d.approx, d.admission
    assert a is not None and adm.refused > 0
    assert d.inputs["s"].refused == adm.refused
    low = {h.id: min([c.sampling_rate for c in a.history if c.query_id == h.id], default=1.0) for h in hs}
    assert low[hs[0].id] <= low[hs[1].id] <= low[hs[2].id] and low[hs[0].id] < low[hs[2].id], low
    assert all("admission" in c.reason for c in a.history)
    for h in hs:
        assert adm.by_query[h.id] == adm.refused  # all three read S
        table = d.control_table(f"query:{h.id}")
        assert table["counters"]["refused_rows"] == adm.refused
        assert table["approximation"]["refused_rows"] == adm.refused
    assert d.control_table("engine")["counters"]["approx_refused_rows"] == adm.refused
    assert d.control_table("src:S")["counters"]["refused"] == adm.refused
    events_out = a.take_events()
    assert any(m == "refused" for _, m, _ in events_out) and any(m == "approximation" for _, m, _ in events_out)
    for q, h in zip(MONOTONE, hs):
        want, got = _exact(q, events), res.of(h.id)
        assert _subbag(got, want), q
        assert sum(sum(c.values()) for c in got.values()) < sum(sum(c.values()) for c in want.values()), q


def test_replayed_decisions_give_the_same_results():
    events = _events(900, seed=3)
    d = _engine(9000)
    hs = [d.register_query(q, weight=w, share=False) for q, w in zip(MONOTONE, (1, 2, 4))]
    log: list[Decision | None] = []
    res = _push_all(d, events, run_every=6, log=log)
    assert d.admission.refused > 0 and any(x is not None and x.cap is not None for x in log)
    # a replay: the controller frozen (it would decide from its own timing), decisions from the log
    # (through their JSON form, as the write-ahead log keeps them)
    r = _engine(9000)
    rs = [r.register_query(q, weight=w, share=False) for q, w in zip(MONOTONE, (1, 2, 4))]
    assert r.approx is not None
    r.approx.frozen = True
    again = [None if x is None else Decision.from_json(x.to_json()) for x in log]
    res2 = _push_all(r, events, run_every=6, decisions=again)
    for h, h2 in zip(hs, rs):
        assert res.of(h.id) == res2.of(h2.id)
    assert r.admission.refused == d.admission.refused
    assert r.admission.by_query == d.admission.by_query


def test_admission_off_refuses_nothing():
    events = _events(600)
    d = _engine(4 << 10)
    d.set_knob("engine", "overload_admission", "off")
    assert d.control_table("engine")["knobs"]["overload_admission"] == "off"
    h = d.register_query(MONOTONE[0])
    res = _push_all(d, events)
    assert d.admission.refused == 0 and res.of(h.id) == _exact(MONOTONE[0], events)


def test_pending_window_elements_count_as_queue_memory():
    """Elements a window holds until they enter it (its slide not closed) are input not worked off."""
    d = _engine(1 << 30)
    d.register_query("select a, Count(*) from S [Range 10 Slide 10] group by a")
    d.push("S", [(1, 1)] * 200, [1] * 200)
    d.heartbeat("S", 5)
    d.run()
    queues = sum(pn.queue.nbytes() for pn in d.plan.nodes.values())
    pending = sum(op.pending_bytes() for op in d.plan.operators)
    assert pending > 0 and queue_bytes(d) == queues + pending
    d.heartbeat("S", 11)
    d.run()
    assert sum(op.pending_bytes() for op in d.plan.operators) == 0


def test_a_disordered_push_is_rejected_whole_even_when_rows_are_refused():
    import pytest

    from cqlstream.engine.errors import InputError

    d = _engine(2000)
    d.register_query(MONOTONE[1])
    d.push("S", [(1, 1)] * 40, list(range(1, 41)))
    refused = d.admission.refused
    with pytest.raises(InputError, match="smaller than the previous one"):
        d.push("S", [(1, 1)] * 60, list(range(50, 109)) + [3])
    assert d.admission.refused == refused and d.inputs["s"].max_ts == 40
