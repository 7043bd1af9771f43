"""Multiplicities by whole-tuple value (NULL equals NULL), shared by Distinct, the set operations
and Istream/Dstream (docs/semantics.md: they compare whole tuples).

`ValueTable` maps every value with a live count to a *slot* (a small int). A delta batch is
factorized to batch-local codes (per-column codes: value − min for integers, np.unique for floats
and strings; combined into one dense key), so the map is only asked about each distinct value of
the batch once, never each tuple. While the columns are integer-like (ints, booleans, timestamps)
and their ranges fit 62 bits, a value is packed into one int64 key (valuekeys.py) and looked up in
a numpy hash map (intmap.py), vectorized; otherwise — floats, strings, or once the ranges outgrow
62 bits, when the live values move over for good — through a dict row-tuple → slot, one lookup per
distinct value. A value's slot never changes while it is live. Per slot the table carries, as
numpy arrays, the count of every input side, a `vmix` (splitmix64 of a fresh engine id taken when
the slot is assigned: the seed of derived output ids, mixed once, not at every output) and FIFO serials of output copies inserted/deleted so
far. A slot is freed when all its counts and live output copies are zero, so memory follows the
live values, not the history.

`ValueTable.changes` then gives, per (value, instant) the batch touches, the multiplicity before
and after the instant (net over the instant): the rows are grouped by value with ts order kept
(one radix or plain argsort), per-group deltas come from np.add.reduceat and a segmented
cumulative sum over each value's groups adds them to the carried counts.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from itertools import repeat
from typing import TYPE_CHECKING

import numpy as np

from cqlstream.engine.batch import Batch, splitmix64, splitmix64_inplace
from cqlstream.engine.kernels import combine_codes, dense_codes, row_codes, stable_order
from cqlstream.engine.operators.intmap import IntMap
from cqlstream.engine.operators.valuekeys import KeyLayout, packable, ranges

if TYPE_CHECKING:
    from cqlstream.cql.types import DataType
    from cqlstream.engine.operators.base import IdSource

_EMPTY_I = np.zeros(0, np.int64)
_NAN = float("nan")


def instant_value_groups(
    ts: np.ndarray, cols: list[np.ndarray], nulls: list[np.ndarray | None]
) -> tuple[np.ndarray, np.ndarray]:
    """Rows (ts non-decreasing) grouped by (instant, whole-tuple value): (order, brk) with
    `order` the row positions, groups in ts order and positions ascending within a group, and
    brk[i] True where order[i] starts a group. One np.sort of int64 keys with the position in the
    low bits (SIMD-fast, unlike argsort); no Python per value and no carried state."""
    order, skey = instant_value_order(ts, cols, nulls)
    brk = np.empty(len(ts), bool)
    brk[0] = True
    np.not_equal(skey[1:], skey[:-1], out=brk[1:])
    return order, brk


def instant_value_order(
    ts: np.ndarray, cols: list[np.ndarray], nulls: list[np.ndarray | None], low: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Rows (ts non-decreasing, at least one) sorted by (instant, whole-tuple value[, low]):
    (order, skey) with `order` the row positions and skey[i] the sort key of row order[i]
    (equal keys ↔ equal (instant, value[, low])), positions ascending among equal keys. `low`
    (bool per row) is the key's lowest bit: skey >> 1 is then the (instant, value) group, its
    rows with low False first."""
    n = len(ts)
    t0, t1 = int(ts[0]), int(ts[-1])
    if t1 - t0 <= 4 * n + 1024:
        key, width = ts - t0, t1 - t0 + 1
    else:  # sparse instants: their dense rank
        step = np.empty(n, np.int64)
        step[0] = 0
        np.not_equal(ts[1:], ts[:-1], out=step[1:])
        key = np.cumsum(step)
        width = int(key[-1]) + 1
    key, width = combine_codes(cols, nulls, key, width)
    nb = max(n - 1, 1).bit_length()
    extra = 0 if low is None else 1
    if width >= 1 << (62 - nb - extra):
        key, width = dense_codes(key, width)
    # `key` is this function's own array (made above, or by combine_codes / dense_codes), so
    # it is shifted and packed in place: no fresh 8-byte-per-row arrays for the steps
    if low is not None:
        key <<= 1
        key |= low
        width *= 2
    if width < 1 << (62 - nb):
        packed = key
        packed <<= nb
        packed |= np.arange(n, dtype=np.int64)
        _sort_by_instants(packed, ts)
        order = packed & ((1 << nb) - 1)
        packed >>= nb
        skey = packed
    else:  # pragma: no cover - over 2^31 rows in one batch
        order = np.argsort(key, kind="stable")
        skey = key[order]
    return order, skey


