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
