"""The join's paths for few probes against many instances (a [Now] window or a sparse stream
against a large relation with updates): engine vs the reference evaluator, fed 1, 7 and all events
per push, with inserts and deletes of one value at one instant, duplicates, NULL keys, and int,
float and string keys; and a check that the paths are really taken.
"""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cqlstream.engine.operators import join as J
from cqlstream.engine.operators import tiny_pairs as TP
from tests import strategies
from tests.engine_harness import assert_same

SETTINGS = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
KEYS = {
    "int": st.one_of(st.integers(0, 4), st.just(None)),
    # (no NaN: a relation's delete names its row by value, and NaN equals no value)
    "float": st.one_of(st.sampled_from([0.0, -0.0, 1.5, 2.0]), st.just(None)),
    "varchar(4)": st.one_of(st.sampled_from(["x", "y", "", "xy"]), st.just(None)),
}


def ddl(kind: str) -> str:
    return f"register stream S (a {kind}, b int); register relation R (a {kind}, b int);"


QUERIES = [
    "select * from S [Now] as x, R as y where x.a = y.a",
    # under Rstream this is the stream–relation join; under Dstream the general join's scan runs
    "Rstream(select x.b, y.b from S [Now] as x, R as y where x.a = y.a and x.b <> y.b)",
    "Dstream(select x.b, y.b from S [Now] as x, R as y where x.a = y.a and x.b <> y.b)",
    "select * from S [Range 2] as x, R as y where x.a = y.a and x.b = y.b",
    "Istream(select x.a, y.b from R as y, S [Rows 1] as x where y.a = x.a)",
]


@settings(max_examples=60, **SETTINGS)
@given(
    kind=st.sampled_from(sorted(KEYS)),
    q=st.sampled_from(QUERIES),
    data=st.data(),
)
def test_few_probes_many_instances(kind, q, data):
    vals = KEYS[kind]
    r = data.draw(strategies.relation_events(n=30, first=vals))
    s = data.draw(strategies.stream_events(n=4, first=vals))
    ratio = J.SCAN_RATIO
    J.SCAN_RATIO = data.draw(st.sampled_from([0, 1, 2]))  # the scan path at every batch size
    cells = TP.TINY_CELLS
    TP.TINY_CELLS = data.draw(st.sampled_from([-1, cells]))  # the scan itself, or tiny_pairs before it
    try:
        assert_same(ddl(kind), q, {"S": s, "R": r}, float_digits=9 if kind == "float" else None)
    finally:
        J.SCAN_RATIO = ratio
        TP.TINY_CELLS = cells


def test_scan_path_is_taken_and_agrees(monkeypatch):
    """A large relation with updates and a few [Now] probes goes through scan_pairs, with the
    reference's result."""
    calls = []
    real = J.scan_pairs

    def spy(*a):
        got = real(*a)
        calls.append(got is not None)
        return got

    monkeypatch.setattr(J, "scan_pairs", spy)
    monkeypatch.setattr(TP, "TINY_CELLS", -1)  # (a few probes: tiny_pairs.py would pair them)
    rng = np.random.default_rng(5)
    r, live = [], []
    for t in range(1, 40):
        for _ in range(12):
            if live and rng.random() < 0.4:
                row = live.pop(int(rng.integers(len(live))))
                r.append((t, -1, row))
            else:
                row = (int(rng.integers(0, 6)) if rng.random() < 0.9 else None, int(rng.integers(0, 3)))
                live.append(row)
                r.append((t, +1, row))
    s = [(t, (int(rng.integers(0, 6)), 1)) for t in range(3, 40, 9)]
    assert_same(ddl("int"), QUERIES[0], {"S": s, "R": r}, chunks=(None,))
    assert any(calls)


def test_scan_pairs_falls_back_when_pairs_explode():
    """Many probes of one key against many instances of it: the scan declines (an index is
    cheaper)."""
    n = 5000
    key = np.zeros(n, np.int64)
    ok = np.ones(n, bool)
    lo, hi = np.full(n, -1), np.full(n, J.INF)
    assert J.scan_pairs(TP.Pairing(key[:300], ok[:300], np.arange(300), key, ok, lo, hi)) is None
    p, at = J.scan_pairs(TP.Pairing(key[:1], ok[:1], np.zeros(1, np.int64), key, ok, lo, hi))
    assert len(p) == n and at.tolist() == list(range(n))
