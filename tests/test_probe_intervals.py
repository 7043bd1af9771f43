"""`interval_ends` (engine/operators/probe_intervals.py) against a plain Python model, over
narrow spans of instants (a table per instant) and wide ones (a binary search per change)."""

from __future__ import annotations

import bisect

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from cqlstream.engine.operators.probe_intervals import interval_ends


def _model(key: list[int], ts: list[int], probe: list[int]) -> list[int]:
    def interval(t: int) -> int:  # probe instants before t: a change at a probe instant ends its interval
        return bisect.bisect_left(probe, t)

    n = len(key)
    return [i for i in range(n) if i == n - 1 or key[i + 1] != key[i] or interval(ts[i + 1]) != interval(ts[i])]


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_interval_ends_equal_the_model(data):
    span = data.draw(st.sampled_from([0, 1, 3, 10, 1000]))
    n = data.draw(st.integers(0, 80))
    cells = sorted(
        (data.draw(st.integers(0, 5)), data.draw(st.integers(100, 100 + span))) for _ in range(n)
    )  # (key, ts) order, as the aggregate's cells
    probe = sorted(data.draw(st.lists(st.integers(95, 105 + span), max_size=12)))  # repeats allowed
    key = [k for k, _ in cells]
    ts = [t for _, t in cells]
    got = interval_ends(np.array(key, np.int64), np.array(ts, np.int64), np.array(probe, np.int64))
    assert got.tolist() == _model(key, ts, probe)
