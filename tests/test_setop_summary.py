"""EXCEPT / INTERSECT with `summary` = bloom (engine/operators/setop_summary.py): at `exact` the
results equal the reference evaluator's; in bloom mode, over windows whose tuples expire (the
right side takes deletes), the except result is a sub-bag of the exact one and the intersect result
a super-bag within the left input at every instant, the results do not depend on batching, errors
do occur with a small filter and vanish with a large one, and the reported estimate of wrong rows
tracks the measured count."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cqlstream.engine import control
from cqlstream.engine.errors import KnobError
from tests.engine_harness import _start, run_reference
from tests.summary_harness import nonzero, run_with_knobs, states, sub_bag

DDL = "register stream L (a int, b int); register stream R (a int, b int);"
OPS = ["except", "except distinct", "intersect", "intersect distinct"]


def query(op: str) -> str:
    return f"select a, b from L [Range 6] {op} select a, b from R [Range 4]"


def events(n: int, values: int, seed: int) -> dict:
    """Both streams over the same small domain (so many left values have right partners), with
    repeats (bag multiplicities above 1); four arrivals per instant."""
    rng = np.random.default_rng(seed)
    out = {}
    for name in ("L", "R"):
        a = rng.integers(0, values, n)
        b = rng.integers(0, 2, n)
        out[name] = [(i // 4, (int(x), int(y))) for i, (x, y) in enumerate(zip(a, b))]
    return out


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("chunk", [1, 13, 10_000])
def test_exact_summary_equals_the_reference(op, chunk):
    inp = events(200, 12, 1)
    want = nonzero(run_reference(DDL, query(op), inp))
    got, _d, _h, table = run_with_knobs(DDL, query(op), inp, op, {"summary": "exact"}, chunk)
    assert got == want
    assert "summary_fp_rate" not in table["counters"]


@pytest.mark.parametrize("op", OPS)
def test_bloom_keeps_the_containment_bound_at_every_instant(op):
    inp = events(2000, 150, 2)
    exact, *_ = run_with_knobs(DDL, query(op), inp, op, {}, 500)
    left = run_reference(DDL, "select a, b from L [Range 6]", inp)
    got, _d, _h, table = run_with_knobs(DDL, query(op), inp, op, {"summary": "bloom", "summary_bytes": 40}, 500)
    instants = set(exact) | set(got) | set(left)
    se, sg, sl = states(exact, instants), states(got, instants), states(left, instants)
    wrong = 0
    for t in sorted(instants):
        if op.startswith("except"):
            assert sub_bag(sg[t], se[t]), t
        else:
            assert sub_bag(se[t], sg[t]), t
            assert sub_bag(sg[t], sl[t] if op == "intersect" else Counter(dict.fromkeys(sl[t], 1))), t
        wrong += sum(((sg[t] - se[t]) + (se[t] - sg[t])).values())
    assert wrong > 0  # a 40-byte filter over ~100 live right values must err: the bound is not vacuous
    assert table["counters"]["summary_wrong_kind"] == ("removed" if op.startswith("except") else "kept")
    assert table["counters"]["state_bytes"] >= 40


@pytest.mark.parametrize("op", OPS)
def test_bloom_results_do_not_depend_on_batching(op):
    inp = events(600, 60, 3)
    knobs = {"summary": "bloom", "summary_bytes": 48}
    runs = [run_with_knobs(DDL, query(op), inp, op, knobs, c)[0] for c in (1, 37, 10_000)]
    assert runs[0] == runs[1] == runs[2]


@pytest.mark.parametrize("op", OPS)
def test_a_large_filter_is_exact(op):
    inp = events(800, 60, 4)
    exact, *_ = run_with_knobs(DDL, query(op), inp, op, {}, 100)
    got, _d, _h, table = run_with_knobs(DDL, query(op), inp, op, {"summary": "bloom", "summary_bytes": 1 << 16}, 100)
    # ~60 live right values in 65536 counters: fp ≈ (1 − e^(−kn/m))^k is below 1e-20
    assert got == exact
    assert table["counters"]["summary_fp_rate"] < 1e-9


@pytest.mark.parametrize(("op", "nbytes"), [("except distinct", 8192), ("intersect distinct", 8192), ("except", 6144)])
def test_estimated_wrong_rows_track_the_measured_ones(op, nbytes):
    """At the end of the input, the reported estimate against the measured difference from the
    exact relation, within a wide tolerance: 3 sigma of a binomial count, plus a quarter of it for
    the estimate's own error (fp is read off the filter's fill; a bag value hit falsely may lose
    fewer than all its rows), plus 3 rows."""
    rng = np.random.default_rng(5)
    n = 3000
    left = [(0, (int(x), 0)) for x in rng.integers(0, 4000, n)]  # unbounded windows: final state
    right = [(0, (int(x), 0)) for x in rng.integers(0, 4000, n // 2)]
    q = f"select a, b from L [Range Unbounded] {op} select a, b from R [Range Unbounded]"
    inp = {"L": left, "R": right}
    exact, *_ = run_with_knobs(DDL, q, inp, op, {}, 10_000)
    got, _d, _h, table = run_with_knobs(DDL, q, inp, op, {"summary": "bloom", "summary_bytes": nbytes}, 10_000)
    se, sg = states(exact, [0])[0], states(got, [0])[0]
    measured = sum(((sg - se) + (se - sg)).values())
    est = table["counters"]["summary_est_wrong_rows"]
    assert measured > 10  # the filter is small enough to err
    assert abs(est - measured) <= 3 * np.sqrt(measured) + 0.25 * measured + 3, (est, measured)


def test_bloom_is_refused_for_union_and_after_data():
    d, _h, _sub = _start(DDL, "select a, b from L [Range 6] union select a, b from R [Range 4]", False)
    (eid,) = [t["id"] for t in control.tables(d) if t.get("type") == "union"]
    with pytest.raises(KnobError):
        control.set_knob(d, eid, "summary", "bloom")
    d2, _h2, _ = _start(DDL, query("except"), False)
    (eid2,) = [t["id"] for t in control.tables(d2) if t.get("type") == "except"]
    for s in ("L", "R"):
        d2.push(s, [(1, 0)], ts=[0])
        d2.heartbeat(s, 5)
    d2.run()
    assert control.table(d2, eid2)["counters"]["tuples_in"] > 0
    with pytest.raises(KnobError):
        control.set_knob(d2, eid2, "summary", "bloom")


def test_reply_and_explain_report_the_summary():
    inp = events(400, 80, 6)
    _got, d, h, _table = run_with_knobs(
        DDL, query("intersect"), inp, "intersect", {"summary": "bloom", "summary_bytes": 64}, 400
    )
    (info,) = control.table(d, f"query:{h.id}")["summaries"]
    assert info["summary"] == "bloom" and info["kind"] == "intersect" and info["wrong_kind"] == "kept"
    assert 0 < info["fp_rate"] <= 1 and info["est_wrong_rows"] >= 0
    text = h.explain()
    assert "Summaries:" in text and "counting Bloom filter of the right input, 64 B" in text
    _g, d2, h2, _t = run_with_knobs(DDL, query("intersect"), inp, "intersect", {}, 400)
    assert control.table(d2, f"query:{h2.id}")["summaries"] == [] and "Summaries:" not in h2.explain()


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 10_000),
    op=st.sampled_from(OPS),
    nbytes=st.sampled_from([8, 16, 40, 200]),
    ranges=st.tuples(st.integers(0, 6), st.integers(0, 6)),
    chunk=st.sampled_from([1, 7, 1000]),
)
def test_property_bound_against_the_reference_at_every_instant(seed, op, nbytes, ranges, chunk):
    """Random windows, values, bytes and batching: except below, intersect above the reference
    evaluator's result (and within the left input) at every instant."""
    q = f"select a, b from L [Range {ranges[0]}] {op} select a, b from R [Range {ranges[1]}]"
    inp = events(100, 10, seed)
    want = nonzero(run_reference(DDL, q, inp))
    left = nonzero(run_reference(DDL, f"select a, b from L [Range {ranges[0]}]", inp))
    got, *_ = run_with_knobs(DDL, q, inp, op, {"summary": "bloom", "summary_bytes": nbytes}, chunk)
    instants = set(want) | set(got) | set(left)
    sw, sg, sl = states(want, instants), states(got, instants), states(left, instants)
    for t in instants:
        if op.startswith("except"):
            assert sub_bag(sg[t], sw[t]), t
        else:
            assert sub_bag(sw[t], sg[t]), t
            assert sub_bag(sg[t], sl[t] if op == "intersect" else Counter(dict.fromkeys(sl[t], 1))), t
