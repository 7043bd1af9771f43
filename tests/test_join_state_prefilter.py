"""A binary join narrows a large stored relation to the rows the other input's few events can
meet (engine/operators/state_prefilter.py): results equal the reference's at every push size, the
output elements come in exactly the order of the unnarrowed join (same rows, ids, ts, signs), the
narrowing really happens, and a scan that declines on narrowed state reruns on the full state."""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cqlstream.engine.dsms import Dsms
from cqlstream.engine.operators import join as J
from cqlstream.engine.operators import state_prefilter as P
from cqlstream.engine.operators import tiny_pairs as TP
from tests import strategies
from tests.engine_harness import _merge_events, assert_same
from tests.test_join_scan import KEYS, QUERIES, ddl

SETTINGS = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
MORE = [
    "Rstream(select x.b, y.b from S [Now] as x, R as y where x.a = y.a and x.b = y.b)",  # two equi conjuncts
    "Istream(select x.b, y.b from S [Now] as x, R as y where x.a = y.a and x.b = y.b)",  # the same, general join
    "select * from R as y, S [Range 3] as x where y.a = x.a and y.b >= x.b",
]


@settings(max_examples=60, **SETTINGS)
@given(kind=st.sampled_from(sorted(KEYS)), q=st.sampled_from(QUERIES + MORE), data=st.data())
def test_narrowed_join_matches_reference(kind, q, data):
    vals = KEYS[kind]
    r = data.draw(strategies.relation_events(n=40, first=vals))
    s = data.draw(strategies.stream_events(n=5, first=vals))
    ratio = J.SCAN_RATIO
    J.SCAN_RATIO = data.draw(st.sampled_from([0, 1, 2]))  # narrowing at every batch size
    cells = TP.TINY_CELLS
    TP.TINY_CELLS = data.draw(st.sampled_from([-1, cells]))  # the scan itself, or tiny_pairs before it
    try:
        assert_same(ddl(kind), q, {"S": s, "R": r}, float_digits=9 if kind == "float" else None)
    finally:
        J.SCAN_RATIO = ratio
        TP.TINY_CELLS = cells


def _workload(seed: int, hot: bool):
    """A relation with inserts and deletes at every instant and a few stream events; `hot`: most
    relation rows and every probe have key 0, so the probes meet most instances (the scan
    declines) while the other keys are left out."""
    rng = np.random.default_rng(seed)
    r, live = [], []
    for t in range(1, 60):
        for _ in range(20):
            if live and rng.random() < 0.35:
                r.append((t, -1, live.pop(int(rng.integers(len(live))))))
            else:
                row = (0 if hot and rng.random() < 0.8 else int(rng.integers(1, 40)), int(rng.integers(0, 3)))
                live.append(row)
                r.append((t, +1, row))
    if hot:
        s = [(t, (0, k)) for t in range(2, 60) for k in range(4)]
    else:
        s = [(t, (int(rng.integers(0, 40)), 1)) for t in range(2, 60, 3)]
    return {"S": s, "R": r}


def _elements(q: str, inputs, chunk: int, narrow: bool, monkeypatch):
    """The query's output elements (ts, sign, id, row) in emission order, and its join's count of
    deletes that matched no instance."""
    joins = []
    real_process = J.JoinOp.process

    def process(self, inputs, bound):
        joins.append(self)
        return real_process(self, inputs, bound)

    monkeypatch.setattr(J.JoinOp, "process", process)
    if not narrow:
        monkeypatch.setattr(P, "should_narrow", lambda n, *a: [False] * n)
        monkeypatch.setattr(J, "should_narrow", lambda n, *a: [False] * n)
    d = Dsms()
    d.execute(ddl("int"))
    h = d.register_query(q)
    sub = d.subscribe(h.id)
    out = []
    events = _merge_events(inputs)
    for i in range(0, len(events), chunk):
        for name, ev in events[i : i + chunk]:
            if len(ev) == 3:
                d.push(name, [ev[2]], ts=[ev[0]], signs=[ev[1]])
            else:
                d.push(name, [ev[1]], ts=[ev[0]])
        d.run()
        b = sub.poll()
        out += list(zip(b.ts.tolist(), b.sign.tolist(), b.id.tolist(), b.rows()))
    d.end()
    b = sub.poll()
    out += list(zip(b.ts.tolist(), b.sign.tolist(), b.id.tolist(), b.rows()))
    monkeypatch.undo()
    return out, sum(op.counters.extra["unmatched_deletes"] for op in set(joins))


def test_same_elements_in_the_same_order(monkeypatch):
    dropped = []
    real = J.narrow_state

    def spy(*a):
        got = real(*a)
        dropped.append(got[1])
        return got

    for q in (QUERIES[0], QUERIES[1], MORE[0]):
        for chunk in (25, 200):
            inputs = _workload(3, hot=False)
            want = _elements(q, inputs, chunk, False, monkeypatch)
            monkeypatch.setattr(J, "narrow_state", spy)
            got = _elements(q, inputs, chunk, True, monkeypatch)
            assert got == want and len(want[0]) > 0  # elements and unmatched deletes
    assert max(dropped) > 0  # state rows were really left out


def test_declined_scan_reruns_on_full_state(monkeypatch):
    declined = []
    real = J.JoinOp._call

    def spy(self, state, evs, dropped):
        got = real(self, state, evs, dropped)
        declined.append(got is None)
        return got

    inputs = _workload(4, hot=True)
    ratio = J.SCAN_RATIO
    J.SCAN_RATIO = 0  # scan (and narrow) however many probes: one key makes the pairs explode
    try:
        want = _elements(QUERIES[0], inputs, 400, False, monkeypatch)
        monkeypatch.setattr(J.JoinOp, "_call", spy)
        got = _elements(QUERIES[0], inputs, 400, True, monkeypatch)
    finally:
        J.SCAN_RATIO = ratio
    assert got == want and len(want[0]) > 0
    assert any(declined) and not all(declined)
