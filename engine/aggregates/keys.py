"""Group keys → dense group ids, persistently across batches (NULL is a key value of its own).

Every key column is first turned into int64 codes: integer-like values as themselves (floats by
their bit pattern, `int_key`), strings through `ObjInterner` (a dict touched once per distinct
value of a batch). Then, while the columns' value ranges seen so far fit 62 bits, the codes of a
row are packed side by side into one int64 (engine/operators/valuekeys.py's `KeyLayout`: per
column value − base + 1, 0 for NULL) and one `IntInterner` maps packed keys to group ids: one
sort of the batch's keys, one search and one insert into the sorted known keys per batch, however
many key columns. A batch outside the layout re-packs the known keys under a wider one (packing is
monotone per column, so the sorted keys stay sorted and ids do not change). When the ranges no
longer fit 62 bits, the keys move for good to `ChainKeys` (one interner per column chained by
interning (previous id, code) pairs), whose ids are translated to the ids already handed out.
In packed mode the aggregate releases the groups that became empty (`GroupKeys.release`): their
keys leave the sorted arrays and their ids go to new keys, so a window's short-lived groups keep
the interner and the group state as large as the live groups. When the layout has few bits, the
interner's direct table spans all of it (`IntInterner.full`), so every batch is a gather and only
its new keys are sorted. A compaction (`GroupKeys.compacted`) keeps the live groups' sorted packed
keys and re-packs them under a layout fitted to them: the same ids a fresh interner would give.

Given the rows' signs, the deletes of an input that retracts in insertion order (a window) take
their group ids from a `RetractFifo` (engine/operators/retract_fifo.py) of the packed keys and
ids of the inserts, checked by comparing the packed keys, instead of being interned a second
time; the first delete out of order switches that off for good (packed mode only).
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from cqlstream.cql.types import DataType
from cqlstream.engine.batch import dtype_of
from cqlstream.engine.kernels import factorize, unique_rows
from cqlstream.engine.operators.retract_fifo import RetractFifo
from cqlstream.engine.operators.valuekeys import KeyLayout

_EMPTY_I = np.zeros(0, np.int64)


class IntInterner:
    """Persistent map int64 key → dense id 0, 1, 2, ... (in order of discovery), vectorized.
    Released keys (`release`) are forgotten and their ids handed out again to new keys, so a
    stream of short-lived keys keeps the arrays as large as the live keys, not all keys ever seen.

    Authoritative form: sorted `keys` with their `ids` (np.searchsorted). Accelerator: when the
    known keys span a small range, a direct lookup `table` (id or −1) over [lo, lo + len). When
    the owner knows every key it will map lies in [0, `full`) and that range is small (a packed
    layout of few bits), the table spans all of it, so no batch falls outside and needs a sort."""

    full = 0  # > 0: every key mapped is in [0, full) (the owner's layout): the table may span it

    def __init__(self) -> None:
        self.keys = _EMPTY_I
        self.ids = _EMPTY_I
        self.n = 0
        self.lo = 0
        self.table: np.ndarray | None = None
        self.added: np.ndarray | None = None  # the last _add's new keys (positions in its u), None: none
        self.free = _EMPTY_I  # released ids, handed out before new ones
        self.new_ids = self.new_rows = _EMPTY_I

    def nbytes(self) -> int:
        return self.keys.nbytes + self.ids.nbytes + (0 if self.table is None else self.table.nbytes)

    def map(self, x: np.ndarray, compact: np.ndarray | None = None) -> np.ndarray:
        """Ids of keys `x`. `compact`: the same keys renumbered into a narrower range in the same
        order (equal ↔ equal, x order ↔ compact order), so the batch factorizes by a cheap sort.
        Afterwards `new_ids` are the ids this call added and `new_rows` one row of x with each."""
        self.new_ids = self.new_rows = _EMPTY_I
        if not len(x):
            return _EMPTY_I
        t = self.table
        if t is not None and len(t) == self.full:  # spans every key there can be (lo = 0)
            return self._table_map(t, x, x)
        if t is not None and int(x.min()) >= self.lo and int(x.max()) < self.lo + len(t):
            return self._table_map(t, x, x - self.lo if self.lo else x)
        got = unique_rows(x) if compact is None else None
        if got is not None:
            u, inv, at = got  # at: one row of each distinct key
        else:
            if compact is None:
                u, inv = factorize(x)
            else:
                _, inv = factorize(compact)
            at = np.empty(int(inv.max()) + 1, np.int64)
            at[inv] = np.arange(len(x), dtype=np.int64)  # (numpy writes in order: the last row wins)
            if compact is not None:
                u = x[at]
        ids = self._add(u)
        if self.added is not None:
            self.new_ids, self.new_rows = ids.take(self.added), at.take(self.added)
        self._retable()
        return ids.take(inv)

    def _table_map(self, t: np.ndarray, x: np.ndarray, xo: np.ndarray) -> np.ndarray:
        """`map` through the direct table `t` (keys `x`, offsets `xo` = x − lo all within it):
        only the misses, the batch's new keys, are sorted and added."""
        out = t.take(xo)
        miss = out < 0
        if not miss.any():
            return out
        rows = np.flatnonzero(miss)
        xm = x.take(rows)
        got = unique_rows(xm)  # (np.unique's return_index takes a stable argsort: ~10x slower)
        if got is None:
            u, first = np.unique(xm, return_index=True)
        else:
            u, inv, _ = got
            first = np.empty(len(u), np.int64)  # the first miss with each key (the last write wins)
            first[inv[::-1]] = np.arange(len(xm) - 1, -1, -1, dtype=np.int64)
        self.new_ids = self._add(u)  # all unknown, all within the table's range: it stays
        self.new_rows = rows.take(first)
        assert self.table is not None
        out[rows] = self.table.take(xo.take(rows))  # only the misses changed
        return out

    def _add(self, u: np.ndarray) -> np.ndarray:
        """Ids of the sorted unique keys `u`, adding the unknown ones (released ids first)."""
        keys = self.keys
        K = len(keys)
        pos = np.searchsorted(keys, u)
        # the key at each position (the last key past the end: smaller than u there, so no match)
        found = keys.take(np.minimum(pos, K - 1)) == u if K else np.zeros(len(u), bool)
        ids = np.empty(len(u), np.int64)
        fi = np.flatnonzero(found)  # few known keys among many new ones: positions are cheaper
        ids[fi] = self.ids.take(pos.take(fi))
        # positions, not masks, over the new keys and the merged arrays: at Linear Road's
        # ~20k-key rounds a mixed mask indexes ~2x slower than positions (bench/README.md)
        new = np.flatnonzero(~found)
        k = len(new)
        self.added = new if k else None
        if k:
            ids[new] = nid = self._take_ids(k)
            un = u.take(new)
            # one merge pass for both arrays (np.insert would sort its positions and copy twice);
            # the known keys below the first new one stay where they are (a window's new keys are
            # mostly its latest minute's: past all known keys, merely appended)
            p0 = int(pos[new[0]])
            nk = np.empty(K + k, np.int64)
            ni = np.empty(K + k, np.int64)
            nk[:p0] = keys[:p0]
            ni[:p0] = self.ids[:p0]
            if p0 == K:  # all new keys past the known ones
                nk[K:] = un
                ni[K:] = nid
            else:
                dest = pos.take(new) + np.arange(-p0, k - p0, dtype=np.int64)  # in the tail from p0
                old = np.ones(K - p0 + k, bool)
                old[dest] = False
                oldp = np.flatnonzero(old)  # where the known keys go, in order
                tk, ti = nk[p0:], ni[p0:]
                tk[dest] = un
                tk[oldp] = keys[p0:]
                ti[dest] = nid
                ti[oldp] = self.ids[p0:]
            self.keys, self.ids = nk, ni
            t = self.table
            if t is not None:
                if int(un[0]) >= self.lo and int(un[-1]) < self.lo + len(t):
                    t[un - self.lo] = nid
                else:
                    self.table = None
        return ids

    def _take_ids(self, k: int) -> np.ndarray:
        """k ids for new keys: released ones first (in release order), then fresh ones from n."""
        f = self.free
        if not len(f):
            out = np.arange(self.n, self.n + k, dtype=np.int64)
            self.n += k
            return out
        if len(f) >= k:
            self.free = f[k:]
            return f[:k]
        out = np.concatenate([f, np.arange(self.n, self.n + k - len(f), dtype=np.int64)])
        self.n += k - len(f)
        self.free = _EMPTY_I
        return out

    def release(self, ids: np.ndarray) -> None:
        """Forget the keys of `ids` (distinct ids handed out and not released since): their ids
        are handed out again to later new keys, so the arrays follow the live keys only."""
        if not len(ids):
            return
        dead = np.zeros(self.n, bool)
        dead[ids] = True
        gone = dead.take(self.ids)
        t = self.table
        if t is not None:
            t[self.keys[gone] - self.lo] = -1
        keep = np.flatnonzero(~gone)  # one position array for both gathers
        self.keys, self.ids = self.keys.take(keep), self.ids.take(keep)
        self.free = np.concatenate([self.free, ids]) if len(self.free) else ids.astype(np.int64, copy=True)

    def _retable(self) -> None:
        if self.table is not None or not len(self.keys):
            return
        lo, hi = int(self.keys[0]), int(self.keys[-1])
        span = hi - lo + 1
        limit = min(max(1 << 16, 4 * self.n), 1 << 24)
        if 0 < self.full <= limit:  # the whole key range: no batch ever falls outside
            lo, span = 0, self.full
        if span <= limit:
            self.lo = lo
            self.table = np.full(span, -1, np.int64)
            self.table[self.keys - lo] = self.ids