SORT_CHUNK = 2048  # rows per separately sorted run of whole instants (0: one sort)


def _sort_by_instants(packed: np.ndarray, ts: np.ndarray) -> None:
    """Sort keys whose major part is the row's instant (rows in ts order) in place: the rows of
    each run of whole instants stay in their run, so runs of ~SORT_CHUNK rows are sorted alone
    (the same result; ~15 % fewer cycles than one sort of 50k keys, cache-sized runs)."""
    c = SORT_CHUNK
    if not c or len(packed) <= 2 * c:
        packed.sort()
        return
    s = 0
    for e in ts.searchsorted(ts[c::c], side="left").tolist():
        if e > s:
            packed[s:e].sort()
            s = e
    packed[s:].sort()


def _span(a: tuple[int, int] | None, b: tuple[int, int] | None) -> tuple[int, int] | None:
    """The smallest range holding both (None: empty)."""
    if a is None or b is None:
        return a or b
    return min(a[0], b[0]), max(a[1], b[1])


def widened(
    layout: KeyLayout | None, keys: np.ndarray, rng: list[tuple[int, int] | None] | None
) -> tuple[KeyLayout, np.ndarray] | None:
    """The key layout covering both the per-column ranges `rng` of new values and the values
    `keys` packed in `layout`, with `keys` re-packed in it (same order); None when the values do
    not pack (`rng` None: not integer-like) or cannot fit 62 bits. Its keys sort as the value
    tuples do (`major_first`), as row_codes' codes and sorted carries expect."""
    if rng is None:
        return None
    old_cols, old_nulls = layout.unpack(keys) if layout is not None else ([], [])
    if layout is not None and len(keys):
        rng = [_span(a, c) for a, c in zip(rng, ranges(old_cols, old_nulls))]
    wider = KeyLayout.fit(rng)
    if wider is None:
        return None
    wider = replace(wider, major_first=True)
    return wider, wider.pack(old_cols, old_nulls, np.arange(len(keys)))


def unpacked_rows(layout: KeyLayout | None, keys: np.ndarray, b: Batch) -> list[tuple]:
    """The values `keys` packed in `layout` as the Python tuples a batch of `b`'s columns gives
    (for a table leaving packed keys for a dict for good)."""
    if layout is None or not len(keys):
        return []
    old_cols, old_nulls = layout.unpack(keys)
    cast = [c.astype(bc.dtype) for c, bc in zip(old_cols, b.cols)]
    return py_rows(cast, list(old_nulls), np.arange(len(keys)))


def py_rows(cols: list[np.ndarray], nulls: list[np.ndarray | None], idx: np.ndarray) -> list[tuple]:
    """Python tuples (None for NULL) of the rows at `idx`; one tuple per distinct value only."""
    lists = []
    for col, m in zip(cols, nulls):
        sel = col[idx]
        vals = sel.tolist()
        if sel.dtype.kind == "f":
            nan = np.isnan(sel)
            if nan.any():  # one NaN object: NaN equals NaN as a tuple value, as in np.unique
                vals = [_NAN if z else v for v, z in zip(vals, nan.tolist())]
        if m is not None:
            mm = m[idx]
            if mm.any():
                vals = [None if z else v for v, z in zip(vals, mm.tolist())]
        lists.append(vals)
    if not lists:
        return [()] * len(idx)
    return list(zip(*lists))


