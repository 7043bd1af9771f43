"""A-Caching's step time model (engine/adaptive/step_costs.py): the pooled non-negative fit
recovers the price of a step's rows and candidate pairs, and a step's work per probing row comes
from runs on all probing rows before runs on a cache's misses."""

from __future__ import annotations

import numpy as np

from cqlstream.engine.adaptive.step_costs import StepCosts, fit_nonneg


def test_fit_recovers_prices_of_hash_and_nested_loop_steps():
    rng = np.random.default_rng(1)
    # hash steps: pairs ≈ matches; nested-loop steps: pairs = rows × window (1,000), dearer each
    rows = rng.integers(20, 400, 200).astype(float)
    nested = rng.random(200) < 0.3
    pairs = np.where(nested, rows * 1000.0, rows * rng.uniform(0.5, 3.0, 200))
    match, scan = np.where(nested, 0.0, pairs), np.where(nested, pairs, 0.0)
    secs = 2e-4 + 1e-7 * rows + 3e-8 * match + 9e-8 * scan
    noisy = secs * rng.uniform(0.97, 1.03, 200)
    a, b_row, b_match, b_scan = fit_nonneg(np.stack([rows, match, scan, noisy], axis=1))
    assert abs(a - 2e-4) < 1e-4 and abs(b_scan - 9e-8) < 9e-9 and 0.0 <= b_match < 1e-6
    assert 0.0 <= b_row < 1e-6
    sc = StepCosts(3)
    for k in range(200):
        step = 1 if nested[k] else 0
        sc.observe(
            2, step, int(rows[k]), int(rows[k]), int(pairs[k]), float(noisy[k]), misses=False, nested=bool(nested[k])
        )
    band, hashed = sc.price(2, 1), sc.price(2, 0)  # the band step: its pairs at the nested-loop price
    assert band is not None and hashed is not None
    assert abs(band[2] - 9e-8) < 9e-9 and hashed[2] < band[2] and band[:2] == hashed[:2]


def test_fit_keeps_coefficients_non_negative():
    rows = np.arange(1.0, 51.0)
    pairs = rows * 3.0 + (rows % 7)
    secs = 1e-3 - 1e-6 * rows + 1e-7 * pairs  # a negative slope on rows alone
    coef = fit_nonneg(np.stack([rows, pairs, secs], axis=1))
    assert len(coef) == 3 and min(coef) >= 0.0
    pred = coef[0] + coef[1] * rows + coef[2] * pairs
    assert float(np.abs(pred - secs).max()) < 2e-4
    # constant rows and pairs: only the constant is fitted
    flat = np.array([[10.0, 20.0, 3e-4 + 1e-5 * k] for k in range(5)])
    a, b_row, b_pair = fit_nonneg(flat)
    assert abs(a - float(flat[:, 2].mean())) < 1e-12 and b_row == b_pair == 0.0


def test_per_row_fan_out_from_all_probing_rows_pairs_from_the_recent_window():
    """Rows per probing row come from runs on all probing rows (a cache's misses, the keys it
    lacks, fan out less); pairs per row into the step from the latest runs of either kind, which
    see the window the step probes now (it fills while a used cache hides the clean runs)."""
    sc = StepCosts(3)
    assert sc.fit() is None and sc.per_row(2, 1) is None
    for _ in range(4):  # misses: 0.5 rows per probing row, 600 pairs per row into the step
        sc.observe(2, 1, 10, 5, 3000, 1e-4, misses=True, nested=True)
    assert sc.per_row(2, 1) == (0.5, 300.0)  # nothing else known: the misses stand in
    for _ in range(4):  # all probing rows: 2 rows per probing row, the same window
        sc.observe(2, 1, 100, 200, 120_000, 6e-3, misses=False, nested=True)
    assert sc.per_row(2, 1) == (2.0, 1200.0)
    assert sc.runs(2, 1) == 8 and sc.fit() is not None  # 8 runs pooled: fitted
    assert sc.fit() is sc.fit()  # memoized until the next run
    for _ in range(16):  # the window grew to 1,000 rows; only misses run now
        sc.observe(2, 1, 10, 5, 5000, 1e-4, misses=True, nested=True)
    assert sc.per_row(2, 1) == (2.0, 2000.0)  # the fan-out kept, the pairs of the grown window


