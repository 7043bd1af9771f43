"""DISTINCT over a Range window read from the window's stream (`Distinct.window`; the rewrite is
cql/logical/rewrites/range_distinct.py): per distinct value its last-seen instant, no window.

A value v is in DISTINCT(S [Range N]) at t iff its latest arrival τ ≤ t has t < τ + life
(`window_kinds.range_life`, the window's own bound rule). So, with v's arrival instants in order
(the first one's predecessor is its last-seen instant from earlier calls, if v was still present),
v changes only where two consecutive arrivals q < t leave a gap, q + life < t: `−` at q + life
(the instant the window deletes q's copies) and `+` at t; a first arrival while absent gives `+`,
and v's last arrival q gives `−` at q + life once the bound reaches it. Values that do not arrive
in a call leave through a FIFO of (expiry instant, slot) appended in arrival order (so sorted by
instant), whose stale entries — the value arrived again since — are recognized by their slot's
current last-seen instant. All of it vectorized per call.

The output is the DistinctOp's over the window's deltas, element for element (ids included):
ids are derived as there (valuecount.py: one fresh engine id per value that appears while absent,
drawn in first-arrival order, and the k-th change of a value has serial k // 2), and the order is
the window batch's — by instant, then the arrival index of the row the window would have emitted
(a delete at t names a row of t − life, an insert one of t, so deletes come first as in
window_logic.emit). A `−` carries the row of the value's first arrival at its last instant, the
row the window's first delete of it would carry. With a probe (`Distinct.probe`) a value's changes
within one probe interval are netted as DistinctOp does (probe_intervals.py).

The value map holds the values present at the last bound only: a value enters it when it is
still present at the end of the call it arrived in, and leaves when it expires (by its FIFO entry,
or within a call), its slot then reused; so the state is the window's distinct live values. While
the values pack, the map is a sorted carry of their keys (`LastSeen`), merged by the call's one
sort. A call whose values each have at most a `+` and a `−` (no probe netting them) makes its
changes in row order and merges the two signs by instant (`_RowEvents`, `_emit_rows`): no sort of
the output.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Self

import numpy as np

from cqlstream.cql.logical import nodes as L
from cqlstream.cql.logical.nodes import Plan
from cqlstream.engine.batch import Batch, empty_column, splitmix64
from cqlstream.engine.kernels import run_starts
from cqlstream.engine.operators.base import RATE, BuildContext, IdSource, Operator
from cqlstream.engine.operators.probe_intervals import interval_ends, interval_of
from cqlstream.engine.operators.valuecount import Encoded, ValueTable, _derived_ids, unpacked_rows, widened
from cqlstream.engine.operators.valuekeys import packable, ranges
from cqlstream.engine.queues import Queue

if TYPE_CHECKING:
    from cqlstream.cql.types import DataType
    from cqlstream.engine.planner import EngineOptions

_NEVER = np.iinfo(np.int64).min // 4  # last-seen instant of a free slot (+ life stays far below any bound)
_EMPTY_I = np.zeros(0, np.int64)


class LastSeen(ValueTable):
    """Value → slot for the values present at the last bound, and per slot the value's last-seen
    instant, its changes so far (serials of its derived ids) and, while it is present, the row and
    arrival index of its first arrival at its last-seen instant (the row its `−` carries). A new
    value's slot and id are drawn in first-arrival order (ValueTable's `_assign`).

    While the values pack into int64 keys (valuekeys.py) the map is a *carry*: the present
    values' keys, sorted, beside their slots. `encode` sorts it together with the batch's keys
    (one sort gives the grouping by value and each arriving value's slot) and `settle` keeps, in
    that sorted order, the values still present at the bound: no hash map to insert into and
    delete from as values come and go. Values that do not pack use ValueTable's dict."""

    def __init__(self, types: list[DataType], ids: IdSource) -> None:
        super().__init__(types, ids)
        self.imap = None  # (ValueTable's hash map: not used, the carry replaces it)
        self.packing = True  # the map is the carry (else ValueTable's dict `index`)
        self.ckey = _EMPTY_I  # the carry: present values' packed keys, ascending ...
        self.cslot = _EMPTY_I  # ... and their slots
        self._runs: tuple[np.ndarray, np.ndarray] | None = None  # last encode's (keys, slots), see settle
        self.last = np.zeros(0, np.int64)
        self.changes_ = np.zeros(0, np.int64)  # output changes of the value's current stay
        self.pos = np.zeros(0, np.int64)
        self.tkey: list[tuple | None] = []  # row tuple in the dict (while not packing)
        self.vals = [empty_column(t) for t in types]
        self.vnull: list[np.ndarray | None] = [None] * len(types)

    def __setstate__(self, state: dict) -> None:
        """Checkpoints of before the carry hold a hash map (`imap`) and each slot's key (`pkey`)."""
        super().__setstate__(state)
        if "packing" not in state:
            imap = state.get("imap")
            self.packing = imap is not None
            keys, slots = imap.items() if imap is not None else (_EMPTY_I, _EMPTY_I)
            o = np.argsort(keys, kind="stable")
            self.ckey, self.cslot, self._runs, self.imap = keys.take(o), slots.take(o), None, None
            self.__dict__.pop("pkey", None)

    def __len__(self) -> int:
        return len(self.ckey) if self.packing else len(self.index)

    def _grow(self, need: int) -> None:
        old = self.cap
        super()._grow(need)
        extra = self.cap - old
        if extra <= 0:
            return
        self.last = np.concatenate([self.last, np.full(extra, _NEVER, np.int64)])
        self.changes_ = np.concatenate([self.changes_, np.zeros(extra, np.int64)])
        self.pos = np.concatenate([self.pos, np.zeros(extra, np.int64)])
        self.tkey.extend([None] * extra)
        self.vals = [np.concatenate([v, _blank(v, extra)]) for v in self.vals]
        self.vnull = [None if m is None else np.concatenate([m, np.zeros(extra, bool)]) for m in self.vnull]

    def _assign(self, slot_of: np.ndarray, first: np.ndarray, n: int) -> np.ndarray:
        """ValueTable's (slots and ids of new values in first-arrival order), without the
        per-side counts and copy serials it keeps and this table does not use."""
        new = np.flatnonzero(slot_of < 0)
        if len(new):
            at = first.take(new)
            if len(new) > 64:  # positions are distinct and < n: their order by a presence table
                present = np.zeros(n, bool)
                present[at] = True
                where = np.empty(n, np.int64)
                where[at] = new
                new = where.take(np.flatnonzero(present))
            else:
                new = new.take(np.argsort(at))
            slots = self._alloc(len(new))
            slot_of[new] = slots
            self.vmix[slots] = splitmix64(self.ids.take(len(slots)))
            self.last[slots] = _NEVER
            self.changes_[slots] = 0
        return new

    # ------------------------------------------------------------ the carry
    def encode(self, b: Batch) -> Encoded:
        """ValueTable's (slots per value, the rows grouped by value); through the carry while the
        values pack."""
        if self.packing and self._fit_carry(b):
            return self._encode_carry(b)
        self._runs = None
        return super().encode(b)

    def _fit_carry(self, b: Batch) -> bool:
        """Make the key layout cover the batch's values, re-packing the carry when it must widen;
        False, after moving the present values to the dict for good, when the values are not
        integer-like or cannot fit 62 bits (as ValueTable._fit)."""
        rng = ranges(b.cols, b.nulls) if packable(b.cols) else None
        layout = self.layout
        if rng is not None and layout is not None and layout.covers(rng):
            return True
        keys, slots = self.ckey, self.cslot
        wider = widened(layout, keys, rng)
        if wider is not None:
            self.layout, keys = wider
            o = np.argsort(keys, kind="stable")
            self.ckey, self.cslot = keys.take(o), slots.take(o)
            return True
        rows = unpacked_rows(layout, keys, b)
        self.index = dict(zip(rows, slots.tolist()))
        for r, s in zip(rows, slots.tolist()):
            self.tkey[s] = r
        self.packing, self.layout, self.ckey, self.cslot = False, None, _EMPTY_I, _EMPTY_I
        return False

    def _encode_carry(self, b: Batch) -> Encoded:
        """`encode` through the carry: one sort of the carry's keys followed by the batch's
        (each key shifted left past its position, so equal keys keep carry-then-row order)
        groups the rows by value, and a value's run starts with its carry entry iff it is
        present; the distinct keys and their slots are kept for `settle`. Only the carry's keys
        within the batch's key range take part (the others cannot match: e.g. a value table's
        keys of earlier minutes)."""
        assert self.layout is not None
        n = len(b)
        bkeys = self.layout.pack_all(b.cols, b.nulls, n)
        c0 = int(np.searchsorted(self.ckey, bkeys.min()))
        c1 = int(np.searchsorted(self.ckey, bkeys.max(), side="right"))
        ckey, cslot = self.ckey[c0:c1], self.cslot[c0:c1]
        nc = len(ckey)
        tot = n + nc
        keys = np.concatenate([ckey, bkeys])
        nb = max(tot - 1, 1).bit_length()
        if sum(self.layout.bits) + nb <= 63:
            keys <<= nb
            keys |= np.arange(tot, dtype=np.int64)
            keys.sort()
            idx = keys & ((1 << nb) - 1)
            keys >>= nb  # sorted
        else:  # keys and positions exceed 63 bits together
            idx = np.argsort(keys, kind="stable")
            keys = keys.take(idx)
        khead = np.empty(tot, bool)  # first of each distinct key
        khead[0] = True
        np.not_equal(keys[1:], keys[:-1], out=khead[1:])
        is_row = idx >= nc
        rpos = np.flatnonzero(is_row)  # positions (sorted) of the batch's rows
        order = idx.take(rpos)
        order -= nc
        vhead = khead.copy()  # a value's first row: a key's first, or after its carry entry
        vhead[1:] |= ~is_row[:-1]
        heads = vhead.take(rpos)
        hix = np.flatnonzero(heads)
        hpos = rpos.take(hix)  # each value's first row in the sorted keys
        slot_of = np.full(len(hix), -1, np.int64)
        held = np.flatnonzero(~khead.take(hpos))  # the values in the carry: after their entry
        slot_of[held] = cslot.take(idx.take(hpos.take(held) - 1))
        new = self._assign(slot_of, order.take(hix), n)
        # the distinct keys: the carry's (slot from it) and the new values' (slot just given)
        kix = np.flatnonzero(khead)
        kslot = np.empty(len(kix), np.int64)
        from_carry = idx.take(kix) < nc
        fc = np.flatnonzero(from_carry)
        kslot[fc] = cslot.take(idx.take(kix.take(fc)))
        absent = np.ones(len(hix), bool)  # (the values not in the carry, in key order as their runs)
        absent[held] = False
        kslot[np.flatnonzero(~from_carry)] = slot_of.take(np.flatnonzero(absent))
        keys = keys.take(kix)
        if c0 or c1 < len(self.ckey):  # with the carry's keys below and above the batch's
            keys = np.concatenate([self.ckey[:c0], keys, self.ckey[c1:]])
            kslot = np.concatenate([self.cslot[:c0], kslot, self.cslot[c1:]])
        self._runs = (keys, kslot)
        return Encoded(None, order, slot_of, _EMPTY_I, new, True, None, heads, None)

    def settle(self, bound: int, life: int) -> None:
        """After a call: the carry becomes the values still present at `bound` (last-seen
        instant + life beyond it; freed slots have _NEVER) among the carry and the call's new
        values, kept in key order."""
        if not self.packing:
            return
        keys, slots = self._runs if self._runs is not None else (self.ckey, self.cslot)
        self._runs = None
        keep = np.flatnonzero(self.last.take(slots) > bound - life)
        if len(keep) < len(keys):
            keys, slots = keys.take(keep), slots.take(keep)
        self.ckey, self.cslot = keys, slots

    def remember(self, rows: list[tuple], slots: np.ndarray) -> None:
        """Put values (their row tuples) into the dict (the carry takes them in `settle`)."""
        if not self.packing and len(slots):
            sl = slots.tolist()
            self.index.update(zip(rows, sl))
            for r, s in zip(rows, sl):
                self.tkey[s] = r

    def forget(self, slots: np.ndarray) -> None:
        """Take values out of the dict (the carry drops them in `settle`) and free their slots."""
        if not len(slots):
            return
        if not self.packing:
            idx, tkey = self.index, self.tkey
            for s in slots.tolist():
                del idx[tkey[s]]
                tkey[s] = None
        self.release_slots(slots)

    def release_slots(self, slots: np.ndarray) -> None:
        self.last[slots] = _NEVER
        self.free = np.concatenate([self.free, slots])

    def keep_rows(self, slots: np.ndarray, b: Batch, rows: np.ndarray) -> None:
        """Remember rows `rows` of `b` as the values of `slots`."""
        for i, (col, m) in enumerate(zip(b.cols, b.nulls)):
            v = self.vals[i]
            if v.dtype != col.dtype and col.dtype != object:
                v = self.vals[i] = v.astype(np.result_type(v.dtype, col.dtype))
            v[slots] = col.take(rows)
            held = self.vnull[i]
            if m is not None:
                if held is None:
                    held = self.vnull[i] = np.zeros(len(v), bool)
                held[slots] = m.take(rows)
            elif held is not None:
                held[slots] = False

    def nbytes(self) -> int:
        keys = 16 * len(self.ckey) if self.packing else 8 * len(self.tkey)
        return super().nbytes() + self.cap * (24 + 8 * len(self.vals)) + keys


def _blank(like: np.ndarray, n: int) -> np.ndarray:
    return np.full(n, "", dtype=object) if like.dtype == object else np.zeros(n, like.dtype)


class RangeDistinctOp(Operator):
    """DISTINCT(S [Range N]) from S's elements (module docstring). Input 0: S; input 1, when
    present: the probe stream (`Distinct.probe`)."""

    kind = "range distinct"

    def __init__(
        self, inputs: list[Queue], output: Queue, ids: IdSource, life: int, options: EngineOptions | None = None
    ) -> None:
        super().__init__(inputs, output, ids, options)
        assert life >= 1
        self.life = life
        self.table = LastSeen(list(inputs[0].types), ids)
        self.fifo_at = _EMPTY_I  # expiry instants of values' last arrivals, non-decreasing
        self.fifo_slot = _EMPTY_I
        self.arrived = 0  # S's elements seen so far: the arrival index of the next
        self.probed = len(inputs) == 2
        if self.probed:  # the output is read at every instant of the probe: never shed it
            self.unshed = frozenset({1})

    # ------------------------------------------------------------ operator protocol
    @classmethod
    def from_node(cls, node: Plan, ctx: BuildContext) -> Self:
        from cqlstream.engine.operators.window_kinds import range_life

        assert isinstance(node, L.Distinct) and node.window is not None and node.window.size is not None
        return cls(ctx.inputs, ctx.output, ctx.ids, range_life(node.window.size, ctx.options.compat), ctx.options)

    @classmethod
    def state_class(cls, node: Plan, kids: list[int]) -> tuple[int, list[tuple[int, str]]]:
        assert isinstance(node, L.Distinct) and node.window is not None
        why = f"distinct values alive in [{node.window.sql()}] (their last-seen instants)"
        return max(kids[0], RATE), [(RATE, why)]

    def complete_from(self, cf: float) -> float:
        return cf + self.life - 1  # as the window's (window_kinds.RangeWindow)

    def state_bytes(self) -> int:
        return self.table.nbytes() + self.fifo_at.nbytes + self.fifo_slot.nbytes

    # ------------------------------------------------------------ the work
    def process(self, inputs: list[Batch], bound: int) -> Batch:
        b = inputs[0]
        life, t = self.life, self.table
        # FIFO entries due by `bound`
        k = int(np.searchsorted(self.fifo_at, bound, side="right"))
        f_at, f_slot = self.fifo_at[:k], self.fifo_slot[:k]
        if k:
            self.fifo_at, self.fifo_slot = self.fifo_at[k:], self.fifo_slot[k:]
        probe_ts = inputs[1].ts if self.probed else None
        ev = self._arrivals(b, bound, probe_ts) if len(b) else _Events.empty()
        lv_slot, lv_at = _EMPTY_I, _EMPTY_I
        if k:  # after the arrivals updated `last`: an entry is current iff its value did not arrive since
            cur = np.flatnonzero(t.last.take(f_slot) + life == f_at)
            if len(cur):
                lv_slot, lv_at = f_slot.take(cur), f_at.take(cur)
        if isinstance(ev, _RowEvents):
            out = self._emit_rows(ev, lv_slot, lv_at, b)
        else:
            out = self._emit(ev, lv_slot, lv_at, b, probe_ts)
        t.forget(lv_slot)
        t.settle(bound, life)
        self.arrived += len(b)
        return out

    def _arrivals(self, b: Batch, bound: int, probe_ts: np.ndarray | None) -> _Events | _RowEvents:
        """The changes of the values arriving in `b`, in (value, instant) order, or in row order
        when each value has at most a `+` at its first row and a `−` at its last instant + life
        that no probe interval nets (`_RowEvents`); updates their slots (last-seen instant,
        kept row; the map) and queues the expiries beyond `bound`.

        Per value, its rows (ts order) split into runs at gaps (an arrival more than `life` after
        the previous one, or the first while absent): a run starting at a gap gives `+` at its
        first row, a run followed by a gap, or the value's last run once its expiry is due, `−`
        at its last instant + life. The first run continues the value's stay of before the
        call when it was present and arrives again in time (no `+`); when it was present but
        arrives too late, its stay ends at last-seen + life with the slot's kept row."""
        life, t = self.life, self.table
        n = len(b)
        enc = t.encode(b)
        order = enc.order
        heads = enc.heads if enc.heads is not None else run_starts(enc.slot.take(order))
        hix = np.flatnonzero(heads)  # sorted position of each value's first row
        nv = len(hix)
        vslot = enc.value_slot  # slot per value (value order)
        a0 = t.last.take(vslot)  # last-seen instant of a value present at the previous bound, else _NEVER
        base = (t.changes_.take(vslot) + 1) >> 1  # serial of the value's next `+`
        st = b.ts.take(order)
        prev = np.empty(n, np.int64)
        prev[1:] = st[:-1]
        prev[hix] = a0
        gap = st > prev + life  # the value is absent just before this row's instant: `+`
        new_instant = np.where(st != prev, np.arange(n, dtype=np.int64), 0)
        first_at = np.maximum.accumulate(new_instant)  # first row of each row's (value, instant)
        vend = np.empty(nv, np.int64)  # each value's last row
        vend[:-1] = hix[1:] - 1
        vend[-1] = n - 1
        q = st.take(vend)  # each value's last instant
        tail = q + life <= bound  # gone by `bound`
        head_gap = gap.take(hix)
        old = (a0 != _NEVER) & head_gap  # the stay from before the call ends within it
        inner = np.count_nonzero(gap) - np.count_nonzero(head_gap)  # gaps within values' rows
        if not inner and not old.any():
            rev = _row_events(order, hix, vend, first_at, head_gap, tail, base, vslot, n)
            if rev is not None and probe_ts is not None:  # a value's `+` and `−` in one probe interval: netted
                both = np.flatnonzero(head_gap & tail)
                if len(both):
                    k = interval_of(np.concatenate([st.take(hix.take(both)), q.take(both) + life]), probe_ts)
                    if bool((k[: len(both)] == k[len(both) :]).any()):
                        rev = None
            if rev is not None:
                t.changes_[vslot] += head_gap.view(np.int8) + tail.view(np.int8)
                self._settle_values(b, bound, enc, order, vend, first_at, vslot, q, tail)
                return rev
        if not inner:  # one run per value (e.g. a window long beside the value's re-arrivals)
            run_v = None
            rs, re, plus, minus, vfirst = hix, vend, head_gap, tail, None
            serial = base - 1 + plus
        else:
            rs = np.flatnonzero(gap | heads)  # runs start at a value's first row or at a gap
            nr = len(rs)
            re = np.empty(nr, np.int64)  # last row of each run
            re[:-1] = rs[1:] - 1
            re[-1] = n - 1
            run_v = np.cumsum(heads).take(rs) - 1  # value of each run
            plus = gap.take(rs)
            last_run = np.empty(nr, bool)  # the value's last run
            last_run[:-1] = heads.take(rs[1:])
            last_run[-1] = True
            minus = ~last_run
            minus[last_run] = tail
            # serial of each run's copy: the value's next serial, plus the runs with `+` up to it, − 1
            vfirst = np.flatnonzero(last_run[:-1]) + 1  # each value's first run
            vfirst = np.r_[0, vfirst]
            first_run = vfirst.take(run_v)
            cp = np.cumsum(plus)
            serial = cp - cp.take(first_run) + plus.take(first_run) + base.take(run_v) - 1
        nr = len(rs)
        # events in (value, time) order: [old −] then per run [+] [−]
        if vfirst is None:
            old_r = old.view(np.int8)
        else:
            old_r = np.zeros(nr, np.int8)
            old_r[vfirst] = old
        cnt = old_r + plus.view(np.int8) + minus.view(np.int8)
        off = np.cumsum(cnt, dtype=np.int64)
        m = int(off[-1])
        off -= cnt
        rv = vslot if run_v is None else vslot.take(run_v)
        e_slot = np.repeat(rv, cnt)
        e_at = np.empty(m, np.int64)
        e_sign = np.empty(m, np.int8)
        e_serial = np.empty(m, np.int64)
        e_row = np.empty(m, np.int64)  # the row carried (sorted position; batch row below)
        e_kept = np.zeros(m, bool)
        io = np.flatnonzero(old_r)
        if len(io):
            ov = io if run_v is None else run_v.take(io)
            at_o = off.take(io)
            e_at[at_o] = a0.take(ov) + life
            e_sign[at_o] = -1
            e_serial[at_o] = base.take(ov) - 1
            e_kept[at_o] = True
            e_row[at_o] = 0
        ip = np.flatnonzero(plus)
        at_p = off.take(ip)
        if len(io):
            at_p += old_r.take(ip)
        rp = rs.take(ip)
        e_at[at_p] = st.take(rp)
        e_sign[at_p] = 1
        e_serial[at_p] = serial.take(ip)
        e_row[at_p] = rp
        im = np.flatnonzero(minus)
        at_m = off.take(im)
        at_m += cnt.take(im)
        at_m -= 1
        rm = re.take(im)
        e_at[at_m] = st.take(rm) + life
        e_sign[at_m] = -1
        e_serial[at_m] = serial.take(im)
        e_row[at_m] = first_at.take(rm)
        e_row = order.take(e_row)
        e_pos = e_row + self.arrived
        if len(io):  # (before the kept rows change below)
            e_pos[at_o] = t.pos.take(vslot.take(ov))
        ev = _Events(e_slot, e_at, e_sign, e_serial, e_pos, e_row, e_kept)
        ev.per_value = (vslot, cnt if vfirst is None else np.add.reduceat(cnt, vfirst, dtype=np.int64))
        self._settle_values(b, bound, enc, order, vend, first_at, vslot, q, tail)
        return ev

    def _settle_values(
        self,
        b: Batch,
        bound: int,
        enc: Encoded,
        order: np.ndarray,
        vend: np.ndarray,
        first_at: np.ndarray,
        vslot: np.ndarray,
        q: np.ndarray,
        tail: np.ndarray,
    ) -> None:
        """After a call's arrivals: the values' last-seen instants `q`, the kept row and a FIFO
        entry of each still present, and the map (values gone by `bound` leave it)."""
        life, t, n, nv = self.life, self.table, len(b), len(vslot)
        t.last[vslot] = q
        stay = np.flatnonzero(~tail)
        if len(stay):
            rows = order.take(first_at.take(vend.take(stay)))
            by_row = np.empty(n, np.int64)  # arrival order = instant order: the FIFO stays sorted
            by_row[rows] = vslot.take(stay)
            present = np.zeros(n, bool)
            present[rows] = True
            rows = np.flatnonzero(present)
            s = by_row.take(rows)
            t.keep_rows(s, b, rows)
            t.pos[s] = rows + self.arrived
            self.fifo_at = np.concatenate([self.fifo_at, b.ts.take(rows) + life])
            self.fifo_slot = np.concatenate([self.fifo_slot, s])
        # the map: values of it gone by `bound` leave it, new values still present enter it
        is_new = np.zeros(nv, bool)
        is_new[enc.new] = True
        gone_old = np.flatnonzero(tail & ~is_new)
        if len(gone_old):
            t.forget(vslot.take(gone_old))
        if not enc.packed:  # (the carry takes the new values present in `settle`)
            born = np.flatnonzero(is_new & ~tail)
            if len(born):
                rows_t = enc.rows
                t.remember([rows_t[i] for i in born.tolist()], vslot.take(born))
        gone_new = np.flatnonzero(is_new & tail)
        if len(gone_new):
            t.release_slots(vslot.take(gone_new))

    def _emit_rows(self, ev: _RowEvents, lv_slot: np.ndarray, lv_at: np.ndarray, b: Batch) -> Batch:
        """`_emit` of changes in row order (`_RowEvents`; their values' change counts advanced
        already), without a sort: the `−` — those leaving through the FIFO (kept rows, older
        than the batch's), then the batch's in row order — are in the window batch's order
        (a `−` at t carries a row of t − life), and so are the `+`; the two merge by instant,
        the `−` first at one instant (their rows are older)."""
        t, n = self.table, len(b)
        n_lv = len(lv_slot)
        lv_serial = t.changes_.take(lv_slot) >> 1  # the copy they hold
        t.changes_[lv_slot] += 1
        i_at = b.ts.take(ev.i_rows)
        d_at = b.ts.take(ev.d_rows)
        d_at += self.life
        d_slot, d_serial = ev.d_slot, ev.d_serial
        if n_lv:
            d_at = np.concatenate([lv_at, d_at])
            d_slot = np.concatenate([lv_slot, d_slot])
            d_serial = np.concatenate([lv_serial, d_serial])
        ni, nd = len(i_at), len(d_at)
        m = ni + nd
        if not m:
            return b.take(_EMPTY_I)
        to_i, to_d = _merge_by_instant(d_at, i_at)
        src = np.empty(m, np.int64)  # rows: of the batch, then the kept rows of those leaving
        src[to_i] = ev.i_rows
        if n_lv:
            src[to_d[:n_lv]] = np.arange(n, n + n_lv, dtype=np.int64)
            src[to_d[n_lv:]] = ev.d_rows
        else:
            src[to_d] = ev.d_rows
        ts = np.empty(m, np.int64)
        ts[to_i] = i_at
        ts[to_d] = d_at
        sign = np.ones(m, np.int8)
        sign[to_d] = -1
        slot = np.empty(m, np.int64)
        slot[to_i] = ev.i_slot
        slot[to_d] = d_slot
        serial = np.empty(m, np.int64)
        serial[to_i] = ev.i_serial
        serial[to_d] = d_serial
        ids = _derived_ids(t.vmix.take(slot), serial.view(np.uint64))
        if not n_lv:
            out = b.take(src)
        else:
            cols: list[np.ndarray] = []
            nulls: list[np.ndarray | None] = []
            for c, nm, v, vm in zip(b.cols, b.nulls, t.vals, t.vnull):
                cols.append(np.concatenate([c, v.take(lv_slot)]).take(src))
                if nm is None and vm is None:
                    nulls.append(None)
                else:
                    a = np.zeros(len(c), bool) if nm is None else nm
                    z = np.zeros(n_lv, bool) if vm is None else vm.take(lv_slot)
                    mm = np.concatenate([a, z]).take(src)
                    nulls.append(mm if mm.any() else None)
            out = Batch(cols, nulls, ts, sign, ids)
        out.ts = ts
        out.sign = sign
        out.id = ids
        return out

    def _emit(
        self, ev: _Events, lv_slot: np.ndarray, lv_at: np.ndarray, b: Batch, probe_ts: np.ndarray | None
    ) -> Batch:
        """The changes `ev` and the `−` of the values leaving through the FIFO (`lv_slot` at
        `lv_at`, one change each, carrying their kept rows) as the output batch: netted per probe
        interval, ids derived, in the window batch's order; advances the values' change counts."""
        t = self.table
        m = len(ev.slot)
        if probe_ts is not None and m:
            ends = interval_ends(ev.slot, ev.at, probe_ts)
            if len(ends) < m:  # changes of a value within one probe interval: one net change at the last
                starts = np.r_[0, ends[:-1] + 1]
                net = np.add.reduceat(ev.sign.astype(np.int64), starts)
                ev = ev.take(ends.take(np.flatnonzero(net)))  # (per_value: unknown now)
                m = len(ev.slot)
                if m:  # serials from the changes emitted: the k-th of a value's stay has serial k // 2
                    heads, size = _groups(ev.slot)
                    t0 = t.changes_.take(ev.slot.take(heads))
                    ev.serial = (np.arange(m, dtype=np.int64) + np.repeat(t0 - heads, size)) >> 1
        n_lv = len(lv_slot)
        if not m and not n_lv:
            return b.take(_EMPTY_I)
        if ev.per_value is not None:  # the changes of each value
            vs, vc = ev.per_value
            t.changes_[vs] += vc
        elif m:
            heads, size = _groups(ev.slot)
            t.changes_[ev.slot.take(heads)] += size
        lv_serial = t.changes_.take(lv_slot) >> 1  # the copy they hold
        t.changes_[lv_slot] += 1
        slot = np.concatenate([ev.slot, lv_slot]) if n_lv else ev.slot
        serial = np.concatenate([ev.serial, lv_serial]) if n_lv else ev.serial
        ids = _derived_ids(t.vmix.take(slot), serial.view(np.uint64))
        at = np.concatenate([ev.at, lv_at]) if n_lv else ev.at
        pos = np.concatenate([ev.pos, t.pos.take(lv_slot)]) if n_lv else ev.pos
        sign = np.concatenate([ev.sign, np.full(n_lv, -1, np.int8)]) if n_lv else ev.sign
        # the window batch's order: by instant, then by the arrival index of the row carried
        o, ts = _order(at, pos)
        # rows: of the batch, or kept by the slots (`−` of stays from before the call); each
        # column gathered once from the batch's rows followed by the kept rows wanted
        kept = np.flatnonzero(ev.kept)
        if not len(kept) and not n_lv:
            out = b.take(ev.row.take(o))
        else:
            src = np.concatenate([ev.row, np.arange(len(b), len(b) + n_lv, dtype=np.int64)]) if n_lv else ev.row.copy()
            if len(kept):
                src[kept] = len(b) + n_lv + np.arange(len(kept), dtype=np.int64)
                ks = np.concatenate([lv_slot, ev.slot.take(kept)])
            else:
                ks = lv_slot
            pick = src.take(o)
            cols: list[np.ndarray] = []
            nulls: list[np.ndarray | None] = []
            for c, nm, v, vm in zip(b.cols, b.nulls, t.vals, t.vnull):
                cols.append(np.concatenate([c, v.take(ks)]).take(pick))
                if nm is None and vm is None:
                    nulls.append(None)
                else:
                    a = np.zeros(len(c), bool) if nm is None else nm
                    z = np.zeros(len(ks), bool) if vm is None else vm.take(ks)
                    mm = np.concatenate([a, z]).take(pick)
                    nulls.append(mm if mm.any() else None)
            out = Batch(cols, nulls, ts, sign, ids)
        out.ts = ts
        out.sign = sign.take(o)
        out.id = ids.take(o)
        return out


def _row_events(
    order: np.ndarray,
    hix: np.ndarray,
    vend: np.ndarray,
    first_at: np.ndarray,
    plus: np.ndarray,
    minus: np.ndarray,
    base: np.ndarray,
    vslot: np.ndarray,
    n: int,
) -> _RowEvents | None:
    """The changes in row order when each value has at most a `+` (`plus`: at its first row,
    sorted position `hix`) and a `−` (`minus`: carrying the first row at its last instant,
    `first_at[vend]`); serials as `_arrivals` gives them (the `+` starts copy `base`, a `−`
    ends the copy before it or the one it started)."""
    i_rows, i_v = _by_row(order.take(hix.take(np.flatnonzero(plus))), np.flatnonzero(plus), n)
    dv = np.flatnonzero(minus)
    d_rows, d_v = _by_row(order.take(first_at.take(vend.take(dv))), dv, n)
    i_serial = base.take(i_v)
    d_serial = base.take(d_v)
    d_serial -= 1
    d_serial += plus.take(d_v)
    return _RowEvents(i_rows, vslot.take(i_v), i_serial, d_rows, vslot.take(d_v), d_serial)


def _by_row(rows: np.ndarray, vals: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Distinct rows (< n) in ascending order with their `vals`, by a presence table."""
    present = np.zeros(n, bool)
    present[rows] = True
    where = np.empty(n, np.int64)
    where[rows] = vals
    r = np.flatnonzero(present)
    return r, where.take(r)


def _merge_by_instant(d_at: np.ndarray, i_at: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Output positions of two sequences sorted by instant merged by instant, the first's
    (`d_at`) first at one instant: each goes after its own predecessors and the other's
    elements before it — counted per instant over a narrow span, else by binary search."""
    nd, ni = len(d_at), len(i_at)
    if not nd or not ni:
        return np.arange(ni, dtype=np.int64), np.arange(nd, dtype=np.int64)
    a0 = min(int(d_at[0]), int(i_at[0]))
    span = max(int(d_at[-1]), int(i_at[-1])) - a0 + 1
    if span <= 4 * (nd + ni) + 64:
        dc = np.bincount(d_at - a0, minlength=span)
        ic = np.bincount(i_at - a0, minlength=span)
        d_le = np.cumsum(dc)  # `−` at or before each instant
        i_lt = np.cumsum(ic)
        i_lt -= ic  # `+` before each instant
        to_i = d_le.take(i_at - a0)
        to_d = i_lt.take(d_at - a0)
    else:
        to_i = np.searchsorted(d_at, i_at, side="right")
        to_d = np.searchsorted(i_at, d_at, side="left")
    to_i += np.arange(ni, dtype=np.int64)
    to_d += np.arange(nd, dtype=np.int64)
    return to_i, to_d


def _groups(slot: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Start and length of each run of equal slots."""
    heads = np.flatnonzero(run_starts(slot))
    return heads, np.diff(heads, append=len(slot))


def _order(at: np.ndarray, pos: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Positions sorting by (at, pos) (pairs distinct), and `at` so sorted: one np.sort of
    at, pos and position packed in an int64 when they fit."""
    m = len(at)
    a0, p0 = int(at.min()), int(pos.min())
    ib = max(m - 1, 1).bit_length()
    pw = max(int(pos.max()) - p0, 1).bit_length() + ib
    if (int(at.max()) - a0).bit_length() + pw <= 63:
        key = at - a0
        key <<= pw
        key |= (pos - p0) << ib
        key |= np.arange(m, dtype=np.int64)
        key.sort()
        o = key & ((1 << ib) - 1)
        key >>= pw
        key += a0
        return o, key
    o = np.lexsort((pos, at))  # pragma: no cover - spans beyond 2^63
    return o, at.take(o)


@dataclass
class _Events:
    """Changes of a call in (value, instant) order: slot, instant, sign, serial of the copy, the
    arrival index of the row carried and that row — of the batch (`row`), or the slot's kept
    row (`kept`)."""

    slot: np.ndarray
    at: np.ndarray
    sign: np.ndarray
    serial: np.ndarray
    pos: np.ndarray
    row: np.ndarray
    kept: np.ndarray
    per_value: tuple[np.ndarray, np.ndarray] | None = None  # (slots, their changes) when known

    @staticmethod
    def empty() -> _Events:
        z = _EMPTY_I
        return _Events(z, z, np.zeros(0, np.int8), z, z, z, np.zeros(0, bool))

    def take(self, i: np.ndarray) -> _Events:
        """The changes at positions `i` (their per-value counts unknown)."""
        return _Events(
            self.slot.take(i),
            self.at.take(i),
            self.sign.take(i),
            self.serial.take(i),
            self.pos.take(i),
            self.row.take(i),
            self.kept.take(i),
        )


@dataclass
class _RowEvents:
    """Changes of a call in row order: the `+` (batch rows, slots, serials of the copies they
    start) and the `−` (batch rows carried, slots, serials of the copies they end)."""

    i_rows: np.ndarray
    i_slot: np.ndarray
    i_serial: np.ndarray
    d_rows: np.ndarray
    d_slot: np.ndarray
    d_serial: np.ndarray
