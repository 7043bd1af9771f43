"""Stream → relation windows (docs/semantics.md): every element gets a lifetime [t_in, t_out).

The window emits `+` at t_in and `−` (same id) at t_out once the bound reaches them. Time windows
know both ends on arrival; Rows and Partition windows learn t_out when the N-th later element
(of the partition) arrives. All work is vectorized over the batch; the carried state is only the
elements still in (or about to enter) the window.
"""
from __future__ import annotations

import math

import numpy as np

from cql.logical.nodes import PartitionSpec, RangeSpec, RowsSpec
from engine.batch import Batch, concat
from engine.operators.base import Operator

INF = np.iinfo(np.int64).max


def _emit(ins: Batch, dels: Batch, del_ts: np.ndarray, ins_ts: np.ndarray | None = None) -> Batch:
    """Inserts (at ins_ts or their own ts) and deletes (at del_ts), merged in ts order."""
    ins = ins if ins_ts is None else Batch(ins.cols, ins.nulls, ins_ts, ins.sign, ins.id)
    dels = Batch(dels.cols, dels.nulls, del_ts.astype(np.int64), -np.ones(len(dels), np.int8), dels.id)
    out = concat([dels, ins], None) if (len(ins) or len(dels)) else ins
    if len(out) and not bool(np.all(out.ts[1:] >= out.ts[:-1])):
        out = out.take(np.argsort(out.ts, kind="stable"))
    return out


def partition_ids(b: Batch, keys) -> np.ndarray:
    """Dense int64 partition id per row for the key columns (NULL is a value of its own)."""
    pid = np.zeros(len(b), np.int64)
    for k in keys:
        col = b.cols[k]
        _, inv = np.unique(col, return_inverse=True)
        inv = inv.astype(np.int64) * 2
        m = b.nulls[k]
        if m is not None:
            inv = np.where(m, 1, inv + 2)
        width = int(inv.max()) + 1 if len(inv) else 1
        pid = pid * width + inv
        _, pid = np.unique(pid, return_inverse=True)
        pid = pid.astype(np.int64)
    return pid