def _costly_join(tuples: int = 700):
    """The costly-probe bench's join (T's pipeline probes S by key, then R by a band) after a
    few pushes, with caches on, measured costs and no selection of its own in the test."""
    from dataclasses import replace

    from bench.acaching import COSTLY_DDL, costly_input
    from cqlstream.engine.adaptive.cache_config import CachingConfig
    from cqlstream.engine.adaptive.config import AdaptiveConfig
    from cqlstream.engine.dsms import Dsms
    from cqlstream.engine.operators.join import JoinOp

    cfg = CachingConfig(enabled=True, interval_seconds=0, interval_tuples=10**9, window=4, distinct_window=64)
    d = Dsms(adaptive=replace(AdaptiveConfig(), caching=cfg), sys_stream=False)
    events, q, _ = costly_input(tuples)
    for stmt in COSTLY_DDL:
        d.execute(stmt)
    d.register_query(q)
    (op,) = [o for o in d.plan.operators if isinstance(o, JoinOp)]
    op.set_knob("probe_orders", [[1, 2], [0, 2], [1, 0]])
    for k in range(0, len(events), 70):
        for n, r in events[k : k + 70]:
            d.push(n, [tuple(int(x) for x in r)], ts=[k])
        d.run()
    return op.caching


def test_used_cache_paying_on_its_own_record_is_kept_while_windows_fill():
    """Refinement (a) reads a used cache's net on its own record (its hits counted, its misses'
    rows and pairs now, its measured work), not on the fan-out profiled before it was used. Here
    the runs before use saw small windows (0.7 S rows per T event, 200 R rows per band probe),
    its misses see filled ones (3 and 1,000): priced the old way the cache's 3 ms of work exceed
    its saving and it would be dropped at once; on its record it saves 3× its work and stays."""
    ac = _costly_join()
    for c in ac.used():
        ac._drop(c, "test", unused=True)
    c = ac._candidate(2, (1, 0))
    assert c is not None
    ac._use(c, 1 << 20, "test")
    ac.phase = "unused"  # no selection due: only refinement (a) may act
    sc = ac.step_costs = StepCosts(3)
    price = (1e-4, 1e-7, 3e-8, 1e-7)  # a, per row, per hash match, per band pair

    def run(step: int, rows0: int, rows: int, pairs: int, misses: bool) -> None:
        nested = step == 1
        secs = price[0] + price[1] * rows + (price[3] if nested else price[2]) * pairs
        sc.observe(2, step, rows0, rows, pairs, secs, misses=misses, nested=nested)

    for _ in range(4):  # profiled before use: 70 T events, 0.7 S rows each, 200 R rows
        run(0, 70, 70, 49, False)
        run(1, 70, 49, 49 * 200, False)
    for _ in range(8):  # on the cache's misses since: 35 events, 3 S rows each, 1,000 R rows
        run(0, 35, 35, 105, True)
        run(1, 35, 105, 105 * 1000, True)
    assert sc.fit() is not None and abs(sc.fit()[3] - 1e-7) < 1e-12
    ac.pipe_calls[2], ac.pipe_rows[2], ac.join_calls = 10, 700, 10
    for _ in range(4):
        c.miss_obs.append(0.5)
        c.work_obs.append((70.0, 3e-3))
        c.own_obs.append((35.0, 0.0, 3e-3))  # 35 hits a call, none with every event hitting
        c.calls_probed += 1
    ac._estimate(c)
    # per hit: step 0 (1 row, 3 matches) and step 1 (3 rows, 3,000 pairs) at the fitted prices
    per_hit = 1e-7 * 1 + 3e-8 * 3 + 1e-7 * 3 + 1e-7 * 3000
    assert abs(c.benefit - 35 * per_hit) < 1e-6 and abs(c.cost - 3e-3) < 1e-12 and c.net > 0
    ac._maybe_reoptimize()
    assert c.state == "used"
    # the same record with the work above the saving: dropped at once
    for _ in range(4):
        c.own_obs.append((35.0, 0.0, 20e-3))
    ac._estimate(c)
    assert c.net < 0
    ac._maybe_reoptimize()
    assert c.state != "used"
