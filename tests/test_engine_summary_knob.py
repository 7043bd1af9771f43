"""The `summary` knob of Distinct: at exact the results equal the reference evaluator's; in bloom
mode the values dropped stay within what the Bloom-filter formula allows on seeded data, none is
ever wrong, and the control table reports the filter's state."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from cqlstream.engine import control
from cqlstream.engine.approx.precision import bloom_fp_rate
from cqlstream.engine.errors import KnobError
from tests.engine_harness import _start, net_by_instant, run_reference

DDL = "register stream S (a int, b int);"
QUERY = "select distinct a, b from S [Range Unbounded]"


def _distinct_op(d) -> str:
    (eid,) = [t["id"] for t in control.tables(d) if t.get("type") == "distinct"]
    return eid


def _run(events, knobs: dict, chunk: int):
    d, _h, sub = _start(DDL, QUERY, False)
    op = _distinct_op(d)
    for k, v in knobs.items():
        control.set_knob(d, op, k, v)
    result: dict = {}
    for i in range(0, len(events), chunk):
        part = events[i : i + chunk]
        d.push("S", [e[1] for e in part], ts=[e[0] for e in part])
        d.run()
        for t, c in net_by_instant(sub.poll()).items():
            result.setdefault(t, Counter()).update(c)
    d.end()
    for t, c in net_by_instant(sub.poll()).items():
        result.setdefault(t, Counter()).update(c)
    result = {t: +c for t, c in result.items() if +c}
    return result, control.table(d, op)


def _events(n: int, values: int, seed: int) -> list:
    rng = np.random.default_rng(seed)
    a = rng.integers(0, values, n)
    b = rng.integers(0, 3, n)
    return [(i // 4, (int(x), int(y))) for i, (x, y) in enumerate(zip(a, b))]


@pytest.mark.parametrize("chunk", [1, 9, 1000])
def test_exact_summary_equals_the_reference(chunk):
    events = _events(300, 40, 1)
    want = run_reference(DDL, QUERY, {"S": events})
    want = {t: +c for t, c in want.items() if +c}
    got, table = _run(events, {"summary": "exact"}, chunk)
    assert got == want
    assert table["knobs"]["summary"] == "exact" and "summary_fp_rate" not in table["counters"]


@pytest.mark.parametrize("nbytes", [64, 256, 1024])
def test_bloom_drops_within_the_formula_and_adds_nothing(nbytes):
    events = _events(5000, 2000, 2)
    exact, _ = _run(events, {}, 500)
    got, table = _run(events, {"summary": "bloom", "summary_bytes": nbytes}, 500)
    truth = {row for c in exact.values() for row in c}
    out = [row for c in got.values() for row in c]
    assert len(out) == len(set(out)) and set(out) <= truth  # no false positives, no repeats
    missed = len(truth) - len(out)
    # each value is missed with probability ≤ the final rate (the filter only fills up)
    fp_final = table["counters"]["summary_fp_rate"]
    assert missed <= len(truth) * fp_final + 3 * np.sqrt(len(truth) * fp_final) + 1
    assert missed > 0 or fp_final < 1e-3
    est = table["counters"]["summary_est_false_negatives"]
    if fp_final < 0.5:  # a filter not yet saturated: the formula and the reported estimate hold
        k = round(8 * nbytes / max(1, 8 * nbytes // 10) * np.log(2))
        assert fp_final == pytest.approx(bloom_fp_rate(nbytes, len(out), k), rel=0.3)
        assert abs(est - missed) <= 0.2 * missed + 5
    assert table["counters"]["state_bytes"] == nbytes


def test_summary_knob_is_checked_and_fixed_once_data_flowed():
    d, _h, _sub = _start(DDL, QUERY, False)
    op = _distinct_op(d)
    with pytest.raises(KnobError):
        control.set_knob(d, op, "summary", "sketchy")
    with pytest.raises(KnobError):
        control.set_knob(d, op, "summary_bytes", 0)
    d.push("S", [(1, 1), (2, 2)], ts=[0, 3])
    d.run()
    with pytest.raises(KnobError):
        control.set_knob(d, op, "summary", "bloom")
    control.set_knob(d, op, "summary", "exact")  # no change: allowed
