"""Stream → relation windows (docs/semantics.md): every element gets a lifetime [t_in, t_out).

The window emits `+` at t_in and `−` (same id) at t_out once the bound reaches them. Time windows
know both ends on arrival; Rows and Partition windows learn t_out when the N-th later element
(of the partition) arrives. All work is vectorized over the batch; the carried state is only the
elements still in (or about to enter) the window.
"""

from __future__ import annotations

import numpy as np
from cqlstream.cql.logical.nodes import PartitionSpec, RangeSpec, RowsSpec
from cqlstream.engine.batch import Batch, concat
from cqlstream.engine.kernels import row_codes, stable_order
from cqlstream.engine.operators.base import Operator

INF = np.iinfo(np.int64).max


def emit(ins: Batch, dels: Batch, del_ts: np.ndarray, ins_ts: np.ndarray | None = None) -> Batch:
    """Inserts (at ins_ts or their own ts) and deletes (at del_ts), merged in ts order."""
    ins = ins if ins_ts is None else Batch(ins.cols, ins.nulls, ins_ts, ins.sign, ins.id)
    dels = Batch(dels.cols, dels.nulls, del_ts.astype(np.int64), -np.ones(len(dels), np.int8), dels.id)
    out = concat([dels, ins], None) if (len(ins) or len(dels)) else ins
    if len(out) and not bool(np.all(out.ts[1:] >= out.ts[:-1])):
        out = out.take(np.argsort(out.ts, kind="stable"))
    return out


def partition_ids(b: Batch, keys) -> np.ndarray:
    """Dense int64 partition id per row for the key columns (NULL is a value of its own)."""
    return row_codes([b.cols[k] for k in keys], [b.nulls[k] for k in keys], len(b))[0]


class WindowOp(Operator):
    kind = "seq-window"

    def __init__(self, inputs, output, ids, spec, compat: bool = False, options=None, store=None):
        super().__init__(inputs, output, ids, options)
        self.spec = spec
        self.compat = compat
        self.store = None  # engine.window_store.WindowStore: shared elements (plain Range / Rows windows)
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
        out = emit(self.buf.take(enter), self.buf.take(leave), self.buf_out[leave], self.buf_in[enter])
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
        out = emit(b, comb.slice(0, dead), comb.ts[n : n + dead] if dead else np.zeros(0, np.int64))
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
        out = emit(comb.take(enter), comb.take(leave), ts_of(go[leave]), ts_of(gi[enter]))
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
        order = stable_order(pid)
        sp = pid[order]
        pos = np.arange(len(comb))
        later = pos + n
        has_later = later < len(comb)
        same = np.zeros(len(comb), bool)
        same[has_later] = sp[later[has_later]] == sp[has_later]
        dead_sorted = order[same]
        dead_ts = comb.ts[order[later[same]]]
        old = 0 if self.buf is None else len(self.buf)
        out = emit(b, comb.take(dead_sorted), dead_ts)
        alive = np.ones(len(comb), bool)
        alive[dead_sorted] = False
        self.buf = comb.take(alive)
        _ = old
        return out


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
    return not (
        (isinstance(spec, RangeSpec) and spec.size is None and not spec.slide)
        or (isinstance(spec, RowsSpec) and spec.size is None)
    )


def snapshot(op: WindowOp) -> Batch | None:
    """The window's relation at its last processed instant, as inserts at that instant."""
    c = contents(op)
    if c is None or op.done_through is None:
        return None
    return Batch(c.cols, c.nulls, np.full(len(c), op.done_through, np.int64), np.ones(len(c), np.int8), c.id)