class ObjInterner:
    """Persistent map of string (object) values → dense ids. The batch is factorized in C
    (np.unique over a fixed-width unicode copy); only each distinct value of the batch touches
    the dict (a per-distinct-value loop, not per tuple)."""

    def __init__(self) -> None:
        self.d: dict[object, int] = {}

    def nbytes(self) -> int:
        return 100 * len(self.d)

    def map(self, x: np.ndarray, compact: np.ndarray | None = None) -> np.ndarray:
        """Ids of keys `x`. `compact`: the same keys renumbered into a narrower range in the same
        order (equal ↔ equal, x order ↔ compact order), so the batch factorizes by a cheap sort."""
        if not len(x):
            return _EMPTY_I
        u, inv = factorize(x)
        d = self.d
        ids = np.empty(len(u), np.int64)
        for i, v in enumerate(u.tolist()):  # per distinct value of the batch
            code = d.get(v)
            if code is None:
                code = d[v] = len(d)
            ids[i] = code
        return ids[inv]


def int_key(v: np.ndarray, kind: str) -> np.ndarray:
    """Values of a numeric/bool column as int64 keys (equal values ⇔ equal keys)."""
    if kind == "float":
        w = v.astype(np.float64) + 0.0  # -0.0 → 0.0
        w = np.where(np.isnan(w), np.nan, w)
        return w.view(np.int64)
    if v.dtype == object:  # NULL-typed column: placeholders only
        return np.zeros(len(v), np.int64)
    return v.astype(np.int64, copy=False)


