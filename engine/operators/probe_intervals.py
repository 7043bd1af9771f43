"""Probe intervals: where an operator read only at a probing stream's instants emits.

An operator whose output relation is read only at the instants of a probe stream (an aggregate or
a DISTINCT under `Rstream(S [Now] ⋈ X)`, cql/logical/probe_aggregates.py) need not emit every
change: per output key (a group, a distinct value) one net change per probe interval — after one
probe instant, up to and including the next; a call's last interval ends at the call's bound —
placed at the key's last change in the interval, keeps the relation exact at every probe instant
and at the end of every call. `interval_ends` finds those last changes, vectorized; AggregateOp
(per group cell) and DistinctOp (per value and instant) share it.
"""

from __future__ import annotations

import numpy as np


def interval_ends(key: np.ndarray, ts: np.ndarray, probe_ts: np.ndarray) -> np.ndarray:
    """Positions of the changes (in (key, ts) order) that end their key's run of changes within one
    probe interval: the key's last change, or one whose key's next change falls after a probe
    instant not before its own (intervals (p_i, p_i+1], instants of `probe_ts`, ts order)."""
    n = len(key)
    last = np.ones(n, bool)
    if n > 1:
        k = interval_of(ts, probe_ts)
        np.not_equal(key[1:], key[:-1], out=last[:-1])
        last[:-1] |= k[1:] != k[:-1]
    return np.flatnonzero(last)


def interval_of(ts: np.ndarray, probe_ts: np.ndarray) -> np.ndarray:
    """The probe interval of every instant `ts`: the number of probe instants before it (a change
    at a probe instant belongs to the interval ending there). Over a narrow span of instants (a
    batch spans minutes, with tens of thousands of changes), a table per instant and one gather
    instead of a binary search per change."""
    lo, hi = int(ts.min()), int(ts.max())
    if hi - lo < len(ts) // 4:
        return np.searchsorted(probe_ts, np.arange(lo, hi + 1, dtype=np.int64), "left").take(ts - lo)
    return np.searchsorted(probe_ts, ts, "left")
