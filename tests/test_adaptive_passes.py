"""Profiling in passes (engine/adaptive/profile.py `Passes`): profile tuples fall due at p per
input tuple and are taken a pass at a time, never more than a window, at once on a shift; the
join profiler's rows reached along a path cut to one per (sample, key) with multiplicities kept.
Results never depend on any of it: selections and joins profiled in passes (p < 1) give what the
reference evaluator gives at every batch size, and still re-order mid-stream after a shift."""

from __future__ import annotations

import numpy as np
import pytest

from cqlstream.engine.adaptive.config import AdaptiveConfig
from cqlstream.engine.adaptive.mjoin import _distinct
from cqlstream.engine.adaptive.profile import Passes, strata
from cqlstream.engine.control import _query_selections
from cqlstream.engine.operators.join import JoinOp
from tests.engine_harness import run_engine, run_reference
from tests.test_adaptive_differential import DDL as SEL_DDL
from tests.test_adaptive_differential import QUERY as SEL_QUERY
from tests.test_adaptive_differential import _shifting
from tests.test_adaptive_mjoin import DDL, QUERY, _flipping


def test_passes_take_p_per_tuple_in_passes_of_at_least_size():
    ps = Passes(0.1, size=20, seed=1)
    taken = []
    for _ in range(100):
        got = ps.take(30)  # 3 due per call: a pass every 7 calls
        assert len(got) in (0, 21)  # (all that is due, when at least `size` is)
        assert (np.diff(got) > 0).all() and (got < 30).all() if len(got) else True
        taken.append(len(got))
    assert ps.passes == sum(1 for k in taken if k)
    assert abs(sum(taken) - 0.1 * 30 * 100) <= 20  # the rate is p; at most one pass still due


def test_passes_cap_at_the_window_and_p_one_takes_everything():
    ps = Passes(0.5, size=8, seed=2, cap=10)
    assert len(ps.take(1000)) == 10  # more than a window from one call would only push itself out
    assert ps.due == 0
    every = Passes(1.0, size=128, seed=3, cap=40)
    assert every.take(3).tolist() == [0, 1, 2] and every.take(1).tolist() == [0]


def test_urgent_pass_takes_at_least_size_at_once():
    ps = Passes(0.01, size=16, seed=4)
    assert len(ps.take(100)) == 0  # 1 due, no pass
    assert len(ps.take(100, urgent=True)) == 16
    assert len(ps.take(5, urgent=True)) == 5  # never more than the call has


def test_distinct_keeps_one_row_per_sample_and_key_with_multiplicities():
    sid = np.array([0, 0, 1, 0, 1, 2, 2])
    key = np.array([5, 5, 5, 7, 5, 9, 9])
    valid = np.array([True, True, True, True, True, False, True])
    mult = np.array([1, 2, 1, 4, 3, 10, 1])
    s, k, v, m = _distinct(sid, key, valid, mult)
    got = sorted(zip(s.tolist(), k.tolist(), m.tolist()))
    assert got == [(0, 5, 3), (0, 7, 4), (1, 5, 4), (2, 9, 1)] and v.all()


def _join(h) -> JoinOp:
    (op,) = [op for op in _query_selections(h) if isinstance(op, JoinOp)]
    return op


PASSES = {"probability": 0.25, "window": 40, "profile_batch": 4, "profile_pass": 16}


@pytest.mark.parametrize("chunk", [1, 7, 64, None])
def test_join_profiled_in_passes_same_results(chunk):
    inputs = _flipping()
    expected = run_reference(DDL, QUERY, inputs)
    got, h = run_engine(DDL, QUERY, inputs, chunk=chunk, adaptive=AdaptiveConfig(**PASSES))
    assert got == expected
    op = _join(h)
    if chunk is not None:
        assert any(0 < r.at < p.seen for p in op.adaptive.pipes for r in p.log), "no re-ordering mid-stream"
        pipe = op.adaptive.pipes[0]
        assert 0 < pipe.passes.passes < pipe.seen  # passes, not every call


WIDE = QUERY.replace("[Rows 6]", "[Rows 40]")


