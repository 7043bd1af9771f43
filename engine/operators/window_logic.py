"""Window runtimes: the state one window keeps between calls and the work it does per call.

A window kind (engine/operators/window_kinds.py) is configuration; its `logic()` makes one of
these runtime objects, which owns the window's buffers (the elements still to enter or leave)
and nothing else touches them. Every logic answers `process(batch, bound)` (the window's deltas
for the new input elements), `contents()` (the elements in the window after the last processed
instant, with their own ts; None before the first call or when it keeps no state) and
`state_bytes()`. All work is vectorized over the batch.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence

import numpy as np

from cqlstream.engine.batch import Batch, concat
from cqlstream.engine.kernels import filled, row_codes, stable_order

Lifetimes = Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]]


def emit(
    ins: Batch, dels: Batch, del_ts: np.ndarray, ins_ts: np.ndarray | None = None, sorted_sides: bool = False
) -> Batch:
    """Inserts (at ins_ts or their own ts) and deletes (at del_ts), merged in ts order.
    `sorted_sides`: each side is in ts order already (a window store's slices), so whether the
    concatenation is in order is one comparison, not a pass over it."""
    ins = ins if ins_ts is None else Batch(ins.cols, ins.nulls, ins_ts, ins.sign, ins.id)
    dels = Batch(dels.cols, dels.nulls, del_ts.astype(np.int64, copy=False), filled(len(dels), -1, np.int8), dels.id)
    out = concat([dels, ins], None) if (len(ins) or len(dels)) else ins
    if sorted_sides:
        merge = len(ins) > 0 and len(dels) > 0 and int(dels.ts[-1]) > int(ins.ts[0])
    else:
        merge = len(out) > 0 and not bool((out.ts[1:] >= out.ts[:-1]).all())
    if merge:
        out = out.take(out.ts.argsort(kind="stable"))
    return out


def emit_slices(buf: Batch, lo: int, hi: int, dlo: int, dhi: int, del_ts: np.ndarray, shift: int = 0) -> Batch:
    """`emit(buf[lo:hi], buf[dlo:dhi], del_ts + shift, sorted_sides=True)` for two ts-sorted
    slices of one buffer (a window store's): when they interleave, every array is gathered once
    from the buffer by the merge order, not concatenated and then gathered (sign from the side,
    ts from the merged keys). `shift` is added while the keys are written (no array for it)."""
    nd = dhi - dlo
    if type(buf) is not Batch or not nd or hi <= lo or int(del_ts[-1]) + shift <= int(buf.ts[lo]):
        return emit(buf.slice(lo, hi), buf.slice(dlo, dhi), del_ts + shift, sorted_sides=True)
    keys = np.empty(nd + hi - lo, np.int64)
    np.add(del_ts, shift, out=keys[:nd], casting="unsafe")
    keys[nd:] = buf.ts[lo:hi]
    perm = keys.argsort(kind="stable")  # two sorted runs: timsort merges them
    is_del = perm < nd
    ts = keys.take(perm)
    # a delete at perm p is buf[dlo + p], an insert buf[lo + p − nd]: perm becomes the buffer
    # positions in place (a fresh array of 8 bytes a row costs its page faults)
    src = perm
    src += lo - nd
    np.add(src, dlo - (lo - nd), out=src, where=is_del)
    return Batch(
        [c.take(src) for c in buf.cols],
        [None if m is None else m.take(src) for m in buf.nulls],
        ts,
        np.where(is_del, np.int8(-1), np.int8(1)),
        buf.id.take(src),
    )


def partition_ids(b: Batch, keys: Sequence[int]) -> np.ndarray:
    """Dense int64 partition id per row for the key columns (NULL is a value of its own)."""
    return row_codes([b.cols[k] for k in keys], [b.nulls[k] for k in keys], len(b))[0]


class WindowLogic(ABC):
    """The runtime of one window: `buf` holds the elements still to enter or leave (None before
    the first call)."""

    def __init__(self) -> None:
        self.buf: Batch | None = None

    @abstractmethod
    def process(self, b: Batch, bound: int) -> Batch:
        """The window's deltas for the input elements `b` (every element with ts ≤ bound not yet seen)."""

    def contents(self) -> Batch | None:
        """The elements in the window after the last processed instant, with their own ts (None
        before the first call)."""
        return self.buf

    def state_bytes(self) -> int:
        return 0 if self.buf is None else self.buf.nbytes()

    def pending_bytes(self) -> int:
        """Bytes of elements held that have not entered the window yet."""
        return 0


class PassThroughLogic(WindowLogic):
    """Unbounded windows: every element enters, none leaves, so the deltas are the input and
    nothing is kept (the window's readers hold the relation)."""

    def process(self, b: Batch, bound: int) -> Batch:
        return b


class TimeWindowLogic(WindowLogic):
    """Windows whose elements' lifetimes [t_in, t_out) are known on arrival (`lifetimes(ts)`):
    an element enters at t_in and leaves at t_out once the bound reaches them."""

    def __init__(self, lifetimes: Lifetimes) -> None:
        super().__init__()
        self.lifetimes = lifetimes
        self.t_in: np.ndarray = np.zeros(0, np.int64)
        self.t_out: np.ndarray = np.zeros(0, np.int64)
        self.entered: np.ndarray = np.zeros(0, bool)

    def process(self, b: Batch, bound: int) -> Batch:
        t_in, t_out = self.lifetimes(b.ts)
        # each mask turned into positions once, shared by the batch and the lifetime arrays
        # (Batch.take would convert it anyway; the arrays' own mask indexing was a second scan)
        keep = (t_in < t_out).nonzero()[0]
        if self.buf is None:
            buf = b.take(keep)
            self.t_in, self.t_out = t_in.take(keep), t_out.take(keep)
            self.entered = np.zeros(len(keep), bool)
        else:
            buf = concat([self.buf, b.take(keep)])
            self.t_in = np.concatenate([self.t_in, t_in.take(keep)])
            self.t_out = np.concatenate([self.t_out, t_out.take(keep)])
            self.entered = np.concatenate([self.entered, np.zeros(len(keep), bool)])
        enter_m = ~self.entered & (self.t_in <= bound)
        leave_m = self.t_out <= bound
        enter, leave, stay = enter_m.nonzero()[0], leave_m.nonzero()[0], (~leave_m).nonzero()[0]
        out = emit(buf.take(enter), buf.take(leave), self.t_out.take(leave), self.t_in.take(enter))
        self.entered |= enter_m
        self.buf = buf.take(stay)
        self.t_in, self.t_out, self.entered = self.t_in.take(stay), self.t_out.take(stay), self.entered.take(stay)
        return out

    def contents(self) -> Batch | None:
        return None if self.buf is None else self.buf.take(self.entered)

    def pending_bytes(self) -> int:
        """Elements whose t_in the bound has not reached (a slide not closed yet), in proportion."""
        n = 0 if self.buf is None else len(self.buf)
        waiting = n - int(np.count_nonzero(self.entered)) if n else 0
        return 0 if not waiting or self.buf is None else self.buf.nbytes() * waiting // n


class RowsLogic(WindowLogic):
    """Rows N: element j leaves when element j + N arrives."""

    def __init__(self, size: int) -> None:
        super().__init__()
        self.size = size

    def process(self, b: Batch, bound: int) -> Batch:
        n = self.size
        comb = b if self.buf is None else concat([self.buf, b])
        k = len(comb)
        dead = max(k - n, 0)  # combined positions [0, dead) leave at ts[i + n]
        out = emit(b, comb.slice(0, dead), comb.ts[n : n + dead] if dead else np.zeros(0, np.int64))
        self.buf = comb.slice(dead, k)
        return out


class RowsSlideLogic(WindowLogic):
    """Rows N Slide M: the window moves every M elements; element j enters when the element
    completing its slide group arrives and leaves with the one completing j + N's."""

    def __init__(self, size: int, slide: int) -> None:
        super().__init__()
        self.size, self.slide = size, slide
        self.count = 0  # elements seen (global positions)
        self.entered: np.ndarray = np.zeros(0, bool)

    def process(self, b: Batch, bound: int) -> Batch:
        n, m = self.size, self.slide
        first = self.count - (0 if self.buf is None else len(self.buf))  # global index of buf[0]
        comb = b if self.buf is None else concat([self.buf, b])
        self.count += len(b)
        idx = np.arange(first, first + len(comb), dtype=np.int64)
        last = first + len(comb) - 1

        # g(j): index of the element completing j's slide group (1-based positions M, 2M, ...)
        def g(j: np.ndarray) -> np.ndarray:
            return (j // m + 1) * m - 1

        gi, go = g(idx), g(idx + n)
        entered = np.zeros(len(comb), bool)
        if self.buf is not None:
            entered[: len(self.buf)] = self.entered
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
        self.entered = (entered | enter)[start:]
        return out

    def contents(self) -> Batch | None:
        return None if self.buf is None else self.buf.take(self.entered)


class PartitionLogic(WindowLogic):
    """Partition By keys Rows N: the last N elements of each partition."""

    def __init__(self, keys: Sequence[int], rows: int) -> None:
        super().__init__()
        self.keys, self.rows = keys, rows

    def process(self, b: Batch, bound: int) -> Batch:
        n = self.rows
        comb = b if self.buf is None else concat([self.buf, b])
        pid = partition_ids(comb, self.keys)
        order = stable_order(pid)
        sp = pid[order]
        # sorted position i dies if the row n places later is of its partition; the positions
        # with such a row are a prefix, so slices, and the dead ones as positions
        h = max(len(comb) - n, 0)
        dead = (sp[n:] == sp[:h]).nonzero()[0]
        dead_sorted = order.take(dead)
        dead_ts = comb.ts.take(order.take(dead + n))
        out = emit(b, comb.take(dead_sorted), dead_ts)
        alive = np.ones(len(comb), bool)
        alive[dead_sorted] = False
        self.buf = comb.take(alive)
        return out