class ChainKeys:
    """Dense ids for int64 code columns (NULL is a value of its own): one interner per column,
    chained by interning (prefix id, code) pairs. Used when the packed layout does not fit."""

    def __init__(self, ncols: int) -> None:
        self.cols = [IntInterner() for _ in range(ncols)]
        self.pairs = [IntInterner() for _ in range(ncols - 1)]

    @property
    def n(self) -> int:
        """An upper bound of the ids handed out so far (ids are < n)."""
        return self.cols[0].n + 1 if len(self.cols) == 1 else self.pairs[-1].n

    def nbytes(self) -> int:
        return sum(c.nbytes() for c in self.cols) + sum(p.nbytes() for p in self.pairs)

    def map(self, codes: list[np.ndarray], nulls: list[np.ndarray | None], n: int) -> np.ndarray:
        gid: np.ndarray | None = None
        for i, (v, m) in enumerate(zip(codes, nulls)):
            if m is None:
                code = self.cols[i].map(v) + 1
            else:  # NULL: code 0 (only real values are interned)
                code = np.zeros(n, np.int64)
                code[~m] = self.cols[i].map(v[~m]) + 1
            gid = code if gid is None else self._pair(i - 1, gid, code)
        assert gid is not None
        return gid

    def _pair(self, i: int, gid: np.ndarray, code: np.ndarray) -> np.ndarray:
        """Intern (prefix id, code) pairs as (gid << 32) | code; the batch is factorized on
        gid · w + code (w > every code: same order, far narrower), which a plain sort handles."""
        w = int(code.max()) + 1
        g_hi = int(gid.max())
        compact = gid * w + code if g_hi < (1 << 62) // w else None
        return self.pairs[i].map((gid << 32) | code, compact)


