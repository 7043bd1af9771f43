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
        p = probe_ts[np.r_[True, probe_ts[1:] != probe_ts[:-1]]] if len(probe_ts) else probe_ts  # distinct instants
        k = np.searchsorted(p, ts, "left")  # the interval: changes at p_i belong to the one ending there
        last[:-1] = (key[1:] != key[:-1]) | (k[1:] != k[:-1])
    return np.flatnonzero(last)
