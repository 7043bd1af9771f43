"""Grouped and scalar aggregation over a relation given as signed deltas (docs/semantics.md).

Output: one row per non-empty group, the key values then the aggregate values. Without GROUP BY
(a scalar aggregate) there is exactly one row at every instant from t0 on, even over an empty
input (count 0, the other aggregates NULL), except in compat mode (STREAM 0.6), where an empty
input has no row. Whenever a group's row changes at an instant, the operator emits `−` of the
old row (with the id it was inserted with) and `+` of the new row (a fresh id); a group becoming
empty emits only the `−`; an instant after which a group's row is unchanged emits nothing.

Aggregates: count(*), count(x), sum, avg, min, max, each optionally DISTINCT, NULL arguments
ignored; sum of integers is an int64, avg a float. Plus user-defined aggregates (below).

Vectorized evaluation (one pass per batch, whatever the number of instants it spans)
-----------------------------------------------------------------------------------------
1. Key and argument expressions are evaluated once over the batch. Group keys are factorized
   to dense group ids (gid) through persistent interners (`_GroupKeys`): per key column a
   value → code map (a sorted array searched with np.searchsorted, plus a direct lookup table
   when the integer keys span a small range; strings go through a dict, touched once per
   distinct value of the batch), chained over the key columns. NULL is a key value of its own.
2. Events are stable-sorted by (gid, ts) (ts order is already there: a radix/packed sort on the
   gid keeps it). A *cell* is one (gid, instant) with events; its end is the last event.
3. Additive quantities — row count, count(x), sum(x) — are segmented cumulative sums of
   sign×value added to the per-group totals carried between calls; read at the cell ends they
   give every group's totals at the end of every instant. Integer sums are exact int64 (a
   wrapping prefix sum, differences exact). Float sums are compensated: the rounding error of
   every step of the prefix sum is recovered exactly (TwoSum) and summed separately, and the
   carried per-group total is a (hi, lo) pair, so long streams of inserts and deletes do not
   drift (the result is as accurate as a double-double sum, in practice the correctly rounded
   sum that `math.fsum` gives).
4. DISTINCT aggregates and min/max keep, per aggregate argument, a multiset of (gid, value,
   count) entries sorted by (gid, value) (`_Multiset`). A batch's distinct (gid, value) pairs
   are located in it by a binary search vectorized over all pairs; only those entries are read
   (for min/max also the first/last few of each touched group: the smallest/largest values the
   batch does not touch) and merged with the events in one sort; the state is rewritten with
   one delete and one insert pass. A segmented cumulative count gives, per event, whether
   the value appears in (0 → 1) or disappears from (1 → 0) its group's set: those ±1
   *transitions* are what count/sum/avg DISTINCT add up (same machinery as step 3). For
   min/max, every (gid, value) has presence intervals over the cells of its group; the
   extreme at each cell is the smallest/largest value whose interval covers it, computed for
   all cells at once (`_cover`: each interval as two overlapping power-of-two blocks, a sparse
   table pushed down level by level). This is exact when the current extreme leaves the window.
5. Each cell's output row is compared with the previous cell of its group (or the carried row);
   only real changes are emitted, in ts order.

User-defined aggregates
-----------------------
Register with `FunctionRegistry.register_aggregate(name, impl, returns)`. `impl` is any object
with the methods

    init() -> state                 a fresh state for an empty group
    add(state, value) -> state      a (non-NULL) value enters the group
    remove(state, value) -> state   a value previously added leaves the group
    result(state) -> value          the aggregate's value (None for NULL)

Values are plain Python objects (int, float, str, bool). NULL arguments are never passed. A
state may be mutated in place and returned. With DISTINCT, `add`/`remove` see each distinct
value once (when it appears in / disappears from the group). Within one instant a group's adds
come before its removes, so `remove` only ever sees a value the state holds. `result` is called
at the end of every instant at which the group had events; a group's state is dropped when the
group becomes empty. UDAFs are evaluated by a per-event Python loop (see `_udaf_cells`): the implementation
is an opaque Python object, so there is no vectorized form.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from cqlstream.cql.logical.expr import AggCall, Expr
from cqlstream.engine.batch import Batch, dtype_of
from cqlstream.engine.errors import EngineError
from cqlstream.engine.exprs import Evaluator
from cqlstream.engine.operators.base import Operator

_BUILTINS = ("count", "sum", "avg", "min", "max")
_EMPTY_I = np.zeros(0, np.int64)


# ---------------------------------------------------------------- small vectorized helpers


def _ranges(lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Concatenation of arange(lo[i], hi[i]) for all i."""
    lens = hi - lo
    total = int(lens.sum()) if len(lens) else 0
    if not total:
        return _EMPTY_I
    keep = lens > 0
    lo, lens = lo[keep], lens[keep]
    starts = np.cumsum(lens) - lens
    return np.repeat(lo - starts, lens) + np.arange(total, dtype=np.int64)


def _starts_to_ends(starts: np.ndarray) -> np.ndarray:
    ends = np.empty(len(starts), bool)
    if len(starts):
        ends[:-1] = starts[1:]
        ends[-1] = True
    return ends


