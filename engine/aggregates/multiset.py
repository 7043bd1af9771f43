"""Per-group multisets of one aggregate argument's values, for DISTINCT aggregates and min/max.

A `Multiset` keeps (gid, value, count) entries sorted by (gid, value). A batch's distinct
(gid, value) pairs are located in it by a binary search vectorized over all pairs; only those
entries are read (for min/max also the first/last few of each touched group: the smallest /
largest values the batch does not touch) and merged with the events in one sort; the state is
rewritten with one delete and one insert pass. A segmented cumulative count gives, per event,
whether the value appears in (0 → 1) or disappears from (1 → 0) its group's set: those ±1
*transitions* are what count/sum/avg DISTINCT add up. For min/max, every (gid, value) has
presence intervals over the cells of its group; the extreme at each cell is the smallest /
largest value whose interval covers it, computed for all cells at once (`cover`). This stays
exact when the current extreme leaves the window.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
from numpy.typing import DTypeLike

from cqlstream.engine.aggregates.columns import empty_column_of
from cqlstream.engine.kernels import concat_ranges, factorize, seg_cumsum, starts_to_ends

_EMPTY_I = np.zeros(0, np.int64)


class Multiset:
    """Per (gid, value) live counts of one aggregate argument, sorted by (gid, value)."""

    def __init__(self, dt: DTypeLike) -> None:
        self.dt = dt
        self.g = _EMPTY_I
        self.v = empty_column_of(dt)
        self.c = _EMPTY_I

    def nbytes(self) -> int:
        v = self.v.nbytes if self.v.dtype != object else 58 * len(self.v)
        return self.g.nbytes + self.c.nbytes + v

    def remap(self, newgid: np.ndarray) -> None:
        """Groups renumbered (compaction): every live entry's group survives."""
        self.g = newgid[self.g]
        order = np.lexsort((self.v, self.g))
        self.g, self.v, self.c = self.g[order], self.v[order], self.c[order]

    def update(
        self,
        g_e: np.ndarray,
        v_e: np.ndarray,
        s_e: np.ndarray,
        cell_e: np.ndarray,
        cell_g: np.ndarray,
        extremes: Iterable[str],
    ) -> tuple[np.ndarray, dict[str, tuple[np.ndarray, np.ndarray]]]:
        """Merge events (gid, value, sign ±1, cell) — in ts order, arrival order within an
        instant — into the multiset. Returns the per-event transition (+1 value appears in its group, −1
        disappears, 0 neither) and, per requested extreme ('min'/'max'), (values, valid) at every
        cell (cells are given by their sorted group ids `cell_g`)."""
        ncells = len(cell_g)
        ne = len(g_e)
        trans = np.zeros(ne, np.int8)
        # 1. the distinct (gid, value) pairs of the events, located in the state: `anchor` is the
        # position of the pair, or where it would be inserted
        upair = _EMPTY_I
        if ne:
            eorder, ekey = pair_order(g_e, v_e)
            eps = np.empty(ne, bool)
            eps[0] = True
            eps[1:] = ekey[1:] != ekey[:-1]
            first = eorder[eps]
            ug, uv = g_e[first], v_e[first]
            upair = np.empty(ne, np.int64)
            upair[eorder] = np.cumsum(eps) - 1  # event → its pair
            glo = np.searchsorted(self.g, ug, "left")
            ghi = np.searchsorted(self.g, ug, "right")
            anchor = search_inconcat_ranges(self.v, glo, ghi, uv)
            found = anchor < ghi
            found[found] = np.asarray(self.v[anchor[found]] == uv[found], bool)
            sub = anchor[found]
        else:
            anchor = sub = _EMPTY_I
        # 2. min/max: the untouched entries of a group are present throughout the batch, so only
        # the smallest and largest of them matter: they are among the first / last t + 1 entries
        # of the group (t = the group's touched entries)
        if extremes and ncells:
            tg = cell_g[np.r_[True, cell_g[1:] != cell_g[:-1]]]
            tlo = np.searchsorted(self.g, tg, "left")
            thi = np.searchsorted(self.g, tg, "right")
            k = np.searchsorted(sub, thi) - np.searchsorted(sub, tlo) + 1
            ends = np.concatenate(
                [concat_ranges(tlo, np.minimum(tlo + k, thi)), concat_ranges(np.maximum(thi - k, tlo), thi)]
            )
            sub = np.unique(np.concatenate([sub, ends]))
        m = len(sub)
        G = np.concatenate([self.g[sub], g_e])
        V = np.concatenate([self.v[sub], v_e])
        D = np.concatenate([self.c[sub], s_e])
        A = np.concatenate([sub, anchor[upair]])  # every entry of a pair has the pair's anchor
        ext: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        if not len(G):
            for kind in extremes:
                ext[kind] = (empty_column_of(self.dt, ncells), np.zeros(ncells, bool))
            return trans, ext
        # stable sort by (gid, value): state entries first, then events in arrival (ts) order
        order, pkey = pair_order(G, V)
        Gs, Vs, Ds = G[order], V[order], D[order]
        N = len(order)
        ps = np.empty(N, bool)  # pair starts
        ps[0] = True
        ps[1:] = pkey[1:] != pkey[:-1]
        cum = seg_cumsum(Ds, ps)  # count after each entry
        isev = order >= m
        evpos = order[isev] - m
        before = cum - Ds
        tr = ((before == 0) & (Ds > 0)).astype(np.int8) - ((cum == 0) & (Ds < 0)).astype(np.int8)
        trans[evpos] = tr[isev]
        # new state: the entries read are replaced by the final live counts of their pairs, each
        # put back at its anchor (shifted by the entries removed before it)
        pe = starts_to_ends(ps)
        keep = pe & (cum > 0)
        ng, nv, nc, na = Gs[keep], Vs[keep], cum[keep], A[order][keep]
        at = na - np.searchsorted(sub, na)
        rv = np.delete(self.v, sub)
        self.g = np.insert(np.delete(self.g, sub), at, ng)
        self.v = np.insert(rv, at, nv) if rv.dtype != object else obj_insert(rv, at, nv)
        self.c = np.insert(np.delete(self.c, sub), at, nc)
        if extremes and ncells:
            # per entry: its group's first cell and last cell + 1 (looked up once per group)
            gs = np.empty(N, bool)
            gs[0] = True
            gs[1:] = Gs[1:] != Gs[:-1]
            ug = Gs[gs]
            gfirst_u = np.searchsorted(cell_g, ug, "left")
            gend_u = np.searchsorted(cell_g, ug, "right")
            gord = np.cumsum(gs) - 1
            cellS = gfirst_u[gord]  # state entries: from the group's first cell
            cellS[isev] = cell_e[evpos]
            pt = np.empty(N, bool)  # last entry per (pair, cell)
            pt[-1] = True
            pt[:-1] = ps[1:] | (cellS[1:] != cellS[:-1])
            P = np.flatnonzero(pt)
            pc = cellS[P]
            present = cum[P] > 0
            end = gend_u[gord[P]]  # the group's last cell + 1
            if len(P) > 1:
                same_next = ~ps[P[:-1] + 1]
                end[:-1] = np.where(same_next, pc[1:], end[:-1])
            sel = present & (pc < end)
            st, en, rank = pc[sel], end[sel], P[sel]  # rank: position in (gid, value) order
            for kind in extremes:
                if kind == "min":
                    fill = N
                    res = cover(ncells, st, en, rank, fill, np.minimum)
                else:
                    fill = -1
                    res = cover(ncells, st, en, rank, fill, np.maximum)
                valid = res != fill
                vals = Vs[np.where(valid, res, 0)]
                ext[kind] = (vals, valid)
        elif extremes:
            for kind in extremes:
                ext[kind] = (empty_column_of(self.dt, 0), np.zeros(0, bool))
        return trans, ext