@dataclass
class Encoded:
    """A batch's rows as value slots; `order` lists the rows grouped by value, ascending
    positions (so ts order) within each value."""

    slot_: np.ndarray | None  # per row (None: derived from sorted_slot when asked, see `slot`)
    order: np.ndarray
    value_slot: np.ndarray  # per distinct value of the batch
    rows: list[tuple] | np.ndarray  # per distinct value: its packed key, or Python tuple (the dict key)
    new: np.ndarray  # indexes (into value_slot) of the values first seen in this batch
    packed: bool  # rows are packed keys of the numeric map
    sorted_slot: np.ndarray | None = None  # slot[order], when encode had it at hand
    heads: np.ndarray | None = None  # bool per position of `order`: a value's first row
    cells: np.ndarray | None = None  # per distinct value: its cell in the numeric map (−1: none)

    def __len__(self) -> int:
        return len(self.order)

    @property
    def slot(self) -> np.ndarray:
        """The slot of every row, in batch order (the packed encode has them in value order only:
        DISTINCT never asks, so the scatter is made only when something does)."""
        if self.slot_ is None:
            assert self.sorted_slot is not None
            self.slot_ = np.empty(len(self.order), np.int64)
            self.slot_[self.order] = self.sorted_slot
        return self.slot_


@dataclass
class Changes:
    """Per (slot, instant) group touched by a batch; a slot's groups are adjacent, in ts order."""

    slot: np.ndarray  # int64
    ts: np.ndarray  # int64
    before: np.ndarray  # (sides, g) int64: multiplicity at the end of the previous instant
    after: np.ndarray  # (sides, g) int64: multiplicity at the end of this instant
    first: np.ndarray  # position (in the batch) of the group's first element
    last: np.ndarray  # position of the group's last element
    slot_start: np.ndarray  # bool: first group of its slot
    slot_end: np.ndarray  # bool: last group of its slot
    order: np.ndarray  # the batch's rows grouped by value (Encoded.order)
    start: np.ndarray  # offset in `order` of each group's first row
    end: np.ndarray  # offset in `order` of each group's last row

    def __len__(self) -> int:
        return len(self.slot)


_GOLDEN = np.uint64(0x9E3779B97F4A7C15)


def _derived_ids(vmix: np.ndarray, serial: np.ndarray) -> np.ndarray:
    """combine_ids(vkey, serial) (engine/batch.py) given vmix = splitmix64(vkey)."""
    with np.errstate(over="ignore"):
        z = serial * _GOLDEN
        z ^= vmix
        return splitmix64_inplace(z)


def seg_exclusive_cumsum(x: np.ndarray, slot_start: np.ndarray) -> np.ndarray:
    """Exclusive cumulative sum of x restarting at every True of slot_start."""
    cs = np.cumsum(x)
    excl = cs - x
    heads = np.flatnonzero(slot_start)
    seg = np.cumsum(slot_start) - 1
    return excl - excl[heads][seg]


