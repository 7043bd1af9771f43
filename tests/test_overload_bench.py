"""bench/overload.py's machinery at a tiny size (figures are not asserted, only that it measures
what it says): the same arrivals every time, an exact run equal to itself, and a controlled run
under a tiny queue limit that sheds and so differs from the exact answers."""

from __future__ import annotations

from bench import overload
from cqlstream.engine.approx.config import OverloadConfig


def test_arrivals_are_reproducible_in_any_slicing():
    a = overload.Arrivals(200_000, 1e6)
    whole = a.batch(0, 150_000)
    parts = [a.batch(i, min(i + 70_001, 150_000)) for i in range(0, 150_000, 70_001)]
    assert sum(len(p) for p in parts) == len(whole)
    assert whole.cols[0][70_001:140_002].tolist() == parts[1].cols[0].tolist()
    assert a.due(0.1) == 100_001 and a.due(10) == 200_000


def test_controlled_run_sheds_and_errors_are_measured():
    src = overload.Arrivals(300_000, 1e6)
    exact = overload.exact(src)
    assert overload.rel_error(exact.results[0], exact.results[0]) == 0.0
    cfg = OverloadConfig(enabled=True, queue_memory_limit=64 << 10, interval=0.0, settle=1, calm=3)
    run = overload.feed("controlled", src, cfg, 20_000)
    assert any(r < 1.0 for q in run.rates for _, r in q)
    assert run.latency and run.peak_queue > 0
    assert all(overload.rel_error(run.results[i], exact.results[i]) > 0 for i in range(3))
    assert 0 < overload.mean_rate(run.rates[0], run.end) < 1