def search_inconcat_ranges(v: np.ndarray, lo: np.ndarray, hi: np.ndarray, x: np.ndarray) -> np.ndarray:
    """Per query i: the first position p in [lo[i], hi[i]] with not v[p] < x[i] (`v` sorted within
    each range): a binary search run for all queries at once, one numpy step per halving."""
    lo, hi = lo.copy(), hi.copy()
    act = np.flatnonzero(lo < hi)
    while len(act):  # ≤ log2(longest range) + 1 rounds
        l, h = lo[act], hi[act]
        mid = (l + h) >> 1
        less = np.asarray(v[mid] < x[act], bool)
        lo[act] = np.where(less, mid + 1, l)
        hi[act] = np.where(less, h, mid)
        act = act[lo[act] < hi[act]]
    return lo


def pair_order(G: np.ndarray, V: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Stable order of entries by (G, V), and an int64 key per sorted entry that changes exactly
    where (G, V) changes. Values are ranked (integers by offset when their span is small, others
    through np.unique; equal values — 0.0 and -0.0 included — get one rank) and (G, rank,
    position) is packed into one int64 for numpy's fast plain sort; lexsort if it does not fit."""
    n = len(G)
    if V.dtype.kind in "iub":
        vi = V.astype(np.int64, copy=False)
        vmin, vmax = int(vi.min()), int(vi.max())
        span = vmax - vmin + 1
        if span <= 4 * n + 1024:
            rank = vi - vmin
        else:
            u, rank = factorize(vi)
            span = len(u)
    else:
        u, rank = factorize(V + 0.0 if V.dtype.kind == "f" else V)
        span = len(u)
    gmax = int(G.max()) + 1
    bits = max(1, (n - 1).bit_length())
    if (gmax * span - 1).bit_length() + bits <= 62:
        key = G * span + rank
        packed = (key << bits) | np.arange(n, dtype=np.int64)
        packed.sort()
        order = packed & ((1 << bits) - 1)
        return order, packed >> bits
    order = np.lexsort((rank, G))  # stable
    Gs, rs = G[order], rank[order]
    ch = np.empty(n, bool)
    ch[0] = True
    ch[1:] = (Gs[1:] != Gs[:-1]) | (rs[1:] != rs[:-1])
    return order, np.cumsum(ch)  # the pair's ordinal


def obj_insert(arr: np.ndarray, pos: np.ndarray, vals: np.ndarray) -> np.ndarray:
    """np.insert into a string column, keeping it an object column."""
    out = np.insert(arr, pos, vals)
    return out if out.dtype == object else out.astype(object)


def cover(ncells: int, starts: np.ndarray, ends: np.ndarray, vals: np.ndarray, fill: int, op: np.ufunc) -> np.ndarray:
    """For every cell c in 0..ncells-1: op-reduction (np.minimum / np.maximum) of vals[i] over the
    intervals [starts[i], ends[i]) containing c, `fill` where none does.

    min/max are idempotent, so an interval of length L is covered by two overlapping blocks of
    2^k cells, k = floor(log2 L): [start, start + 2^k) and [end − 2^k, end) (a sparse table in
    reverse). Level by level from the largest k down, a row holds per block start the extreme of
    the blocks starting there; a block of 2h at i is pushed down as the blocks of h at i and i + h.
    O(n + C·log(max L)) work, two rows of memory."""
    keep = starts < ends
    starts, ends, vals = starts[keep], ends[keep], vals[keep]
    row = np.full(ncells, fill, np.int64)
    if not len(starts):
        return row
    k = np.frexp((ends - starts).astype(np.float64))[1].astype(np.int64) - 1  # floor(log2 L)
    kmax = int(k.max())
    order = np.argsort(k, kind="stable")
    bounds = np.searchsorted(k[order], np.arange(kmax + 2))
    prev = None
    for lev in range(kmax, -1, -1):  # one step per level (≤ log2 of the longest interval)
        cur = np.full(ncells, fill, np.int64) if lev else row
        if prev is not None:
            h = 1 << lev
            op(cur, prev, out=cur)
            op(cur[h:], prev[: ncells - h], out=cur[h:])
        sel = order[bounds[lev] : bounds[lev + 1]]
        if len(sel):
            op.at(cur, starts[sel], vals[sel])
            op.at(cur, ends[sel] - (1 << lev), vals[sel])
        prev = cur
    return row