def _seg_cumsum(d: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """Cumulative sum of `d` restarting at every True of `starts` (starts[0] must be True)."""
    cs = np.cumsum(d)
    base = (cs - d)[starts]
    return cs - np.repeat(base, np.diff(np.append(np.flatnonzero(starts), len(d))))


def _stable_order(key: np.ndarray, nkeys: int) -> np.ndarray:
    """Stable argsort of non-negative int64 `key` (< nkeys): radix sort for small key ranges, a
    packed (key, position) int64 sort otherwise (numpy's plain sort is much faster than a
    stable argsort)."""
    n = len(key)
    if n < 2 or nkeys <= 1:
        return np.arange(n, dtype=np.int64)
    if nkeys <= 1 << 16:
        return np.argsort(key.astype(np.uint16), kind="stable")
    bits = max(1, (n - 1).bit_length())
    if (nkeys - 1).bit_length() + bits <= 62:
        packed = (key.astype(np.int64) << bits) | np.arange(n, dtype=np.int64)
        packed.sort()
        return packed & ((1 << bits) - 1)
    return np.argsort(key, kind="stable")


def _two_sum(a: np.ndarray, b: np.ndarray):
    """s = fl(a + b) and its exact rounding error (Knuth's TwoSum)."""
    s = a + b
    bb = s - a
    err = (a - (s - bb)) + (b - bb)
    return s, err


def _cover(ncells: int, starts: np.ndarray, ends: np.ndarray, vals: np.ndarray, fill: int, op) -> np.ndarray:
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


def _as_dtype(v: np.ndarray, dt) -> np.ndarray:
    if dt is object:
        return v if v.dtype == object else v.astype(object)
    if v.dtype == object:  # e.g. a NULL-typed expression: placeholder values
        return np.zeros(len(v), dt)
    return v.astype(dt, copy=False)


def _column(values: list, dt) -> tuple[np.ndarray, np.ndarray]:
    """Python values (None = NULL) → (numpy column of dtype dt, NULL mask)."""
    n = len(values)
    null = np.fromiter((x is None for x in values), bool, n)
    if dt is object:
        out = np.empty(n, object)
        out[:] = ["" if x is None else x for x in values]
    else:
        filler = False if dt is np.bool_ else 0
        out = np.array([filler if x is None else x for x in values], dtype=dt) if n else np.zeros(0, dt)
    return out, null


# ---------------------------------------------------------------- interning of group keys


class _IntInterner:
    """Persistent map int64 key → dense id 0, 1, 2, ... (in order of discovery), vectorized.

    Authoritative form: sorted `keys` with their `ids` (np.searchsorted). Accelerator: when the
    known keys span a small range, a direct lookup `table` (id or −1) over [lo, lo + len)."""

    def __init__(self):
        self.keys = _EMPTY_I
        self.ids = _EMPTY_I
        self.n = 0
        self.lo = 0
        self.table: np.ndarray | None = None

    def nbytes(self) -> int:
        return self.keys.nbytes + self.ids.nbytes + (0 if self.table is None else self.table.nbytes)

    def map(self, x: np.ndarray) -> np.ndarray:
        if not len(x):
            return _EMPTY_I
        mn, mx = int(x.min()), int(x.max())
        t = self.table
        if t is not None and mn >= self.lo and mx < self.lo + len(t):
            out = t[x - self.lo]
            miss = out < 0
            if not miss.any():
                return out
            self._add(np.unique(x[miss]))
            return self.table[x - self.lo]
        u, inv = np.unique(x, return_inverse=True)
        ids = self._add(u)
        self._retable()
        return ids[inv.reshape(-1)]

    def _add(self, u: np.ndarray) -> np.ndarray:
        """Ids of the sorted unique keys `u`, adding the unknown ones."""
        pos = np.searchsorted(self.keys, u)
        found = np.zeros(len(u), bool)
        inb = pos < len(self.keys)
        found[inb] = self.keys[pos[inb]] == u[inb]
        ids = np.empty(len(u), np.int64)
        ids[found] = self.ids[pos[found]]
        new = ~found
        k = int(new.sum())
        if k:
            ids[new] = np.arange(self.n, self.n + k, dtype=np.int64)
            self.n += k
            self.keys = np.insert(self.keys, pos[new], u[new])
            self.ids = np.insert(self.ids, pos[new], ids[new])
            t = self.table
            if t is not None:
                un = u[new]
                if int(un[0]) >= self.lo and int(un[-1]) < self.lo + len(t):
                    t[un - self.lo] = ids[new]
                else:
                    self.table = None
        return ids

    def _retable(self) -> None:
        if self.table is not None or not len(self.keys):
            return
        lo, hi = int(self.keys[0]), int(self.keys[-1])
        span = hi - lo + 1
        if span <= max(1 << 16, 4 * self.n) and span <= 1 << 24:
            self.lo = lo
            self.table = np.full(span, -1, np.int64)
            self.table[self.keys - lo] = self.ids


class _ObjInterner:
    """Persistent map of string (object) values → dense ids. The batch is factorized in C
    (np.unique over a fixed-width unicode copy); only each distinct value of the batch touches
    the dict (a per-distinct-value loop, not per tuple)."""

    def __init__(self):
        self.d: dict = {}

    def nbytes(self) -> int:
        return 100 * len(self.d)

    def map(self, x: np.ndarray) -> np.ndarray:
        if not len(x):
            return _EMPTY_I
        try:
            u, inv = np.unique(x.astype(str), return_inverse=True)
        except (TypeError, ValueError):  # pragma: no cover - non-str objects
            u, inv = np.unique(x, return_inverse=True)
        d = self.d
        ids = np.empty(len(u), np.int64)
        for i, v in enumerate(u.tolist()):  # per distinct value of the batch
            code = d.get(v)
            if code is None:
                code = d[v] = len(d)
            ids[i] = code
        return ids[inv.reshape(-1)]


def _int_key(v: np.ndarray, kind: str) -> np.ndarray:
    """Values of a numeric/bool column as int64 keys (equal values ⇔ equal keys)."""
    if kind == "float":
        w = v.astype(np.float64) + 0.0  # -0.0 → 0.0
        w = np.where(np.isnan(w), np.nan, w)
        return w.view(np.int64)
    if v.dtype == object:  # NULL-typed column: placeholders only
        return np.zeros(len(v), np.int64)
    return v.astype(np.int64, copy=False)


class _GroupKeys:
    """Dense group ids for the key columns (NULL is a value of its own), persistent."""

    def __init__(self, types):
        self.types = list(types)
        self.cols = [
            _ObjInterner() if dtype_of(t) is object and t.kind != "null" else _IntInterner() for t in self.types
        ]
        self.pairs = [_IntInterner() for _ in self.types[1:]]

    @property
    def n(self) -> int:
        """An upper bound of the ids handed out so far (ids are < n)."""
        if not self.types:
            return 1
        if len(self.types) == 1:
            c = self.cols[0]
            return (len(c.d) if isinstance(c, _ObjInterner) else c.n) + 1
        return self.pairs[-1].n

    def nbytes(self) -> int:
        return sum(c.nbytes() for c in self.cols) + sum(p.nbytes() for p in self.pairs)

    def map(self, vals: list[np.ndarray], nulls: list[np.ndarray | None], n: int) -> np.ndarray:
        if not self.types:
            return np.zeros(n, np.int64)
        gid = None
        for i, (t, v, m) in enumerate(zip(self.types, vals, nulls)):
            interner = self.cols[i]
            enc = (lambda x: x) if isinstance(interner, _ObjInterner) else (lambda x, kind=t.kind: _int_key(x, kind))
            if m is None:
                code = interner.map(enc(v)) + 1
            else:  # NULL: code 0 (only real values are interned)
                code = np.zeros(n, np.int64)
                code[~m] = interner.map(enc(v[~m])) + 1
            gid = code if gid is None else self.pairs[i - 1].map((gid << 32) | code)
        return gid


# ---------------------------------------------------------------- multisets for DISTINCT / min / max


class _Multiset:
    """Per (gid, value) live counts of one aggregate argument, sorted by (gid, value)."""

    def __init__(self, dt):
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

    def update(self, g_e, v_e, s_e, cell_e, cell_g, extremes):
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
            eorder, ekey = _pair_order(g_e, v_e)
            eps = np.empty(ne, bool)
            eps[0] = True
            eps[1:] = ekey[1:] != ekey[:-1]
            first = eorder[eps]
            ug, uv = g_e[first], v_e[first]
            upair = np.empty(ne, np.int64)
            upair[eorder] = np.cumsum(eps) - 1  # event → its pair
            glo = np.searchsorted(self.g, ug, "left")
            ghi = np.searchsorted(self.g, ug, "right")
            anchor = _search_in_ranges(self.v, glo, ghi, uv)
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
            ends = np.concatenate([_ranges(tlo, np.minimum(tlo + k, thi)), _ranges(np.maximum(thi - k, tlo), thi)])
            sub = np.unique(np.concatenate([sub, ends]))
        m = len(sub)
        G = np.concatenate([self.g[sub], g_e])
        V = np.concatenate([self.v[sub], v_e])
        D = np.concatenate([self.c[sub], s_e])
        A = np.concatenate([sub, anchor[upair]])  # every entry of a pair has the pair's anchor
        ext = {}
        if not len(G):
            for kind in extremes:
                ext[kind] = (empty_column_of(self.dt, ncells), np.zeros(ncells, bool))
            return trans, ext
        # stable sort by (gid, value): state entries first, then events in arrival (ts) order
        order, pkey = _pair_order(G, V)
        Gs, Vs, Ds = G[order], V[order], D[order]
        N = len(order)
        ps = np.empty(N, bool)  # pair starts
        ps[0] = True
        ps[1:] = pkey[1:] != pkey[:-1]
        cum = _seg_cumsum(Ds, ps)  # count after each entry
        isev = order >= m
        evpos = order[isev] - m
        before = cum - Ds
        tr = ((before == 0) & (Ds > 0)).astype(np.int8) - ((cum == 0) & (Ds < 0)).astype(np.int8)
        trans[evpos] = tr[isev]
        # new state: the entries read are replaced by the final live counts of their pairs, each
        # put back at its anchor (shifted by the entries removed before it)
        pe = _starts_to_ends(ps)
        keep = pe & (cum > 0)
        ng, nv, nc, na = Gs[keep], Vs[keep], cum[keep], A[order][keep]
        at = na - np.searchsorted(sub, na)
        rv = np.delete(self.v, sub)
        self.g = np.insert(np.delete(self.g, sub), at, ng)
        self.v = np.insert(rv, at, nv) if rv.dtype != object else _obj_insert(rv, at, nv)
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
                    res = _cover(ncells, st, en, rank, fill, np.minimum)
                else:
                    fill = -1
                    res = _cover(ncells, st, en, rank, fill, np.maximum)
                valid = res != fill
                vals = Vs[np.where(valid, res, 0)]
                ext[kind] = (vals, valid)
        elif extremes:
            for kind in extremes:
                ext[kind] = (empty_column_of(self.dt, 0), np.zeros(0, bool))
        return trans, ext


def _search_in_ranges(v: np.ndarray, lo: np.ndarray, hi: np.ndarray, x: np.ndarray) -> np.ndarray:
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


def _pair_order(G: np.ndarray, V: np.ndarray):
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
            u, rank = np.unique(vi, return_inverse=True)
            span = len(u)
    else:
        W = V + 0.0 if V.dtype.kind == "f" else V
        try:
            u, rank = np.unique(W.astype(str) if W.dtype == object else W, return_inverse=True)
        except (TypeError, ValueError):  # pragma: no cover - non-str objects
            u, rank = np.unique(W, return_inverse=True)
        span = len(u)
    rank = rank.reshape(-1).astype(np.int64, copy=False)
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


def empty_column_of(dt, n: int = 0) -> np.ndarray:
    if dt is object:
        out = np.empty(n, object)
        out[:] = ""
        return out
    return np.zeros(n, dt)


def _obj_insert(arr: np.ndarray, pos: np.ndarray, vals: np.ndarray) -> np.ndarray:
    out = np.insert(arr, pos, vals)
    return out if out.dtype == object else out.astype(object)


# ---------------------------------------------------------------- the operator


@dataclass
class _Spec:
    kind: str  # rows, cnt, dcnt, sum, dsum, avg, davg, min, max, udaf
    ai: int = -1  # argument index
    floating: bool = False  # float sum/avg
    impl: object = None  # UDAF implementation
    distinct: bool = False


class AggregateOp(Operator):
    kind = "aggregate"
    COMPACT_MIN = 1 << 16  # renumber groups only past this many group ids (tests lower it)

    def __init__(
        self,
        inputs,
        output,
        ids,
        keys: tuple[Expr, ...],
        aggs: tuple[AggCall, ...],
        evaluator: Evaluator,
        compat: bool = False,
        options=None,
    ):
        super().__init__(inputs, output, ids, options)
        self.keys = tuple(keys)
        self.aggs = tuple(aggs)
        self.ev = evaluator
        self.compat = compat
        self.key_types = [k.type for k in self.keys]
        self.out_types = self.key_types + [a.type for a in self.aggs]
        self.args: list[Expr] = []
        self.specs: list[_Spec] = []
        for a in self.aggs:
            self.specs.append(self._spec(a))
        # additive quantities: ("rows",) / ("cnt"|"dcnt"|"sum"|"dsum", ai)
        self.quantities: list[tuple] = [("rows", -1)]
        self.multisets: dict[int, list[str]] = {}  # ai → extremes wanted
        for s in self.specs:
            need = {
                "cnt": [("cnt", s.ai)],
                "dcnt": [("dcnt", s.ai)],
                "sum": [("cnt", s.ai), ("sum", s.ai)],
                "avg": [("cnt", s.ai), ("sum", s.ai)],
                "dsum": [("dcnt", s.ai), ("dsum", s.ai)],
                "davg": [("dcnt", s.ai), ("dsum", s.ai)],
            }.get(s.kind, [])
            for q in need:
                if q not in self.quantities:
                    self.quantities.append(q)
            if s.kind in ("dcnt", "dsum", "davg", "min", "max") or (s.kind == "udaf" and s.distinct):
                ex = self.multisets.setdefault(s.ai, [])
                if s.kind in ("min", "max") and s.kind not in ex:
                    ex.append(s.kind)
        self.floating_arg = [a.type.kind == "float" for a in self.args]
        self.arg_dt = [dtype_of(a.type) if a.type.kind != "null" else np.int64 for a in self.args]
        self.ms = {ai: _Multiset(self.arg_dt[ai]) for ai in self.multisets}
        self.gkeys = _GroupKeys(self.key_types)
        self.scalar_row = not self.keys and not compat  # one row at every instant from t0
        self.need_init = self.scalar_row
        self.udaf_states: dict[int, dict] = {j: {} for j, s in enumerate(self.specs) if s.kind == "udaf"}
        # per-group state, indexed by gid (grown on demand)
        self.cap = 0
        self.pg: dict[str, np.ndarray] = {}
        self._defaults: dict[str, tuple] = {}
        self._declare("o_exists", np.bool_, False)
        self._declare("o_id", np.uint64, 0)
        self._declare("k_set", np.bool_, False)  # key values of the group stored
        for i, t in enumerate(self.key_types):
            self._declare(f"k_val{i}", dtype_of(t), None)
            self._declare(f"k_null{i}", np.bool_, True)
        for j, a in enumerate(self.aggs):
            self._declare(f"o_val{j}", dtype_of(a.type), None)
            self._declare(f"o_null{j}", np.bool_, True)
        for q in self.quantities:
            if q[0] in ("sum", "dsum") and self.floating_arg[q[1]]:
                self._declare(f"q_hi{q}", np.float64, 0.0)
                self._declare(f"q_lo{q}", np.float64, 0.0)
            else:
                self._declare(f"q{q}", np.int64, 0)
        self._ensure(1)

    # ------------------------------------------------------------ set-up helpers
    def _arg(self, e: Expr) -> int:
        if e not in self.args:
            self.args.append(e)
        return self.args.index(e)

    def _spec(self, a: AggCall) -> _Spec:
        f = a.func.lower()
        if f == "count" and a.arg is None:
            return _Spec("rows")
        ai = self._arg(a.arg)
        if f not in _BUILTINS:
            fn = self.ev.functions.aggregate(f)
            if fn is None or fn.impl is None:
                raise EngineError("no_implementation", f"aggregate {a.func}() has no implementation")
            return _Spec("udaf", ai, impl=fn.impl, distinct=a.distinct)
        floating = a.arg.type.kind == "float"
        if f in ("min", "max"):
            return _Spec(f, ai)
        if f == "count":
            return _Spec("dcnt" if a.distinct else "cnt", ai)
        if f == "sum":
            return _Spec("dsum" if a.distinct else "sum", ai, floating)
        return _Spec("davg" if a.distinct else "avg", ai, floating)

    def _declare(self, name: str, dt, default) -> None:
        self._defaults[name] = (dt, default)
        self.pg[name] = self._new_array(dt, default, 0)

    @staticmethod
    def _new_array(dt, default, n):
        if dt is object:
            a = np.empty(n, object)
            a[:] = ""
            return a
        return np.full(n, 0 if default is None else default, dt)

    def _ensure(self, n: int) -> None:
        if n <= self.cap:
            return
        cap = max(n, 2 * self.cap, 16)
        for name, arr in self.pg.items():
            dt, default = self._defaults[name]
            new = self._new_array(dt, default, cap)
            new[: len(arr)] = arr
            self.pg[name] = new
        self.cap = cap

    def state_bytes(self) -> int:
        n = self.gkeys.nbytes() + sum(m.nbytes() for m in self.ms.values())
        for arr in self.pg.values():
            n += arr.nbytes if arr.dtype != object else 8 * len(arr)
        return n + 200 * sum(len(s) for s in self.udaf_states.values())

    # ------------------------------------------------------------ processing
    def process(self, inputs, bound):
        b = inputs[0]
        # the scalar row's first instant is t0, if the input ever started (docs/semantics.md:
        # a query none of whose sources saw an element or heartbeat has no instants)
        init = self.need_init and self.t0 is not None and bound >= self.t0 and self.inputs[0].start is not None
        if init:
            self.need_init = False
        n = len(b) + init
        if not n:
            return Batch.empty(self.out_types)
        pg = self.pg

        # 1. keys → dense group ids; argument values
        kv, kn = [], []
        for k in self.keys:
            v, m = self.ev.eval(k, b)
            kv.append(_as_dtype(v, dtype_of(k.type)))
            kn.append(None if m is None or not m.any() else m)
        gid = self.gkeys.map(kv, kn, len(b))
        self._ensure(self.gkeys.n)
        if self.keys and len(gid):
            self._store_keys(gid, kv, kn)
        av, an, nulls_in = [], [], []  # values (dtype per arg), not-NULL masks, any NULL
        for ai, e in enumerate(self.args):
            v, m = self.ev.eval(e, b)
            if e.type.kind == "null":
                v, m = np.zeros(len(b), np.int64), np.ones(len(b), bool)
            av.append(_as_dtype(v, self.arg_dt[ai]))
            an.append(np.ones(len(b), bool) if m is None else ~m)
            nulls_in.append(m is not None and bool(m.any()))
        ts, sign = b.ts, b.sign.astype(np.int64)
        if init:  # the scalar row's first instant: a weightless event at t0 makes a cell there
            gid = np.concatenate([np.zeros(1, np.int64), gid])
            ts = np.concatenate([np.array([self.t0], np.int64), ts])
            sign = np.concatenate([np.zeros(1, np.int64), sign])
            av = [np.concatenate([empty_column_of(self.arg_dt[i], 1), v]) for i, v in enumerate(av)]
            an = [np.concatenate([np.zeros(1, bool), m]) for m in an]
            nulls_in = [True] * len(an)

        # 2. (gid, ts) order, cells
        order = _stable_order(gid, self.gkeys.n)
        sg, sts = gid[order], ts[order]
        gstart = np.empty(n, bool)
        gstart[0] = True
        np.not_equal(sg[1:], sg[:-1], out=gstart[1:])
        cend = np.empty(n, bool)
        cend[-1] = True
        cend[:-1] = gstart[1:] | (sts[1:] != sts[:-1])
        ce = np.flatnonzero(cend)
        ncells = len(ce)
        cell_g, cell_ts = sg[ce], sts[ce]
        seg = np.cumsum(gstart) - 1
        cell_gs = np.flatnonzero(gstart)[seg[ce]]  # first sorted position of the cell's group
        ssign = sign[order]

        # 3. multisets: transitions (DISTINCT) and extremes (min/max)
        trans: dict[int, np.ndarray] = {}
        extremes: dict[tuple, tuple] = {}
        if self.multisets:
            cell_of = np.empty(n, np.int64)
            cell_of[order] = np.cumsum(cend) - cend
            for ai, ex in self.multisets.items():
                idx = np.flatnonzero(an[ai] & (sign != 0))
                tr, res = self.ms[ai].update(gid[idx], av[ai][idx], sign[idx], cell_of[idx], cell_g, ex)
                full = np.zeros(n, np.int64)
                full[idx] = tr
                trans[ai] = full
                for kind, r in res.items():
                    extremes[(ai, kind)] = r

        # 4. additive quantities at the cell ends
        qv: dict[tuple, object] = {}
        deltas: dict[tuple, np.ndarray] = {}  # int quantity → its change over each cell
        for q in self.quantities:
            kind, ai = q
            if kind == "cnt" and not nulls_in[ai]:
                deltas[q] = deltas[("rows", -1)]  # no NULLs in this batch: same change as the rows
                qv[q] = pg[f"q{q}"][cell_g] + deltas[q]
                continue
            if kind == "rows":
                w = ssign
            elif kind == "cnt":
                w = ssign * an[ai][order]
            elif kind == "dcnt":
                w = trans[ai][order]
            else:
                weight = sign if kind == "sum" else trans[ai]
                x = (np.where(an[ai], av[ai], 0) if nulls_in[ai] else av[ai]) * weight
                w = x[order]
            if kind in ("sum", "dsum") and self.floating_arg[ai]:
                qv[q] = self._fsum_cells(
                    w.astype(np.float64), ce, cell_gs, pg[f"q_hi{q}"][cell_g], pg[f"q_lo{q}"][cell_g]
                )
            else:
                cs = np.empty(n + 1, np.int64)
                cs[0] = 0
                np.cumsum(w, out=cs[1:])
                deltas[q] = cs[ce + 1] - cs[cell_gs]
                qv[q] = pg[f"q{q}"][cell_g] + deltas[q]

        # 5. output values per cell
        rows = qv[("rows", -1)]
        exists = np.ones(ncells, bool) if self.scalar_row else rows > 0
        outs = []
        for j, s in enumerate(self.specs):
            dt = dtype_of(self.aggs[j].type)
            if s.kind == "rows":
                outs.append((rows, np.zeros(ncells, bool)))
            elif s.kind in ("cnt", "dcnt"):
                outs.append((qv[(s.kind, s.ai)], np.zeros(ncells, bool)))
            elif s.kind in ("sum", "dsum", "avg", "davg"):
                d = "d" if s.kind[0] == "d" else ""
                cnt = qv[(d + "cnt", s.ai)]
                tot = qv[(d + "sum", s.ai)]
                if isinstance(tot, tuple):
                    tot = tot[0]
                null = cnt <= 0
                if s.kind.endswith("avg"):
                    with np.errstate(invalid="ignore", divide="ignore"):
                        val = tot.astype(np.float64) / np.where(null, 1, cnt)
                else:
                    val = tot
                outs.append((_as_dtype(np.where(null, 0, val), dt), null))
            elif s.kind in ("min", "max"):
                vals, valid = extremes[(s.ai, s.kind)]
                outs.append((_as_dtype(vals, dt), ~valid))
            else:
                w = trans[s.ai] if s.distinct else sign
                res = self._udaf_cells(j, s, order, sg, cend, w, av[s.ai], an[s.ai], ncells)
                outs.append(_column(res, dt))

        # 6. changes against the previous cell of the group (or the carried row) and emission
        same = np.zeros(ncells, bool)
        same[1:] = cell_g[1:] == cell_g[:-1]
        prev_exists = pg["o_exists"][cell_g]
        prev_exists[1:] = np.where(same[1:], exists[:-1], prev_exists[1:])
        diff = np.zeros(ncells, bool)
        prevs = []
        for j, (v, nl) in enumerate(outs):
            pv = pg[f"o_val{j}"][cell_g]
            pn = pg[f"o_null{j}"][cell_g]
            pv[1:] = np.where(same[1:], v[:-1], pv[1:])
            pn[1:] = np.where(same[1:], nl[:-1], pn[1:])
            prevs.append((pv, pn))
            diff |= (nl != pn) | (~nl & np.asarray(v != pv, bool))
        changed = (exists != prev_exists) | (exists & diff)
        chg = np.flatnonzero(changed)
        ins_mask = exists[chg]
        del_mask = prev_exists[chg]
        cg = cell_g[chg]
        nid = np.zeros(len(chg), np.uint64)
        nid[ins_mask] = self.ids.take(int(ins_mask.sum()))
        old_id = pg["o_id"][cg]
        if len(chg) > 1:
            gsame = cg[1:] == cg[:-1]
            old_id[1:] = np.where(gsame, nid[:-1], old_id[1:])
        ins_c = chg[ins_mask]
        out = self._emit(cell_g, cell_ts, chg, del_mask, ins_mask, old_id, nid, outs, prevs)

        # 7. carry the state of every touched group (its last cell)
        lastc = np.flatnonzero(_starts_to_ends(np.r_[True, ~same[1:]] if ncells else np.zeros(0, bool)))
        G = cell_g[lastc]
        pg["o_exists"][G] = exists[lastc]
        for j, (v, nl) in enumerate(outs):
            pg[f"o_val{j}"][G] = v[lastc]
            pg[f"o_null{j}"][G] = nl[lastc]
        if len(ins_c):
            ig = cell_g[ins_c]
            last_ins = _starts_to_ends(np.r_[True, ig[1:] != ig[:-1]])
            pg["o_id"][ig[last_ins]] = nid[ins_mask][last_ins]
        for q in self.quantities:
            val = qv[q]
            if isinstance(val, tuple):
                hi, lo = val[0][lastc], val[1][lastc]
                empty = qv[("cnt" if q[0] == "sum" else "dcnt", q[1])][lastc] <= 0
                pg[f"q_hi{q}"][G] = np.where(empty, 0.0, hi)  # no values left: exactly 0
                pg[f"q_lo{q}"][G] = np.where(empty, 0.0, lo)
            else:
                pg[f"q{q}"][G] = val[lastc]
        if self.udaf_states:
            dead = G[rows[lastc] <= 0].tolist()
            for states in self.udaf_states.values():
                for g in dead:  # per dead group: frees UDAF states
                    states.pop(g, None)
        self._maybe_compact()
        return out

    # ------------------------------------------------------------ pieces
    @staticmethod
    def _fsum_cells(x, ce, cell_gs, carry_hi, carry_lo):
        """Compensated segmented sums of float64 `x` (sorted by group) at the cell ends, plus the
        carried (hi, lo) totals: returns (hi, lo) per cell."""
        s = np.cumsum(x)  # sequential: s[i] = fl(s[i-1] + x[i]) exactly, so TwoSum recovers the error
        prev = np.empty_like(s)
        if len(s):
            prev[0] = 0.0
            prev[1:] = s[:-1]
        with np.errstate(invalid="ignore", over="ignore"):
            bb = s - prev
            err = (prev - (s - bb)) + (x - bb)
            err = np.where(np.isfinite(err), err, 0.0)
            c = np.cumsum(err)
            s_pad = np.concatenate([[0.0], s])
            c_pad = np.concatenate([[0.0], c])
            d, e1 = _two_sum(s_pad[ce + 1], -s_pad[cell_gs])
            hi, e2 = _two_sum(d, carry_hi)
            lo = (e1 + e2) + (c_pad[ce + 1] - c_pad[cell_gs]) + carry_lo
            hi, lo = _two_sum(hi, lo)
            lo = np.where(np.isfinite(lo), lo, 0.0)
        return hi, lo

    def _udaf_cells(self, j, spec, order, sg, cend, weight, vals, notnull, ncells):
        """A UDAF's value at every cell. Per-event Python loop: the UDAF is an opaque Python
        object (init/add/remove/result), so there is nothing to vectorize."""
        impl = spec.impl
        states = self.udaf_states[j]
        w = weight[order]
        # within each cell, adds before removes: a tuple may enter and leave a window at one
        # instant with its `−` first; this way a UDAF never removes a value it does not hold
        cell = np.cumsum(cend) - cend
        within = np.argsort(cell * 2 + (w < 0), kind="stable")
        o = order[within]
        gl = sg.tolist()
        wl = w[within].tolist()
        vl = vals[o].tolist()
        nl = notnull[o].tolist()
        el = cend.tolist()
        res = [None] * ncells
        cur, st, k = None, None, 0
        for i in range(len(gl)):
            g = gl[i]
            if g != cur:
                if cur is not None:
                    states[cur] = st
                cur = g
                st = states[g] if g in states else impl.init()
            w = wl[i]
            if w and nl[i]:
                st = impl.add(st, vl[i]) if w > 0 else impl.remove(st, vl[i])
            if el[i]:
                res[k] = impl.result(st)
                k += 1
        if cur is not None:
            states[cur] = st
        return res

    def _store_keys(self, gid, kv, kn) -> None:
        """Remember the key values of groups seen for the first time (output columns)."""
        new = np.flatnonzero(~self.pg["k_set"][gid])
        if not len(new):
            return
        g, first = np.unique(gid[new], return_index=True)
        rows = new[first]
        for i in range(len(self.keys)):
            self.pg[f"k_val{i}"][g] = kv[i][rows]
            self.pg[f"k_null{i}"][g] = False if kn[i] is None else kn[i][rows]
        self.pg["k_set"][g] = True

    def _emit(self, cell_g, cell_ts, chg, del_mask, ins_mask, old_id, nid, outs, prevs) -> Batch:
        """Rows for the changed cells `chg`: `−` (old row, old id) where the group existed before
        the cell, `+` (new row, new id) where it exists after, in ts order. The changed cells are
        ordered by ts (stable, so per instant by group); each cell's rows are laid out as a
        (del, ins) pair of slots, and the slots of missing rows (a group appearing or becoming
        empty) are dropped by one gather at the kept slots, found once per batch. Only gathers,
        strided writes and no np.where: this runs on every output row."""
        k = len(chg)
        if not k or not (del_mask.any() or ins_mask.any()):
            return Batch.empty(self.out_types)
        cts = cell_ts[chg]
        tmin = int(cts.min())
        o = _stable_order(cts - tmin, int(cts.max()) - tmin + 1)
        c = chg[o]  # changed cells in output order
        dm, im = del_mask[o], ins_mask[o]
        slot = None  # kept slots (None: all of them)
        if not (dm.all() and im.all()):
            keep = np.empty((k, 2), bool)
            keep[:, 0] = dm
            keep[:, 1] = im
            slot = np.flatnonzero(keep.reshape(-1))

        def pick(a, b, dt):  # slot 2j: a[j] (the del row), slot 2j + 1: b[j] (the ins row)
            out = np.empty((k, 2), dt)
            out[:, 0] = a
            out[:, 1] = b
            out = out.reshape(-1)
            return out if slot is None else out[slot]

        cts_o = cts[o]
        ts = pick(cts_o, cts_o, np.int64)
        sign = pick(-1, 1, np.int8)
        ids = pick(old_id[o], nid[o], np.uint64)
        cols, nulls = [], []
        if self.keys:
            g = cell_g[c]
            for i in range(len(self.keys)):
                kv = self.pg[f"k_val{i}"][g]
                cols.append(pick(kv, kv, kv.dtype))
                m = self.pg[f"k_null{i}"][g]
                nulls.append(pick(m, m, bool) if m.any() else None)
        for (v, nl), (pv, pn) in zip(outs, prevs):
            cols.append(pick(pv[c], v[c], v.dtype))
            pm, nm = pn[c], nl[c]
            m = pick(pm, nm, bool) if (pm.any() or nm.any()) else None
            nulls.append(m if m is not None and m.any() else None)
        return Batch(cols, nulls, ts, sign, ids)

    # ------------------------------------------------------------ compaction of dead groups
    def _maybe_compact(self) -> None:
        """Renumber the groups when most ids belong to groups that have become empty, so state
        follows the live groups, not the history of keys (vectorized, amortized O(1))."""
        n = self.gkeys.n
        if not self.keys or n < self.COMPACT_MIN:
            return
        live = np.flatnonzero(self.pg[f"q{('rows', -1)}"][:n] > 0)
        if 4 * len(live) > n:
            return
        fresh = _GroupKeys(self.key_types)
        kv = [self.pg[f"k_val{i}"][live] for i in range(len(self.keys))]
        kn = [self.pg[f"k_null{i}"][live] for i in range(len(self.keys))]
        newg = fresh.map(kv, [m if m.any() else None for m in kn], len(live))
        remap = np.full(n, -1, np.int64)
        remap[live] = newg
        pg = {}
        for name, arr in self.pg.items():
            dt, default = self._defaults[name]
            new = self._new_array(dt, default, max(fresh.n, 16))
            new[newg] = arr[live]
            pg[name] = new
        self.pg, self.cap, self.gkeys = pg, max(fresh.n, 16), fresh
        for ms in self.ms.values():
            ms.remap(remap)
        for j, states in self.udaf_states.items():
            self.udaf_states[j] = {int(remap[g]): st for g, st in states.items() if remap[g] >= 0}

    # operator protocol
    @classmethod
    def from_node(cls, node, inputs, output, ids, ev, options, stores=None):
        return cls(inputs, output, ids, node.keys, node.aggs, ev, compat=options.compat)

    def current_rows(self, at: int) -> Batch:
        """The current groups' output rows as `+` elements at instant `at`."""
        pg = self.pg
        live = np.flatnonzero(pg["o_exists"])
        cols, nulls = [], []
        for i in range(len(self.keys)):
            cols.append(pg[f"k_val{i}"][live])
            m = pg[f"k_null{i}"][live]
            nulls.append(m if m.any() else None)
        for j in range(len(self.aggs)):
            cols.append(pg[f"o_val{j}"][live])
            m = pg[f"o_null{j}"][live]
            nulls.append(m if m.any() else None)
        n = len(live)
        return Batch(cols, nulls, np.full(n, at, np.int64), np.ones(n, np.int8), pg["o_id"][live].copy())

    def snapshot(self, at, inputs):
        return self.current_rows(at)

    def snapshotable(self, inputs):
        return True

    @classmethod
    def state_class(cls, node, kids):
        """A scalar count/sum/avg keeps O(1) state; otherwise state grows with the input's
        relation; the output of a grouped aggregate is as large as its input's."""
        from cqlstream.engine.operators.base import BOUNDED

        worst = max(kids, default=BOUNDED)
        scalar_o1 = not node.keys and all(
            a.func.lower() in ("count", "sum", "avg") and not a.distinct for a in node.aggs
        )
        return (BOUNDED if not node.keys else worst), [(BOUNDED if scalar_o1 else worst, "aggregate state")]
