"""Summary synopses: each one's error stays within its bound at a fixed seed, and a batch update
equals the same items fed in pieces where the algorithm promises it."""

from __future__ import annotations

import numpy as np
import pytest

from cqlstream.engine.approx.precision import bloom_fp_rate
from cqlstream.engine.summaries.bloom import BloomFilter
from cqlstream.engine.summaries.countsketch import CountSketch
from cqlstream.engine.summaries.hashing import row_hash
from cqlstream.engine.summaries.histogram import EquiDepth
from cqlstream.engine.summaries.quantiles import KLL
from cqlstream.engine.summaries.reservoir import Reservoir


@pytest.mark.parametrize("nbytes,n", [(1024, 1000), (512, 1000), (4096, 2000), (256, 500)])
def test_bloom_false_positive_rate_matches_the_formula(nbytes, n):
    f = BloomFilter(nbytes, expected=n, seed=3)
    keys = np.random.default_rng(1).integers(0, 2**62, n)
    f.add(keys)
    assert f.contains(keys).all()  # no false negatives
    probe = np.random.default_rng(2).integers(2**62, 2**63 - 1, 200_000)
    measured = f.contains(probe).mean()
    want = bloom_fp_rate(f.nbytes(), n, f.k)
    assert abs(measured - want) <= 0.15 * want + 0.002
    assert f.fp_rate() == pytest.approx(want, rel=0.25, abs=0.002)


def test_bloom_test_and_add_sees_repeats_within_and_across_batches():
    f = BloomFilter(1 << 16, expected=1000)
    got = f.test_and_add(np.array([5, 7, 5, 9, 7]))
    assert got.tolist() == [False, False, True, False, True]
    assert f.test_and_add(np.array([9, 11])).tolist() == [True, False]


def test_row_hash_is_stable_and_null_aware():
    a = row_hash([np.array([1, 2, 1]), np.array(["x", "y", "x"], object)], [None, np.array([False, False, True])])
    b = row_hash([np.array([1]), np.array(["x"], object)], [None, None])
    assert a[0] == b[0] and a[0] != a[2] and a[0] != a[1]
    assert row_hash([np.array([0.0])])[0] == row_hash([np.array([-0.0])])[0]


def test_countsketch_error_within_l2_bound():
    rng = np.random.default_rng(5)
    keys = rng.zipf(1.3, 200_000) % 5000
    cs = CountSketch(width=1024, depth=5, seed=1)
    for part in np.array_split(keys, 7):
        cs.update(part)
    uniq, true = np.unique(keys, return_counts=True)
    err = np.abs(cs.estimate(uniq) - true)
    l2 = np.sqrt((true.astype(float) ** 2).sum())
    assert np.quantile(err, 0.95) <= 2.0 * l2 / np.sqrt(1024)
    top = np.argsort(true)[-10:]  # heavy hitters to 2 %
    assert np.all(err[top] <= 0.02 * true[top])


def test_countsketch_is_linear_in_its_updates():
    a, b = CountSketch(64, seed=9), CountSketch(64, seed=9)
    keys = np.arange(100)
    a.update(keys, np.full(100, 3))
    for _ in range(3):
        b.update(keys)
    assert np.array_equal(a.table, b.table)
    b.update(keys, np.full(100, -3))
    assert not b.table.any()


def test_reservoir_inclusion_is_uniform():
    n, k, runs = 1000, 50, 400
    hits = np.zeros(n)
    for seed in range(runs):
        r = Reservoir(k, seed=seed, dtype=np.int64)
        for part in np.array_split(np.arange(n), 9):
            r.update(part)
        assert len(np.unique(r.sample())) == k
        hits[r.sample()] += 1
    p = hits / runs
    expect = k / n
    # each item's inclusion frequency against a binomial bound (~4.5 sd), and by arrival decile
    assert np.all(np.abs(p - expect) <= 4.5 * np.sqrt(expect * (1 - expect) / runs))
    deciles = p.reshape(10, -1).mean(axis=1)
    assert np.all(np.abs(deciles - expect) <= 0.006)


def test_reservoir_small_stream_is_kept_whole():
    r = Reservoir(10, seed=1, dtype=np.int64)
    r.update(np.arange(7))
    assert r.sample().tolist() == list(range(7))


@pytest.mark.parametrize("dist", ["normal", "exponential", "sorted"])
def test_kll_rank_error_is_small(dist):
    rng = np.random.default_rng(11)
    v = {"normal": rng.normal(size=200_000), "exponential": rng.exponential(size=200_000)}.get(
        dist, np.arange(200_000, dtype=float)
    )
    s = KLL(k=200, seed=4)
    for part in np.array_split(v, 13):
        s.update(part)
    assert s.nbytes() < 8 * 2000  # O(k) items, not the stream
    qs = np.linspace(0.01, 0.99, 99)
    sv = np.sort(v)
    true_rank = np.searchsorted(sv, s.quantile(qs), side="right") / len(v)
    assert np.max(np.abs(true_rank - qs)) <= 0.02
    probes = np.quantile(v, qs)
    assert np.max(np.abs(s.rank(probes) - qs)) <= 0.02


@pytest.mark.parametrize("drift", [False, True])
def test_equi_depth_range_counts(drift):
    rng = np.random.default_rng(8)
    parts = [rng.normal(loc=(i * 0.3 if drift else 0.0), size=20_000) for i in range(10)]
    h = EquiDepth(buckets=32)
    for p in parts:
        h.update(p)
    v = np.concatenate(parts)
    n = len(v)
    for lo, hi in [(-1, 1), (0, 2), (-3, -1), (1.5, 4)]:
        true = ((v >= lo) & (v <= hi)).sum()
        assert abs(h.count_between(lo, hi) - true) <= 1.5 * n / 32  # within about one bucket
    per = np.histogram(v, bins=h.edges)[0]  # depths stay near equal
    assert per.max() <= 2.0 * n / 32
