"""A grouped aggregate's batch on several threads: parts of disjoint groups, merged back in order.

A batch of an Aggregate operator (engine/operators/aggregate.py) whose groups can be split runs
as `parallel.threads()` *parts*, each owning a contiguous range of group ids (cut so the parts
get about as many events each), on the engine's threads (engine/parallel.py; numpy releases the
GIL in the kernels that dominate). A part reads and writes only its own groups' carried state,
so the parts share one GroupState; the multisets of DISTINCT and min/max are updated in turn.

The output is the sequential operator's, element for element:
- ids: the sequential operator hands out new ids to the changed cells in (gid, ts) order, so
  part p's inserts take the ids right after those of parts < p (one `take` for the batch);
- order: the sequential operator emits changed cells by ts, and within an instant by gid
  (a stable sort of (gid, ts)-ordered cells). Each part orders its own cells the same way; a
  cell's place in the whole output is its place in its part plus the rows of the other parts'
  cells before it: cells at an earlier instant, and at the same instant those of parts with
  lower group ids (a binary search per part pair). Each part then writes its rows straight into
  the output arrays at those places (disjoint positions), with no merge pass afterwards.

Two hand-overs per batch: the parts' cells, changes and local order (phase 1), then ids,
places, rows and carried state (phase 2, needing every part's order). Small batches are not
worth them: AggregateOp.PARALLEL_MIN events.
"""

from __future__ import annotations

import itertools
import threading
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING

import numpy as np

from cqlstream.engine import parallel
from cqlstream.engine.aggregates.changes import Changes
from cqlstream.engine.aggregates.events import StepEvents
from cqlstream.engine.batch import Batch
from cqlstream.engine.kernels import stable_order

if TYPE_CHECKING:
    from cqlstream.engine.operators.aggregate import AggregateOp

# a Multiset is rewritten whole by an update: parts (and operators on other threads) take turns
MULTISET_LOCK = threading.Lock()

_EMPTY_I = np.zeros(0, np.int64)
# rows per instant are counted (an array per part over the batch's instants) while the batch spans
# at most this many instants per event; beyond, binary searches between the parts (tests set 0)
COUNT_SPAN = 4


def part_cuts(gid: np.ndarray, ngroups: int, k: int) -> list[tuple[int, int]] | None:
    """Up to `k` group-id ranges [lo, hi) with about len(gid)/k events each, none empty; None
    when the events fall in fewer than two (one group, or one that holds nearly all of them)."""
    cum = np.cumsum(np.bincount(gid, minlength=ngroups))
    n = int(cum[-1])
    want = np.arange(1, k) * (n / k)  # events below each cut
    g = np.searchsorted(cum, want, "left")  # the group that reaches the share: cut before or after it
    below = np.where(g > 0, cum[np.maximum(g - 1, 0)], 0)
    cuts = np.where(want - below < cum[g] - want, g, g + 1)
    bounds = sorted({0, ngroups, *(int(c) for c in cuts if 0 < c < ngroups)})
    parts = []
    for lo, hi in itertools.pairwise(bounds):
        if int(cum[hi - 1]) - (int(cum[lo - 1]) if lo else 0) > 0:
            parts.append((lo, hi))
    return parts if len(parts) > 1 else None


@dataclass
class _Part:
    """One part after phase 1: its changes and its changed cells in its own output order."""

    ch: Changes
    o: np.ndarray  # changed cells (positions in ch.chg) in output order
    c: np.ndarray  # ... as cell numbers (ch.chg[o])
    cts: np.ndarray  # ... their instants (non-decreasing)
    dm: np.ndarray  # ... whether they emit a `−` row (after HAVING)
    im: np.ndarray  # ... whether they emit a `+` row
    full: bool  # every one emits both rows
    rcum: np.ndarray  # rows emitted by the first j of them (length len(o) + 1)
    upto: np.ndarray | None  # rows emitted at instants ≤ tmin + t, per t (None: instants too sparse)

    @property
    def nrows(self) -> int:
        return int(self.rcum[-1])


def _prepare(
    op: AggregateOp,
    lo: int,
    hi: int,
    tmin: int,
    span: int | None,
    ev: StepEvents,
) -> _Part:
    """Phase 1 of the part owning groups [lo, hi): its events (arrival order kept), cells and
    changes (AggregateOp._changes), HAVING, and its changed cells ordered as _emit orders them.
    The batch's instants are tmin .. tmin + span (`span` None: too many to count rows per instant)."""
    ch = op._changes(ev.take(np.flatnonzero((ev.gid >= lo) & (ev.gid < hi))), lo, hi - 1)
    dm, im = (ch.del_mask, ch.ins_mask) if op.having is None else op._having(ch)
    cts = ch.cell_ts.take(ch.chg)
    o = stable_order(cts - tmin, 0, int(cts.max()) - tmin) if len(cts) else _EMPTY_I
    dm, im, cts = dm.take(o), im.take(o), cts.take(o)
    full = bool(dm.all() and im.all())
    rcum = np.zeros(len(o) + 1, np.int64)
    if full:
        rcum[1:] = np.arange(2, 2 * len(o) + 1, 2)
    else:
        np.cumsum(dm.astype(np.int64) + im, out=rcum[1:])
    upto = None
    if span is not None:  # cells at instants ≤ t, then their rows
        upto = rcum.take(np.cumsum(np.bincount(cts - tmin, minlength=span + 1)))
    return _Part(ch, o, ch.chg.take(o), cts, dm, im, full, rcum, upto)


