"""Narrowing a join's carried relation state to the rows a call can touch.

A sparse input (a `[Now]` window, a few events per call) joined with a large relation read from
a shared store used to put the whole relation into the call's table: every column copied, every
key coded, every delete matched, on every call — O(state · width) per call however few the
probes. In a two-way join the state rows of input j are met only by the events of the other
input i, through every equi conjunct; so a row whose key (on one equi conjunct) no event of i
has can pair with nothing in this call. The rows j's own events delete are kept too, so deletes
match their inserts exactly as before. What remains is the state the call can use, found by one
pass over one key column instead of the work above.

The result never changes: pairs are those of the full table, in the same order (the boolean
take keeps the rows' order, and the join's path choice is made on the full instance counts it is
given). When the scan path declines (too many pairs), the join runs the call again on the full
state, so the other paths see exactly what they saw before. An input that nothing probes in a
call (the other input has no events) carries only the rows its own events delete.

The stream–relation join (stream_join.py) narrows its carried relation rows the same way
(`reachable_rows`): the rows whose keys on every equi conjunct some stream tuple of the call has,
and those the relation's own events delete, found by a bitmap over the probes' key span.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import numpy as np

from cqlstream.engine.batch import Batch
from cqlstream.engine.kernels import concat_ranges

if TYPE_CHECKING:
    from cqlstream.cql.logical import expr as X
    from cqlstream.engine.exprs import Col, Evaluator

KeyCodes = Callable[[list["Col"]], list[tuple[np.ndarray, np.ndarray, np.ndarray]]]


def _in_sorted(x: np.ndarray, sorted_u: np.ndarray) -> np.ndarray:
    """Mask of the values of `x` found in the sorted values `sorted_u` (repeats allowed: a plain
    sort is enough, and much cheaper than np.unique's hash table on ids that are all distinct)."""
    if not len(sorted_u) or not len(x):
        return np.zeros(len(x), bool)
    r = sorted_u.searchsorted(x)
    np.minimum(r, len(sorted_u) - 1, out=r)
    return sorted_u[r] == x


def narrow_state(
    state: Batch,
    own_events: Batch,
    probes: Batch,
    state_side: X.Expr,
    probe_side: X.Expr,
    ev: Evaluator,
    key_codes: KeyCodes,
) -> tuple[Batch, int]:
    """(the rows of `state` that the events `probes` of the other input can meet through the equi
    conjunct `state_side` = `probe_side`, or that `own_events` delete; rows dropped). Keys are
    compared through the join's own key coding (`key_codes`: equal values ↔ equal codes, NULL
    and NaN never valid)."""
    if len(probes):
        vs = ev.eval(state_side, state)
        vp = ev.eval(probe_side, probes)
        (cs, oks, _), (cp, okp, _) = key_codes([vs, vp])
        keep = oks & _in_sorted(cs, np.sort(cp[okp]))
    else:  # nothing probes this input in the call: only the rows its own events delete
        keep = np.zeros(len(state), bool)
    gone = own_events.id[own_events.sign < 0]
    if len(gone):
        keep |= _in_sorted(state.id, np.sort(gone))
    n_keep = int(keep.sum())
    if n_keep == len(state):
        return state, 0
    return state.take(keep), len(state) - n_keep


def should_narrow(n_inputs: int, state: Sequence[Batch], events: Sequence[Batch], ratio: int) -> list[bool]:
    """Per input j of a two-way join: narrow its carried state when the other input's events are
    few against it (the join would pair them by a scan, not an index), or none (then nothing
    probes it: only its own deletes need its rows; Linear Road's MinSegStr ⋈ AccSegMin joins
    carry ~6k rows a call for a handful of AccSegMin events in the whole run)."""
    if n_inputs != 2:
        return [False] * n_inputs
    return [ratio * len(events[1 - j]) < len(state[j]) for j in range(2)]


# value spans up to which membership is a bitmap lookup (one pass, no sort or binary search)
BITMAP_SPAN = 1 << 22


def _members(x: np.ndarray, probe: np.ndarray) -> np.ndarray:
    """Mask of the int64 codes `x` found among the int64 codes `probe`: a bitmap over the probes'
    span when it is small (Linear Road's vehicle ids, minutes, segments), else binary searches."""
    if not len(probe) or not len(x):
        return np.zeros(len(x), bool)
    lo, hi = int(probe.min()), int(probe.max())
    if hi - lo < BITMAP_SPAN:
        seen = np.zeros(hi - lo + 1, bool)
        seen[probe - lo] = True
        at = x - lo
        np.clip(at, 0, hi - lo, out=at)  # values out of the span land on an edge, masked out below
        out = seen[at]
        out &= (x >= lo) & (x <= hi)
        return out
    return _in_sorted(x, np.sort(probe))


def _sorted_matches(keys: np.ndarray, probe: Col) -> np.ndarray | None:
    """Positions (ascending) of the ascending int `keys` equal to a valid value of the int
    `probe` column: one range of `keys` per distinct probe value, found by two binary searches
    (no pass over `keys`); None when the probe values are not ints."""
    vals, nulls = probe
    if vals.dtype.kind != "i" or keys.dtype.kind != "i":
        return None
    if nulls is not None:
        vals = vals[~nulls]
    u = np.sort(vals)
    lo = keys.searchsorted(u, side="left")
    hi = keys.searchsorted(u, side="right")
    first = np.empty(len(u), bool)  # (each distinct value once: its range once)
    if len(u):
        first[0] = True
        np.not_equal(u[1:], u[:-1], out=first[1:])
    return concat_ranges(lo[first], hi[first])


def reachable_rows(
    state: Batch,
    probes: Batch,
    deleted: np.ndarray,
    sides: Sequence[tuple[X.Expr, X.Expr]],
    ev: Evaluator,
    key_codes: KeyCodes,
    ascending: bool = False,
) -> np.ndarray | None:
    """Positions (ascending) of the rows of `state` that a call can touch: those whose valid key
    on every equi conjunct (state side, probe side) some row of `probes` has, and those whose id
    is in `deleted` (the ids the state's own input deletes in the call); None when that is every
    row. Key codes as the join's (`key_codes`): equal values ↔ equal codes, NULL/NaN never valid.
    `ascending`: the first conjunct's state side is an int key, never NULL, ascending along
    `state` (the stream join tracks it): its matches are ranges found by binary searches."""
    pos: np.ndarray | None = None  # rows still possible after the conjuncts so far (None: all)
    if ascending:
        es, ep = sides[0]
        pos = _sorted_matches(ev.eval(es, state)[0], ev.eval(ep, probes))
        if pos is not None:
            sides = sides[1:]
    for es, ep in sides:
        if pos is not None and not len(pos):
            break
        vs = ev.eval(es, state)
        if pos is not None:
            vs = (vs[0].take(pos), None if vs[1] is None else vs[1].take(pos))
        (cs, oks, _), (cp, okp, _) = key_codes([vs, ev.eval(ep, probes)])
        keep = oks & _members(cs, cp if okp.all() else cp[okp])
        at = keep.nonzero()[0]
        pos = at if pos is None else pos.take(at)
    assert pos is not None
    if len(deleted):
        ids = state.id
        if len(ids) < 2 or bool((ids[1:] >= ids[:-1]).all()):  # ids in insertion order: search them
            g = np.sort(deleted)
            lo = ids.searchsorted(g, side="left")
            hi = ids.searchsorted(g, side="right")
            hit = (hi > lo).nonzero()[0]
            gone = concat_ranges(lo.take(hit), hi.take(hit)) if len(hit) else None
        else:
            gone = (_in_sorted(ids, np.sort(deleted))).nonzero()[0]
        if gone is not None and len(gone):
            # (a mask, not np.union1d: that one imports numpy.ma on its first call, ~10 ms)
            mask = np.zeros(len(ids), bool)
            mask[pos] = True
            mask[gone] = True
            pos = mask.nonzero()[0]
    return None if len(pos) == len(state) else pos