Range = tuple[int, int] | None


class GroupKeys:
    """Dense group ids 0, 1, 2, ... for the key columns (NULL is a value of its own), persistent:
    packed keys through one interner while they fit 62 bits, else `ChainKeys` (module doc).
    In packed mode the ids of released groups are reused (`release`)."""

    def __init__(self, types: Iterable[DataType]) -> None:
        self.types = list(types)
        self.obj = [ObjInterner() if dtype_of(t) is object and t.kind != "null" else None for t in self.types]
        self.rng: list[Range] = [None] * len(self.types)  # union of the code ranges seen
        self.layout: KeyLayout | None = None
        self.packed: IntInterner | None = IntInterner()
        self.chain: ChainKeys | None = None
        self.tr = _EMPTY_I  # chain mode: chain id → group id (−1: none yet)
        self.count = 0  # chain mode: group ids handed out
        self.fresh = (_EMPTY_I, _EMPTY_I)  # groups the last map call created: (ids, one row of each)
        self.fifo = RetractFifo()  # packed keys and ids of inserts, for in-order deletes (packed mode)

    @property
    def n(self) -> int:
        """The number of group ids handed out so far (ids are < n); 1 without key columns."""
        if not self.types:
            return 1
        return self.packed.n if self.packed is not None else self.count

    def nbytes(self) -> int:
        n = sum(o.nbytes() for o in self.obj if o is not None) + self.tr.nbytes + self.fifo.nbytes()
        n += self.packed.nbytes() if self.packed is not None else 0
        return n + (self.chain.nbytes() if self.chain is not None else 0)

    def map(
        self, vals: list[np.ndarray], nulls: list[np.ndarray | None], n: int, sign: np.ndarray | None = None
    ) -> np.ndarray:
        """Group id of every row; `fresh` then holds the ids this call created and one row of
        each (the rows their key values are stored from). With `sign` (the rows' signs), deletes
        that retract the inserts in insertion order take their ids from the FIFO (module doc)."""
        self.fresh = (_EMPTY_I, _EMPTY_I)
        if not self.types or not n:
            return np.zeros(n, np.int64)
        codes = self._codes(vals, nulls, n)
        if self.packed is not None:
            rng = _ranges(codes, nulls)
            lay = self.layout
            if lay is None or not lay.covers(rng):
                self._widen(rng)
            else:
                self.rng = [_union(a, b) for a, b in zip(self.rng, rng)]
        if self.packed is not None:
            assert self.layout is not None
            it = self.packed
            x = _pack(self.layout, codes, nulls, n)
            if sign is not None and self.fifo.on:
                return self._fifo_map(it, x, sign)
            gid = it.map(x)
            self.fresh = (it.new_ids, it.new_rows)
            return gid
        return self._chain_map(codes, nulls, n)

    def _fifo_map(self, it: IntInterner, x: np.ndarray, sign: np.ndarray) -> np.ndarray:
        """Packed keys `x` → ids: the inserts (and weightless rows) through the interner, pushed
        onto the FIFO; the deletes from the FIFO's head when they match it, else interned too."""
        dels = sign < 0
        if not dels.any():
            gid = it.map(x)
            self.fresh = (it.new_ids, it.new_rows)
            ins = sign > 0
            if ins.all():
                self.fifo.push(x, gid)
            else:
                self.fifo.push(x[ins], gid[ins])
            return gid
        gid = np.empty(len(x), np.int64)
        di = np.flatnonzero(dels)
        ii = np.flatnonzero(~dels)
        if len(ii):
            xi = x.take(ii)
            gi = gid[ii] = it.map(xi)
            self.fresh = (it.new_ids, ii.take(it.new_rows))
            pos = sign.take(ii) > 0
            if pos.all():
                self.fifo.push(xi, gi)
            else:
                self.fifo.push(xi[pos], gi[pos])
        xd = x.take(di)
        got = self.fifo.take(xd)
        if got is None:  # out of order: interned (a valid delete's key is known: no new id, normally)
            got = it.map(xd)
            if len(it.new_ids):
                self.fresh = (
                    np.concatenate([self.fresh[0], it.new_ids]),
                    np.concatenate([self.fresh[1], di[it.new_rows]]),
                )
        gid[di] = got
        return gid

    def compacted(
        self, live: np.ndarray, kv: list[np.ndarray], kn: list[np.ndarray | None]
    ) -> tuple[GroupKeys, np.ndarray]:
        """A fresh instance holding only the groups `live` (their key values `kv`, NULL flags
        `kn`), and their new ids: those a fresh instance's `map` of them gives (the order of
        their packed keys). In packed mode without string columns the known keys are already
        sorted: the live ones are kept and re-packed under the fresh layout (monotone per column,
        so still sorted and numbered in that order), no sort or search of them again."""
        fresh = GroupKeys(self.types)
        it = self.packed
        L = len(live)
        if it is None or self.layout is None or not L or any(o is not None for o in self.obj):
            return fresh, fresh.map(kv, kn, L)
        rng = _ranges(fresh._codes(kv, kn, L), kn)
        lay = KeyLayout.fit(rng)
        alive = np.zeros(it.n, bool)
        alive[live] = True
        keep = np.flatnonzero(alive[it.ids])
        if lay is None or len(keep) != L:  # (every live group's key is known: never, but stay exact)
            return fresh, fresh.map(kv, kn, L)
        fresh.rng, fresh.layout = rng, lay
        ft = fresh.packed
        assert ft is not None
        ft.full = 1 << sum(lay.bits)
        ft.keys = _repack(self.layout, lay, it.keys.take(keep))
        ft.ids = np.arange(L, dtype=np.int64)
        ft.n = L
        ft._retable()
        remap = np.empty(it.n, np.int64)
        remap[it.ids.take(keep)] = ft.ids
        return fresh, remap.take(live)

    def adopt_fifo(self, old: GroupKeys, remap: np.ndarray) -> None:
        """After a compaction into this fresh instance: `old`'s FIFO, its ids renumbered by
        `remap` and its keys re-packed under this layout (off if either side does not pack)."""
        f = old.fifo
        if f.on and not len(f):  # nothing to carry over: this instance's own FIFO (on, empty) serves
            return
        if f.on and old.layout is not None and self.layout is not None and self.packed is not None:
            src, dst = old.layout, self.layout
            f.remap(remap)
            f.repack(lambda k: _repack(src, dst, k))
            self.fifo = f
        else:
            self.fifo.off()

    def release(self, gids: np.ndarray) -> None:
        """Groups `gids` (distinct, live ids) are gone: in packed mode their keys are forgotten
        and their ids reused for later new groups (the caller must have reset their state to
        that of a new group); the chained interners keep them (compaction reclaims those)."""
        if self.packed is not None and self.types:
            self.packed.release(gids)

    def _codes(self, vals: list[np.ndarray], nulls: list[np.ndarray | None], n: int) -> list[np.ndarray]:
        """int64 codes per column (equal values ⇔ equal codes; arbitrary under NULL)."""
        out = []
        for t, v, m, obj in zip(self.types, vals, nulls, self.obj):
            if obj is None:
                out.append(int_key(v, t.kind))
            elif m is None:
                out.append(obj.map(v))
            else:
                code = np.zeros(n, np.int64)
                code[~m] = obj.map(v[~m])
                out.append(code)
        return out

    def _widen(self, rng: list[Range]) -> None:
        """A layout covering every range seen and `rng`; the known keys re-packed under it (or
        moved to ChainKeys when no layout fits)."""
        merged = [_union(a, b) for a, b in zip(self.rng, rng)]
        lay = KeyLayout.fit(merged)
        it = self.packed
        assert it is not None
        old = self.layout
        if lay is None:
            self._to_chain()
            return
        self.rng = merged
        self.layout = lay
        it.full = 1 << sum(lay.bits)  # every key packed under `lay` is below this
        if old is not None and len(it.keys):
            it.keys = _repack(old, lay, it.keys)  # monotone per column: still sorted
        it.table = None
        it._retable()
        if old is not None:
            self.fifo.repack(lambda k: _repack(old, lay, k))

    def _to_chain(self) -> None:
        """Move the known keys to ChainKeys, keeping their group ids."""
        it = self.packed
        assert it is not None
        self.fifo.off()
        self.chain = ChainKeys(len(self.types))
        self.count = it.n
        self.tr = np.full(0, -1, np.int64)
        if self.layout is not None and len(it.keys):
            cols, nl = self.layout.unpack(it.keys)
            cid = self.chain.map(cols, [m if m.any() else None for m in nl], len(it.keys))
            self.tr = np.full(self.chain.n, -1, np.int64)
            self.tr[cid] = it.ids
        self.packed = None
        self.layout = None

    def _chain_map(self, codes: list[np.ndarray], nulls: list[np.ndarray | None], n: int) -> np.ndarray:
        assert self.chain is not None
        cid = self.chain.map(codes, nulls, n)
        if len(self.tr) < self.chain.n:
            tr = np.full(max(self.chain.n, 2 * len(self.tr)), -1, np.int64)
            tr[: len(self.tr)] = self.tr
            self.tr = tr
        g = self.tr[cid]
        miss = np.flatnonzero(g < 0)
        if len(miss):
            u, first = np.unique(cid[miss], return_index=True)  # new groups numbered in chain-id order
            ids = np.arange(self.count, self.count + len(u), dtype=np.int64)
            self.tr[u] = ids
            self.count += len(u)
            self.fresh = (ids, miss[first])
            g = self.tr[cid]
        return g