class _Output:
    """The batch's output arrays, allocated once; parts write their rows at disjoint places."""

    def __init__(self, op: AggregateOp, parts: list[_Part]) -> None:
        self.n = n = sum(p.nrows for p in parts)
        st = op.state
        dts = [a.dtype for a in st.key_vals] + [v.dtype for v, _ in parts[0].ch.outs]
        self.cols = [np.empty(n, dt) for dt in dts]
        self.nulls = [np.zeros(n, bool) for _ in dts]
        self.has_null = [False] * len(dts)
        self.ts = np.empty(n, np.int64)
        self.sign = np.empty(n, np.int8)
        self.id = np.empty(n, np.uint64)

    def batch(self) -> Batch:
        nulls = [m if h else None for m, h in zip(self.nulls, self.has_null)]
        return Batch(self.cols, nulls, self.ts, self.sign, self.id)

    def put_nulls(self, j: int, pos_d: np.ndarray, m_d: np.ndarray, pos_i: np.ndarray, m_i: np.ndarray) -> None:
        if m_d.any() or m_i.any():
            self.nulls[j][pos_d] = m_d
            self.nulls[j][pos_i] = m_i
            self.has_null[j] = True


def _places(parts: list[_Part], i: int, tmin: int) -> np.ndarray:
    """Where part i's changed cells' rows start in the batch's output: rows of its own earlier
    cells, plus the other parts' rows at earlier instants, plus at the same instant those of the
    parts with lower group ids (emitted first: the sequential order is by ts, then gid)."""
    p = parts[i]
    off = p.rcum[:-1].copy()
    if p.upto is not None:  # rows per instant, counted: one gather
        before = np.zeros(len(p.upto), np.int64)
        for j, q in enumerate(parts):
            if j == i or q.upto is None:
                continue
            if j < i:
                before += q.upto
            else:
                before[1:] += q.upto[:-1]
        return off + before.take(p.cts - tmin)
    for j, q in enumerate(parts):
        if j != i and q.nrows:
            off += q.rcum.take(np.searchsorted(q.cts, p.cts, "right" if j < i else "left"))
    return off


def _finish(
    op: AggregateOp, parts: list[_Part], i: int, tmin: int, ids: np.ndarray, first_id: int, out: _Output
) -> np.ndarray:
    """Phase 2 of part i: its new ids (from `first_id` in `ids`), its rows written at their
    places in `out`, its groups' carried state; returns its groups that became empty."""
    p = parts[i]
    ch = p.ch
    nid = np.zeros(len(ch.chg), np.uint64)
    ins = np.flatnonzero(ch.ins_mask)
    nid[ins] = ids[first_id : first_id + len(ins)]
    old_id = op._old_ids(ch, nid)
    if p.nrows:
        off = _places(parts, i, tmin)
        if p.full:  # every cell: its `−` row at off, its `+` row right after
            pos_d, pos_i, od, oi, cd, ca = off, off + 1, p.o, p.o, p.c, p.c
        else:
            d = np.flatnonzero(p.dm)
            a = np.flatnonzero(p.im)
            pos_d = off.take(d)
            pos_i = off.take(a) + p.dm.take(a)  # after the cell's `−` row, if it has one
            od, oi = p.o.take(d), p.o.take(a)
            cd, ca = p.c.take(d), p.c.take(a)
        out.ts[pos_d] = p.cts if p.full else p.cts.take(d)
        out.ts[pos_i] = p.cts if p.full else p.cts.take(a)
        out.sign[pos_d] = -1
        out.sign[pos_i] = 1
        out.id[pos_d] = old_id.take(od)
        out.id[pos_i] = nid.take(oi)
        gd = ch.cell_g.take(cd)
        ga = gd if p.full else ch.cell_g.take(ca)
        st = op.state
        for j, (kvals, knulls) in enumerate(zip(st.key_vals, st.key_nulls)):
            kd = kvals.take(gd)
            out.cols[j][pos_d] = kd
            out.cols[j][pos_i] = kd if p.full else kvals.take(ga)
            if st.null_keys[j]:
                md = knulls.take(gd)
                out.put_nulls(j, pos_d, md, pos_i, md if p.full else knulls.take(ga))
        for j, ((v, nl), (pv, pn)) in enumerate(zip(ch.outs, ch.prevs), len(st.key_vals)):
            out.cols[j][pos_d] = pv.take(cd)
            out.cols[j][pos_i] = v.take(ca)
            out.put_nulls(j, pos_d, pn.take(cd), pos_i, nl.take(ca))
    return op._carry(ch, nid, ins)


def run_parts(op: AggregateOp, cuts: list[tuple[int, int]], ev: StepEvents) -> Batch:
    """Steps 2–7 of `op`'s batch of events `ev` as parts of group ranges `cuts` (module
    docstring): its output."""
    tmin = int(ev.ts.min())
    span = int(ev.ts.max()) - tmin
    counted = span <= COUNT_SPAN * len(ev)
    parts = parallel.run_all([partial(_prepare, op, lo, hi, tmin, span if counted else None, ev) for lo, hi in cuts])
    counts = [int(np.count_nonzero(p.ch.ins_mask)) for p in parts]
    ids = op.ids.take(sum(counts))  # the sequential operator's one take: part p's after parts < p
    firsts = np.r_[0, np.cumsum(counts)].tolist()
    out = _Output(op, parts)
    dead = parallel.run_all([partial(_finish, op, parts, i, tmin, ids, firsts[i], out) for i in range(len(parts))])
    op._forget(np.concatenate(dead))
    return out.batch() if out.n else Batch.empty(op.out_types)