class WindowOp(Operator):
    kind = "seq-window"

    def __init__(self, inputs, output, ids, spec, compat: bool = False, options=None, store=None):
        super().__init__(inputs, output, ids, options)
        self.spec = spec
        self.compat = compat
        self.store: WindowStore | None = None  # shared elements (plain Range / Rows windows)
        if store is not None:
            store.join(self)
        self.buf: Batch | None = None  # elements still to enter or leave
        self.buf_in: np.ndarray = np.zeros(0, np.int64)  # t_in (time windows)
        self.buf_out: np.ndarray = np.zeros(0, np.int64)  # t_out (time windows)
        self.buf_entered: np.ndarray = np.zeros(0, bool)
        self.count = 0  # elements seen (Rows Slide positions)

    def state_bytes(self) -> int:
        return 0 if self.buf is None else self.buf.nbytes()  # a shared store counts at plan level

    @property
    def life(self) -> int:
        """Instants an element of a plain Range window stays: [τ, τ + life)."""
        n = self.spec.size
        return n + 1 if not self.compat or n == 0 else n

    def process(self, inputs, bound):
        if self.store is not None:
            return self.store.deltas(self, bound)
        b = inputs[0]
        s = self.spec
        if isinstance(s, RangeSpec):
            return self._time(b, bound)
        if isinstance(s, RowsSpec) and s.size is None:
            return b  # Rows Unbounded: every element enters, none leaves
        if isinstance(s, RowsSpec) and s.slide is None:
            return self._rows(b)
        if isinstance(s, RowsSpec):
            return self._rows_slide(b)
        if isinstance(s, PartitionSpec):
            return self._partition(b)
        raise TypeError(s)

    # ------------------------------------------------------------ Range / Now / Unbounded / Slide
    def _lifetimes(self, ts: np.ndarray):
        s = self.spec
        if s.size is None:
            return ts, np.full(len(ts), INF, np.int64)
        if s.slide:
            m, n = s.slide, s.size
            t_in = -(-ts // m) * m  # smallest multiple of M ≥ τ
            t_out = -(-(ts + n) // m) * m  # smallest multiple of M ≥ τ+N
            return t_in, t_out
        life = s.size + 1 if not self.compat or s.size == 0 else s.size
        return ts, ts + life

    def _time(self, b: Batch, bound: int) -> Batch:
        if self.spec.size is None and not self.spec.slide:
            return b  # Unbounded: the window's deltas are the stream's elements
        t_in, t_out = self._lifetimes(b.ts)
        keep = t_in < t_out
        if self.buf is None:
            self.buf = b.take(keep)
            self.buf_in, self.buf_out = t_in[keep], t_out[keep]
            self.buf_entered = np.zeros(int(keep.sum()), bool)
        else:
            self.buf = concat([self.buf, b.take(keep)])
            self.buf_in = np.concatenate([self.buf_in, t_in[keep]])
            self.buf_out = np.concatenate([self.buf_out, t_out[keep]])
            self.buf_entered = np.concatenate([self.buf_entered, np.zeros(int(keep.sum()), bool)])
        enter = ~self.buf_entered & (self.buf_in <= bound)
        leave = self.buf_out <= bound
        out = _emit(self.buf.take(enter), self.buf.take(leave), self.buf_out[leave], self.buf_in[enter])
        stay = ~leave
        self.buf_entered |= enter
        self.buf = self.buf.take(stay)
        self.buf_in, self.buf_out, self.buf_entered = self.buf_in[stay], self.buf_out[stay], self.buf_entered[stay]
        return out

    # ------------------------------------------------------------ Rows N
    def _rows(self, b: Batch) -> Batch:
        n = self.spec.size
        comb = b if self.buf is None else concat([self.buf, b])
        k = len(comb)
        dead = max(k - n, 0)  # combined positions [0, dead) leave at ts[i + n]
        out = _emit(b, comb.slice(0, dead), comb.ts[n:n + dead] if dead else np.zeros(0, np.int64))
        self.buf = comb.slice(dead, k)
        return out

    # ------------------------------------------------------------ Rows N Slide M
    def _rows_slide(self, b: Batch) -> Batch:
        n, m = self.spec.size, self.spec.slide
        first = self.count - (0 if self.buf is None else len(self.buf))  # global index of buf[0]
        comb = b if self.buf is None else concat([self.buf, b])
        self.count += len(b)
        idx = np.arange(first, first + len(comb), dtype=np.int64)
        last = first + len(comb) - 1

        def g(j):  # index of the element completing j's slide group (1-based positions M, 2M, ...)
            return (j // m + 1) * m - 1

        gi, go = g(idx), g(idx + n)
        entered = np.zeros(len(comb), bool)
        if self.buf is not None:
            entered[: len(self.buf)] = self.buf_entered
        never = gi == go
        enter = ~entered & ~never & (gi <= last)
        leave = ~never & (go <= last) & (entered | enter)
        drop = never | leave
        ts_of = lambda j: comb.ts[j - first]  # noqa: E731 — indexes into the combined batch
        out = _emit(comb.take(enter), comb.take(leave), ts_of(go[leave]), ts_of(gi[enter]))
        keep = ~drop
        # keep elements from the first kept one onwards so index arithmetic stays contiguous
        start = int(np.argmax(keep)) if keep.any() else len(comb)
        self.buf = comb.slice(start, len(comb))
        self.buf_entered = (entered | enter)[start:]
        return out

    # ------------------------------------------------------------ Partition By keys Rows N
    def _partition(self, b: Batch) -> Batch:
        n = self.spec.rows
        comb = b if self.buf is None else concat([self.buf, b])
        pid = partition_ids(comb, self.spec.keys)
        order = np.lexsort((np.arange(len(comb)), pid))
        sp = pid[order]
        pos = np.arange(len(comb))
        later = pos + n
        has_later = later < len(comb)
        same = np.zeros(len(comb), bool)
        same[has_later] = sp[later[has_later]] == sp[has_later]
        dead_sorted = order[same]
        dead_ts = comb.ts[order[later[same]]]
        old = 0 if self.buf is None else len(self.buf)
        out = _emit(b, comb.take(dead_sorted), dead_ts)
        alive = np.ones(len(comb), bool)
        alive[dead_sorted] = False
        self.buf = comb.take(alive)
        _ = old
        return out




# ---------------------------------------------------------------- one store for many windows (#5)
def plain_kind(spec) -> str | None:
    """'range' / 'rows' for the windows a `WindowStore` serves (no slide); None otherwise."""
    if isinstance(spec, RangeSpec) and spec.size is not None and not spec.slide:
        return "range"
    if isinstance(spec, RowsSpec) and spec.size is not None and spec.slide is None:
        return "rows"
    return None


class WindowStore:
    """The elements of one stream held once for every plain Range (or every plain Rows) window
    over it, whatever their sizes (STREAM's shared window synopsis, IEEE DE Bulletin §2.2): each
    window reads its own extent. A Range window of life L at bound b inserts the elements with
    τ in (p, b] and deletes those with τ + L in (p, b] (p: its previous bound); a Rows N window
    deletes element j when element j + N arrives. Both are slices of one ts-sorted buffer.
    Elements are dropped once no member can still need them."""

    kind = "window store"

    def __init__(self, queue, mode: str):
        self.queue = queue
        self.mode = mode
        self.reader = queue.reader()
        self.buf = Batch.empty(queue.types)
        self.first = 0  # global arrival index of buf[0]
        self.count = 0  # elements appended
        self.through: int | None = None
        self.members: list[WindowOp] = []
        self.done: dict[int, int] = {}  # id(member) → elements it has consumed (Rows)
        self.eid: str | None = None
        # completeness: every element with τ ≥ held_from (Range) / index ≥ first (Rows) is held;
        # a store started while its stream flowed misses what came before (`partial`)
        self.partial = False
        self.held_from: int | None = None
        self.views: list[WindowRelation] = []  # members' relations read by joins

    def __len__(self) -> int:
        return len(self.buf)

    def nbytes(self) -> int:
        return self.buf.nbytes()

    @property
    def users(self):
        return self.members

    def extent(self, op: WindowOp) -> int:
        return op.life if self.mode == "range" else op.spec.size

    def join(self, op: WindowOp) -> None:
        """Add a member; one joining while data flows starts at the store's position (`late`)."""
        op.store = self
        self.members.append(op)
        op.late_from = None
        if self.through is not None:
            op.done_through = self.through
            self.done[id(op)] = self.count
            op.late_from = self.through

    def leave(self, op: WindowOp) -> None:
        if op in self.members:
            self.members.remove(op)
            self.done.pop(id(op), None)
            self._purge()  # what only the leaving window needed goes now

    def complete_from(self, op: WindowOp):
        """From which instant `op`'s window is exact given what the store holds (None: from the
        start; math.inf: never, a Rows window that missed elements)."""
        if self.mode == "range":
            return None if self.held_from is None else self.held_from + op.life - 1
        c = self.done.get(id(op), self.count)
        if self.partial or (self.first > 0 and c - op.spec.size < self.first):
            return math.inf
        return None

    def advance(self, bound: int) -> None:
        if self.through is not None and bound <= self.through:
            return
        d = self.reader.take(bound)
        self.through = bound
        if len(d):
            self.buf = concat([self.buf, d])
            self.count += len(d)

    def _readers(self):
        """(window, its progress) for every member and every operator reading a member's relation
        through a `WindowRelation` view (a join lagging behind its window keeps elements here)."""
        for m in self.members:
            yield m, m.done_through
        for v in self.views:
            for u in v.users:
                yield v.window, u.done_through

    def _purge(self) -> None:
        readers = list(self._readers())
        if not self.members or any(p is None for _, p in readers):
            return
        if self.mode == "range":
            low = min(p - w.life for w, p in readers)  # keep τ > low
            k = int(np.searchsorted(self.buf.ts, low, side="right"))
        else:
            # keep j ≥ low: a member needs the N before what it consumed; a view reader the N
            # before the count at its progress
            low = min(self.done.get(id(m), 0) - m.spec.size for m in self.members)
            for v in self.views:
                for u in v.users:
                    low = min(low, self.count_through(u.done_through) - v.window.spec.size)
            k = max(0, min(low - self.first, len(self.buf)))
        if k > 0:
            if self.mode == "range":
                self.held_from = max(self.held_from if self.held_from is not None else low + 1, low + 1)
            self.buf = self.buf.slice(k, len(self.buf))
            self.first += k

    def deltas(self, op: WindowOp, bound: int) -> Batch:
        """`op`'s output elements for instants (op.done_through, bound]."""
        self.advance(bound)
        p = op.done_through
        ts = self.buf.ts
        if self.mode == "range":
            L = op.life
            lo = 0 if p is None else int(np.searchsorted(ts, p, side="right"))
            hi = int(np.searchsorted(ts, bound, side="right"))
            dlo = 0 if p is None else int(np.searchsorted(ts, p - L, side="right"))
            dhi = int(np.searchsorted(ts, bound - L, side="right"))
            dels = self.buf.slice(dlo, dhi)
            out = _emit(self.buf.slice(lo, hi), dels, dels.ts + L)
        else:
            n = op.spec.size
            c0 = self.done.get(id(op), 0)
            c1 = self.first + int(np.searchsorted(ts, bound, side="right"))
            ins = self.buf.slice(c0 - self.first, c1 - self.first)
            j0, j1 = max(c0 - n, self.first), max(c1 - n, self.first)
            dels = self.buf.slice(j0 - self.first, j1 - self.first)
            out = _emit(ins, dels, ts[j0 + n - self.first:j1 + n - self.first])
            self.done[id(op)] = c1
        op.done_through = bound  # (step sets it too) the purge below must see this member's progress
        self._purge()
        return out

    def count_through(self, t: int) -> int:
        """Global index one past the last element with ts ≤ t."""
        return self.first + int(np.searchsorted(self.buf.ts, t, side="right"))

    def contents(self, op: WindowOp, t: int | None = None) -> Batch | None:
        """The elements in op's window at instant t (default: its last processed instant), with
        their own ts; t must not be later than what the store has taken in."""
        t = op.done_through if t is None else t
        if t is None:
            return None
        ts = self.buf.ts
        if self.mode == "range":
            lo = int(np.searchsorted(ts, t - op.life, side="right"))
            hi = int(np.searchsorted(ts, t, side="right"))
            return self.buf.slice(lo, hi)
        c = self.count_through(t)
        return self.buf.slice(max(c - op.spec.size - self.first, 0), c - self.first)


class WindowRelation:
    """A plain window's relation as a join reads it (the `RelationStore` interface), answered
    from the stream's window store: the window's contents at instant t are a slice of it, so a
    join over windows keeps no copy of their state (STREAM's synopsis stubs over one store)."""

    kind = "window relation (view)"

    def __init__(self, window: WindowOp):
        self.window = window
        self.store: WindowStore = window.store
        self.store.views.append(self)
        self.queue = window.output
        self.reader = None
        self.users: list = []
        self.eid: str | None = None

    @property
    def through(self) -> int | None:
        return self.window.done_through

    def __len__(self) -> int:
        c = self.store.contents(self.window)
        return 0 if c is None else len(c)

    def nbytes(self) -> int:
        return 0  # the elements are the window store's

    def advance(self, bound: int) -> None:
        """Nothing to take in: the window has taken its input through `bound` already."""

    def alive_at(self, t: int | None) -> Batch:
        if t is None:
            return Batch.empty(self.queue.types)
        return self.store.contents(self.window, t)

    def close(self) -> None:
        if self in self.store.views:
            self.store.views.remove(self)


# ---------------------------------------------------------------- late start (plan manager, #5)
def contents(op: WindowOp) -> Batch | None:
    """The elements in the window after the last processed instant, with their own ts (None when
    the operator keeps no state to tell, e.g. Unbounded windows)."""
    if op.store is not None:
        return op.store.contents(op)
    if op.buf is None:
        return Batch.empty(op.output.types) if op.done_through is not None and has_state(op.spec) else None
    if isinstance(op.spec, RangeSpec) or (isinstance(op.spec, RowsSpec) and op.spec.slide):
        return op.buf.take(op.buf_entered)
    if isinstance(op.spec, (RowsSpec, PartitionSpec)) and has_state(op.spec):
        return op.buf
    return None


def has_state(spec) -> bool:
    return not ((isinstance(spec, RangeSpec) and spec.size is None and not spec.slide)
                or (isinstance(spec, RowsSpec) and spec.size is None))


def snapshot(op: WindowOp) -> Batch | None:
    """The window's relation at its last processed instant, as inserts at that instant."""
    c = contents(op)
    if c is None or op.done_through is None:
        return None
    return Batch(c.cols, c.nulls, np.full(len(c), op.done_through, np.int64), np.ones(len(c), np.int8), c.id)