def _ranges(codes: list[np.ndarray], nulls: list[np.ndarray | None]) -> list[Range]:
    """(min, max) of each column's non-NULL codes; None for a column with none."""
    out: list[Range] = []
    for c, m in zip(codes, nulls):
        v = c if m is None else c[~m]
        out.append((int(v.min()), int(v.max())) if len(v) else None)
    return out


def _union(a: Range, b: Range) -> Range:
    if a is None or b is None:
        return a if b is None else b
    return (min(a[0], b[0]), max(a[1], b[1]))


def _pack(lay: KeyLayout, codes: list[np.ndarray], nulls: list[np.ndarray | None], n: int) -> np.ndarray:
    """Packed keys of all n rows (every non-NULL code covered by `lay`)."""
    key: np.ndarray | None = None
    for c, m, base, shift in zip(codes, nulls, lay.base, lay.shifts):
        code = c - np.int64(base - 1)
        if m is not None:
            code[m] = 0
        if key is None:  # the first column: shift 0, the key itself
            key = code
            continue
        code <<= shift
        key |= code
    return np.zeros(n, np.int64) if key is None else key


def _repack(old: KeyLayout, new: KeyLayout, keys: np.ndarray) -> np.ndarray:
    """Keys packed under `old` re-packed under `new` (which covers them)."""
    cols, nl = old.unpack(keys)
    return _pack(new, cols, list(nl), len(keys))
