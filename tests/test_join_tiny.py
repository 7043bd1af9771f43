"""The joins' pairs of a few probes by one probes × instances table (engine/operators/tiny_pairs.py):
the raw output (ts, sign, id, columns, order) equal element for element to the general paths'
(scan or index) at 1, 7 and all events per push, the reference evaluator's result, and the table
really used.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cqlstream.engine.operators import join as J
from cqlstream.engine.operators import stream_join as SJ
from cqlstream.engine.operators import tiny_pairs as TP
from tests import strategies
from tests.engine_harness import assert_same, engine_raw

SETTINGS = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
KEYS = {
    "int": st.one_of(st.integers(0, 4), st.just(None)),
    "float": st.one_of(st.sampled_from([0.0, -0.0, 1.5, 2.0]), st.just(None)),
    "varchar(4)": st.one_of(st.sampled_from(["x", "y", "", "xy"]), st.just(None)),
}
DDL = "register stream S (a {k}, b int); register relation R (a {k}, b int); register relation Q (a {k}, b int);"
QUERIES = [
    # the stream–relation join (StreamJoinOp)
    "select * from S [Now] as x, R as y where x.a = y.a",
    "Rstream(select x.b, y.b from S [Now] as x, R as y where x.a = y.a and x.b <> y.b)",
    "Rstream(select * from R as y, S [Now] as x where y.a = x.a and y.b = x.b)",
    "Rstream(select * from S [Now] as x, R as y where x.b > y.b)",
    # the general join (JoinOp): scan and index paths, relations with deletes, windows
    "Dstream(select x.b, y.b from S [Now] as x, R as y where x.a = y.a and x.b <> y.b)",
    "select * from R as x, Q as y where x.a = y.a",
    "select * from R as x, Q as y where x.a = y.a and x.b = y.b",
    "select * from S [Range 2] as x, R as y where x.a = y.a and x.b = y.b",
    "Istream(select x.a, y.b from R as y, S [Rows 1] as x where y.a = x.a)",
    "select * from R as x, Q as y where x.b < y.b",
    # three inputs: a probe's partners, repeated, probe the third input (their order shows)
    "select * from S [Range 3] as x, R as y, Q as z where x.a = y.a and y.b = z.b",
    "select * from Q as z, R as y, S [Rows 2] as x where z.a = y.a and y.b = x.b",
]


def _raw(ddl: str, q: str, inputs, chunk, cells: int, mp: pytest.MonkeyPatch) -> tuple[list[tuple], int]:
    """Every output element as (ts, sign, id, row), in order, with the table path allowed up to
    `cells`, and how many calls made pairs by it."""
    used = [0]

    def spy(*a, **kw):
        used[0] += 1
        return TP.tiny_pairs(*a, **kw)

    mp.setattr(TP, "TINY_CELLS", cells)
    mp.setattr(J, "tiny_pairs", spy)
    mp.setattr(SJ, "tiny_pairs", spy)
    batches, _, _ = engine_raw(ddl, q, inputs, chunk)
    mp.undo()
    out = []
    for b in batches:
        if b is None:
            continue
        for (ts, sign, row), i in zip(b.elements(), b.id.tolist()):
            out.append((ts, sign, i, tuple(repr(v) for v in row)))
    return out, used[0]


@settings(max_examples=80, **SETTINGS)
@given(kind=st.sampled_from(sorted(KEYS)), q=st.sampled_from(QUERIES), data=st.data())
def test_table_path_equals_general_paths_element_for_element(kind, q, data):
    vals = KEYS[kind]
    inputs = {
        "S": data.draw(strategies.stream_events(n=6, first=vals)),
        "R": data.draw(strategies.relation_events(n=25, first=vals)),
        "Q": data.draw(strategies.relation_events(n=8, first=vals)),
    }
    ddl = DDL.format(k=kind)
    ratio = J.SCAN_RATIO
    J.SCAN_RATIO = data.draw(st.sampled_from([0, 2, 16]))  # scans at every batch size, or indexes
    try:
        with pytest.MonkeyPatch.context() as mp:
            for chunk in (1, 7, None):
                general, none = _raw(ddl, q, inputs, chunk, -1, mp)
                table, _ = _raw(ddl, q, inputs, chunk, 1 << 30, mp)
                assert none == 0
                assert table == general, f"chunk={chunk}"
        assert_same(ddl, q, inputs, float_digits=9 if kind == "float" else None)
    finally:
        J.SCAN_RATIO = ratio


def _big_inputs(seed: int) -> dict[str, list]:
    """A relation updated every instant (inserts, deletes, duplicates, NULL keys) and a few stream
    tuples and relation rows probing it."""
    rng = np.random.default_rng(seed)
    r, live, qrows = [], [], []
    for t in range(1, 30):
        for _ in range(10):
            if live and rng.random() < 0.3:
                r.append((t, -1, live.pop(int(rng.integers(len(live))))))
            else:
                row = (int(rng.integers(0, 5)) if rng.random() < 0.9 else None, int(rng.integers(0, 3)))
                live.append(row)
                r.append((t, +1, row))
        if t % 4 == 0:
            qrows.append((t, +1, (int(rng.integers(0, 5)), 1)))
    s = [(t, (int(rng.integers(0, 5)), int(rng.integers(0, 3)))) for t in range(2, 30, 3)]
    return {"S": s, "R": r, "Q": qrows}


@pytest.mark.parametrize("q", QUERIES)
def test_table_path_taken_on_few_probes_and_agrees(q):
    """A few probes against a relation updated every instant: the table path is taken at every
    push size (but for the theta-only relational join, whose instances die in the call), with the
    general paths' output and the reference's result."""
    ddl = DDL.format(k="int")
    inputs = _big_inputs(3)
    with pytest.MonkeyPatch.context() as mp:
        for chunk in (1, 7, None):
            general, _ = _raw(ddl, q, inputs, chunk, -1, mp)
            table, used = _raw(ddl, q, inputs, chunk, TP.TINY_CELLS, mp)
            assert table == general, f"chunk={chunk}"
            assert used > 0
    assert_same(ddl, q, inputs)


def test_tiny_pairs_order_and_counts():
    """Pairs by probe (in `order` when given), then instance; key matches counted before the
    alive test; NULL (invalid) keys never match."""
    pkey = np.array([2, 1, 2], np.int64)
    pvalid = np.array([True, True, False])
    seq = np.array([5, 3, 7], np.int64)
    ikey = np.array([1, 2, 2, 1], np.int64)
    ivalid = np.array([True, True, True, False])
    lo = np.array([-1, -1, 6, 0], np.int64)
    hi = np.array([J.INF, 9, J.INF, J.INF], np.int64)
    q = TP.Pairing(pkey, pvalid, seq, ikey, ivalid, lo, hi)
    p, at, matched = TP.tiny_pairs(q)
    assert (p.tolist(), at.tolist(), matched) == ([0, 1], [1, 0], 3)
    p, at, _ = TP.tiny_pairs(q, np.array([1, 0, 2]))
    assert (p.tolist(), at.tolist()) == ([1, 0], [0, 1])