class ValueTable:
    """Live values → slots, with per-slot counts for `sides` inputs (see module docstring).

    Use per batch: `enc = encode(b)`, `ch = changes(enc, ...)`, then `finish(enc)`, which frees
    the slots that became dead. A value first seen in a batch enters the map only if it is
    still live at the end of the batch, so short-lived values cost no map insert/delete."""

    def __init__(self, types: Sequence[DataType], ids: IdSource, sides: int = 1) -> None:
        self.types = list(types)
        self.ids = ids
        self.sides = sides
        self.index: dict[tuple, int] = {}  # the map of values that do not pack (see encode)
        self.imap: IntMap | None = IntMap()  # packed key → slot while the values pack
        self.layout: KeyLayout | None = None
        self.free = _EMPTY_I
        self.cap = 0
        self._high = 0  # slots [0, _high) have been used
        self.count = np.zeros((sides, 0), np.int64)
        self.vmix = np.zeros(0, np.uint64)  # splitmix64(vkey): output ids are combine_ids(vkey, serial)
        self.n_ins = np.zeros(0, np.int64)  # output copies inserted so far (serials 0..n_ins-1)
        self.n_del = np.zeros(0, np.int64)  # output copies deleted so far (FIFO: the oldest)

    def __setstate__(self, state: dict) -> None:
        """Checkpoints of before `vmix` hold the raw `vkey`: mixed here, so ids stay the same."""
        if "vkey" in state:
            state["vmix"] = splitmix64(state.pop("vkey"))
        self.__dict__.update(state)

    def __len__(self) -> int:
        return len(self.index) if self.imap is None else len(self.imap)

    def nbytes(self) -> int:
        slots = self.cap * 8 * (self.sides + 3)
        if self.imap is not None:
            return slots + self.imap.nbytes()
        return slots + len(self.index) * (120 + 40 * len(self.types))

    # ------------------------------------------------------------ slots
    def _grow(self, need: int) -> None:
        if need <= self.cap:
            return
        cap = max(need, 2 * self.cap, 64)
        extra = cap - self.cap
        self.count = np.concatenate([self.count, np.zeros((self.sides, extra), np.int64)], axis=1)
        self.vmix = np.concatenate([self.vmix, np.zeros(extra, np.uint64)])
        self.n_ins = np.concatenate([self.n_ins, np.zeros(extra, np.int64)])
        self.n_del = np.concatenate([self.n_del, np.zeros(extra, np.int64)])
        self.cap = cap

    def _alloc(self, k: int) -> np.ndarray:
        """k slots: freed ones first, then never-used ones."""
        reuse = min(k, len(self.free))
        reused = self.free[len(self.free) - reuse :]
        self.free = self.free[: len(self.free) - reuse]
        fresh = np.arange(self._high, self._high + (k - reuse), dtype=np.int64)
        self._high += k - reuse
        self._grow(self._high)
        return np.concatenate([reused, fresh]) if reuse else fresh

    def encode(self, b: Batch) -> Encoded:
        """Slot per row of `b` (values not seen before get new slots, in first-arrival order)
        and the rows grouped by value (the sort `changes` needs)."""
        n = len(b)
        if n == 0:
            return Encoded(_EMPTY_I, _EMPTY_I, _EMPTY_I, [], _EMPTY_I, self.imap is not None)
        if self.imap is not None and packable(b.cols) and self._fit(b, ranges(b.cols, b.nulls)):
            enc = self._encode_packed(b)
            if enc is not None:
                return enc
        code, k = row_codes(b.cols, b.nulls)
        order = stable_order(code, 0, k - 1)
        heads = np.empty(n, bool)
        heads[0] = True
        sc = code[order]
        np.not_equal(sc[1:], sc[:-1], out=heads[1:])
        first = order[heads]  # first row of each distinct value (code order)
        rows: list[tuple] | np.ndarray
        cells = None
        if self.imap is not None and self._fit(b, self._ranges_at(b, first)):
            assert self.layout is not None
            rows = self.layout.pack(b.cols, b.nulls, first)
            slot_of, cells = self.imap.lookup(rows)
        else:
            rows = py_rows(b.cols, b.nulls, first)
            get = self.index.get
            slot_of = np.fromiter(map(get, rows, repeat(-1)), np.int64, len(rows))  # per distinct value (C loop)
        new = self._assign(slot_of, first, n)
        return Encoded(slot_of[code], order, slot_of, rows, new, self.imap is not None, cells=cells)

    def _encode_packed(self, b: Batch) -> Encoded | None:
        """`encode` while the values pack: every row's packed key, then one np.sort of
        key << nb | position gives both the grouping by value and each value's first row, and
        only the distinct keys are looked up (None: keys and positions together exceed 63 bits)."""
        assert self.layout is not None and self.imap is not None
        n = len(b)
        nb = max(n - 1, 1).bit_length()
        if sum(self.layout.bits) + nb > 63:
            return None
        packed = self.layout.pack_all(b.cols, b.nulls, n)
        packed <<= nb
        packed |= np.arange(n, dtype=np.int64)
        packed.sort()
        order = packed & ((1 << nb) - 1)
        packed >>= nb  # the sorted keys
        heads = np.empty(n, bool)
        heads[0] = True
        np.not_equal(packed[1:], packed[:-1], out=heads[1:])
        hix = np.flatnonzero(heads)  # (positions, not the mask: numpy's mask indexing is ~8× slower)
        rows = packed.take(hix)
        first = order.take(hix)
        slot_of, cells = self.imap.lookup(rows)
        new = self._assign(slot_of, first, n)
        sorted_slot = slot_of[np.cumsum(heads) - 1]
        return Encoded(None, order, slot_of, rows, new, True, sorted_slot, heads, cells)

    def _assign(self, slot_of: np.ndarray, first: np.ndarray, n: int) -> np.ndarray:
        """Give the values not found (slot_of < 0) fresh slots and vkeys, in the order of their
        first rows `first` (so vkeys increase with first arrival); returns their indexes."""
        new = np.flatnonzero(slot_of < 0)
        if len(new):
            at = first[new]
            if len(new) > 64:  # positions are distinct and < n: their rank by a presence table
                present = np.zeros(n, bool)
                present[at] = True
                rank = np.cumsum(present) - 1
                new_sorted = np.empty_like(new)
                new_sorted[rank[at]] = new
                new = new_sorted
            else:
                new = new[np.argsort(at)]  # first-arrival order → increasing vkey
            slots = self._alloc(len(new))
            slot_of[new] = slots
            self.vmix[slots] = splitmix64(self.ids.take(len(slots)))
            self.n_ins[slots] = 0
            self.n_del[slots] = 0
            self.count[:, slots] = 0
        return new

    @staticmethod
    def _ranges_at(b: Batch, first: np.ndarray) -> list[tuple[int, int] | None] | None:
        """(min, max) per column of the rows `first` (None: the columns do not pack)."""
        if not packable(b.cols):
            return None
        return ranges([c[first] for c in b.cols], [None if m is None else m[first] for m in b.nulls])

    def _fit(self, b: Batch, rng: list[tuple[int, int] | None] | None) -> bool:
        """Make the key layout cover the batch's values (their per-column ranges `rng`; None:
        the columns do not pack), re-packing the live keys (their slots stay) when it must
        widen; False, after moving every live value into the dict for good, when the values are
        not integer-like or cannot fit 62 bits."""
        imap, layout = self.imap, self.layout
        assert imap is not None
        if rng is not None and layout is not None and layout.covers(rng):
            return True
        keys, slots = imap.items()
        wider = widened(layout, keys, rng)
        if wider is not None:
            self.layout, packed = wider
            self.imap = IntMap(4 * len(keys))
            self.imap.insert(packed, slots)
            return True
        if len(keys):  # to the dict, as the Python tuples a batch of these columns gives
            self.index = dict(zip(unpacked_rows(layout, keys, b), slots.tolist()))
        self.imap = self.layout = None
        return False

    def finish(self, enc: Encoded) -> None:
        """After a batch: values whose counts and live output copies are all zero give up their
        slot (and leave the map), new values still live enter the map."""
        touched = enc.value_slot
        if not len(touched):
            return
        live = self.n_ins[touched] != self.n_del[touched]
        for side in self.count:
            live |= side.take(touched) != 0
        is_new = np.zeros(len(touched), bool)
        is_new[enc.new] = True
        born = np.flatnonzero(live & is_new)  # (positions, not masks: numpy's mask indexing is slow)
        died = np.flatnonzero(~(live | is_new))
        if enc.packed:
            assert self.imap is not None and isinstance(enc.rows, np.ndarray)
            if enc.cells is not None:  # the cells encode found them in (no insert since)
                self.imap.delete_cells(enc.cells.take(died))
            else:
                self.imap.delete(enc.rows.take(died))
            self.imap.insert(enc.rows.take(born), touched.take(born))
        else:
            rows, idx = enc.rows, self.index
            for i in died.tolist():  # per distinct value that died
                del idx[rows[i]]
            if len(born):
                idx.update(zip([rows[i] for i in born.tolist()], touched[born].tolist()))
        dead = np.flatnonzero(~live)
        if len(dead):
            self.free = np.concatenate([self.free, touched.take(dead)])

    # ------------------------------------------------------------ per-instant multiplicities
    def changes(self, enc: Encoded, ts: np.ndarray, deltas: np.ndarray) -> Changes:
        """Rows given by their encoding, ts (non-decreasing) and signed deltas (sides × n) →
        per (slot, instant) multiplicity before/after; the carried counts are advanced past
        the batch."""
        n = len(enc)
        sides = self.sides
        if n == 0:
            z = _EMPTY_I
            zz = np.zeros((sides, 0), np.int64)
            zb = np.zeros(0, bool)
            return Changes(z, z, zz, zz, z, z, zb, zb, z, z, z)
        order = enc.order
        st = ts[order]
        brk = np.empty(n, bool)
        if enc.heads is not None and enc.sorted_slot is not None:
            sc = enc.sorted_slot
            brk[:] = enc.heads  # distinct values of a batch have distinct slots
        else:
            sc = enc.slot[order]
            brk[0] = True
            np.not_equal(sc[1:], sc[:-1], out=brk[1:])
        brk[1:] |= st[1:] != st[:-1]
        if brk.all():  # every (value, instant) has one row (e.g. DISTINCT over a window): no reduce
            starts = ends = np.arange(n, dtype=np.int64)
            gd = deltas.take(order, axis=1)  # (take: ~2× faster than [:, order])
            gslot, gts = sc, st
        else:
            starts = np.flatnonzero(brk)
            ends = np.empty_like(starts)
            ends[:-1] = starts[1:] - 1
            ends[-1] = n - 1
            gd = np.add.reduceat(deltas.take(order, axis=1), starts, axis=1)
            gslot, gts = sc[starts], st[starts]
        g = len(starts)
        if g == n and enc.heads is not None and enc.sorted_slot is not None:
            sstart = enc.heads  # one group per row: a slot's first group is its value's first row
        else:
            sstart = np.empty(g, bool)
            sstart[0] = True
            np.not_equal(gslot[1:], gslot[:-1], out=sstart[1:])
        send = np.empty(g, bool)
        send[-1] = True
        send[:-1] = sstart[1:]
        cs = np.cumsum(gd, axis=1)
        heads = np.flatnonzero(sstart)
        base = np.repeat(cs.take(heads, axis=1) - gd.take(heads, axis=1), np.diff(heads, append=g), axis=1)
        after = self.count.take(gslot, axis=1)
        after += cs
        after -= base
        before = after - gd
        ends_at = np.flatnonzero(send)
        self.count[:, gslot.take(ends_at)] = after.take(ends_at, axis=1)
        first = order if g == n else order[starts]
        last = order if g == n else order[ends]
        return Changes(gslot, gts, before, after, first, last, sstart, send, order, starts, ends)

    def output_ids(
        self, ch: Changes, delta: np.ndarray, indicator: bool = False
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Ids for an output multiplicity change `delta` per group (FIFO copies per value: the
        k-th copy ever inserted of a value has id combine_ids(vkey, k); a delete retracts the
        oldest live copy). Returns (group index per output element, sign, id), in group order;
        advances the per-slot serials. `indicator`: the output multiplicity is 0 or 1 and `delta`
        the change of it from the carried counts (DISTINCT and the set versions over exact
        counts), so a value's nonzero changes alternate + − + … from its live copies."""
        if indicator:
            return self._indicator_ids(ch, delta)
        if len(delta) and np.abs(delta).max() <= 1:  # at most one copy per group (DISTINCT)
            return self._unit_ids(ch, delta)
        return self._repeat_ids(ch, delta)

    def _indicator_ids(self, ch: Changes, delta: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """`output_ids` for a 0/1 output multiplicity: a value's changes alternate, starting with
        `+` when it has no live copy (n_ins = n_del) and `−` when it has one (n_ins = n_del + 1),
        so the k-th change of the batch (from 0) of a value with T = n_ins + n_del changes so far
        has serial (T + k) // 2, insert or delete alike — no per-sign counts."""
        gidx = np.flatnonzero(delta)
        m = len(gidx)
        if not m:
            return gidx, np.zeros(0, np.int8), np.zeros(0, np.uint64)
        slot = ch.slot.take(gidx)
        start = np.empty(m, bool)  # first change of its slot in the batch
        start[0] = True
        np.not_equal(slot[1:], slot[:-1], out=start[1:])
        heads = np.flatnonzero(start)
        hs = slot.take(heads)
        t_head = self.n_ins.take(hs)
        t_head += self.n_del.take(hs)  # T per slot
        t_head -= heads
        k = np.arange(m, dtype=np.int64)
        k += np.repeat(t_head, np.diff(heads, append=m))  # T + the change's rank within its slot
        t_end = k.take(np.append(heads[1:], m) - 1) + 1  # T after the batch, per slot
        self.n_ins[hs] = (t_end + 1) >> 1
        self.n_del[hs] = t_end >> 1
        k >>= 1
        ids = _derived_ids(self.vmix.take(slot), k.view(np.uint64))
        return gidx, delta.take(gidx).astype(np.int8), ids

    def _repeat_ids(self, ch: Changes, delta: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """`output_ids` for any delta: |delta| elements per group (np.repeat)."""
        k = np.abs(delta)
        plus = np.maximum(delta, 0)
        minus = np.maximum(-delta, 0)
        ins0 = self.n_ins[ch.slot] + seg_exclusive_cumsum(plus, ch.slot_start)
        del0 = self.n_del[ch.slot] + seg_exclusive_cumsum(minus, ch.slot_start)
        heads = np.flatnonzero(ch.slot_start)
        if len(heads):
            self.n_ins[ch.slot[heads]] += np.add.reduceat(plus, heads)
            self.n_del[ch.slot[heads]] += np.add.reduceat(minus, heads)
        total = int(k.sum())
        gidx = np.repeat(np.arange(len(delta)), k)
        offs = np.cumsum(k) - k
        within = np.arange(total, dtype=np.int64) - offs[gidx]
        pos = delta[gidx] > 0
        serial = np.where(pos, ins0[gidx], del0[gidx]) + within
        sign = np.where(pos, 1, -1).astype(np.int8)
        ids = _derived_ids(self.vmix[ch.slot[gidx]], serial.astype(np.uint64))
        return gidx, sign, ids

    def _unit_ids(self, ch: Changes, delta: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """`output_ids` when every group changes by −1, 0 or +1: one element per nonzero group;
        its serial is the slot's count so far of its sign plus the earlier ones of the batch."""
        gidx = np.flatnonzero(delta)
        m = len(gidx)
        if not m:
            return gidx, np.zeros(0, np.int8), np.zeros(0, np.uint64)
        slot = ch.slot[gidx]
        pos = delta[gidx] > 0
        start = np.empty(m, bool)  # first nonzero group of its slot
        start[0] = True
        np.not_equal(slot[1:], slot[:-1], out=start[1:])
        heads = np.flatnonzero(start)
        seg = np.cumsum(start) - 1
        plus = pos.astype(np.int64)
        cp = np.cumsum(plus)
        cp -= plus  # inserts before each element (exclusive), over the whole batch
        rank = np.arange(m, dtype=np.int64)
        base_p, base_r = cp[heads], heads
        ins_before = cp - base_p[seg]  # earlier inserts of the slot in this batch
        del_before = (rank - base_r[seg]) - ins_before  # earlier deletes of the slot in this batch
        serial = np.where(pos, self.n_ins[slot] + ins_before, self.n_del[slot] + del_before)
        seg_len = np.diff(np.append(heads, m))
        ins_n = np.add.reduceat(plus, heads)
        hs = slot[heads]
        self.n_ins[hs] += ins_n
        self.n_del[hs] += seg_len - ins_n
        sign = np.where(pos, 1, -1).astype(np.int8)
        ids = _derived_ids(self.vmix[slot], serial.astype(np.uint64))
        return gidx, sign, ids