def _wide_flip(n=1600, seed=9):
    """As _flipping, over windows of 40: after the flip T holds each of S's keys about 10 times
    (its step's flow jumps from 0 to ~10 rows per row) and V none."""
    rng = np.random.default_rng(seed)
    out: dict[str, list] = {"S": [], "T": [], "U": [], "V": []}
    for k in range(n):
        late = k >= n // 2
        ts = k // 4
        rare, common = int(rng.integers(4, 1000)), int(rng.integers(0, 4))
        out["S"].append((ts, (int(rng.integers(0, 4)), k)))
        out["T"].append((ts, (common if late else rare, k)))
        out["V"].append((ts, (rare if late else common, k)))
        out["U"].append((ts, (int(rng.integers(0, 8)), k)))
    return out


def test_join_flow_shift_takes_a_pass_and_the_order_follows():
    """S's pipeline probes T first while T drops S's events; after the flip T lets them through
    (its flow jumps): a pass comes at once and S's pipeline moves V (now selective) first, soon
    after the flip (S has about 2 events per input tuple: its inserts and its window's deletes)."""
    config = AdaptiveConfig(probability=0.01, window=40, profile_batch=4, profile_pass=32)
    inputs = _wide_flip()
    got, h = run_engine(DDL, WIDE, inputs, chunk=400, adaptive=config)
    off, _ = run_engine(DDL, WIDE, inputs, chunk=400, adaptive=AdaptiveConfig(policy="off"))
    assert got == off  # (the reference evaluator's nested loops over four windows of 40 are too slow here)
    op = _join(h)
    pipe = op.adaptive.pipes[0]
    assert op.probe_orders[0][0] == 3
    assert pipe.urgent >= 1 and pipe.passes.passes < 0.01 * pipe.seen / 32 + pipe.urgent + 1
    flip = [r for r in pipe.log if r.new[0] == 3]
    assert flip and 1600 <= flip[0].at <= 1600 + 2 * 400  # within two calls of the flip's events
    t = op.control_table()["adaptive"]
    assert t["pipelines"][0]["shift_passes"] == pipe.urgent and t["profile_seconds"] > 0


@pytest.mark.parametrize("chunk", [1, 7, 64, None])
def test_selection_profiled_in_passes_same_results(chunk):
    inputs = _shifting()
    expected = run_reference(SEL_DDL, SEL_QUERY, inputs)
    config = AdaptiveConfig(probability=0.3, window=30, profile_batch=4, profile_pass=12)
    got, h = run_engine(SEL_DDL, SEL_QUERY, inputs, chunk=chunk, adaptive=config)
    assert got == expected
    (op,) = [op for op in _query_selections(h) if op.kind == "select"]
    if chunk is not None:
        assert any(0 < r.at < 600 for r in op.adaptive.log), "no re-ordering mid-stream"
        assert 0 < op.adaptive.passes.passes < op.adaptive.seen


def test_strata_take_every_tuple_at_rate_k_over_n():
    """A pass's positions (`strata`): k sorted distinct positions of n, one per run of n // k or
    n // k + 1 consecutive tuples, each tuple taken at rate k / n over many passes (a uniform draw
    within each run), including when n is not a multiple of k and when k is n."""
    rng = np.random.default_rng(11)
    for n, k in ((100, 7), (1000, 10), (37, 37), (50, 1)):
        hits = np.zeros(n)
        draws = 4000
        for _ in range(draws):
            got = strata(n, k, rng)
            assert len(got) == k and (np.diff(got) > 0).all() and got[0] >= 0 and got[-1] < n
            edges = np.arange(k + 1) * n // k
            assert ((got >= edges[:-1]) & (got < edges[1:])).all()  # one in each run
            hits[got] += 1
        rate = hits / draws
        runs = np.diff(np.arange(k + 1) * n // k)
        expected = np.repeat(1.0 / runs, runs)  # 1 / its run's length, within one tuple of k / n
        assert np.abs(expected - k / n).max() <= k / n * (1 / max(n // k, 1))
        assert (np.abs(rate - expected) <= 5 * np.sqrt(expected * (1 - expected) / draws) + 1e-9).all()
