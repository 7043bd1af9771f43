"""Window kinds (docs/semantics.md): one class per kind of stream → relation window.

A kind is its configuration (the logical window spec and the engine's mode, a frozen dataclass)
plus its runtime logic, which runs over the state its `WindowOp` carries: `buf`, the elements
still to enter or leave, and for time windows each one's lifetime [t_in, t_out). `kind_of` picks
the registered class whose `matches(spec)` holds; a new kind is one class decorated with
`@register` (plus, to be written in CQL, the grammar/analyzer entry producing its spec).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from cqlstream.cql.logical.nodes import PartitionSpec, RangeSpec, RowsSpec
from cqlstream.engine.batch import Batch, concat
from cqlstream.engine.kernels import row_codes, stable_order
from cqlstream.engine.operators.base import BOUNDED, GROWS, RATE

if TYPE_CHECKING:
    from cqlstream.engine.operators.window import WindowOp

INF = np.iinfo(np.int64).max


def range_life(size: int, compat: bool) -> int:
    """Instants an element of a Range `size` window stays, [τ, τ + life). The paper's Range N at
    t holds τ in [t−N, t] (N+1 instants), STREAM 0.6's (compat) τ in (t−N, t] (N instants); Now
    (N = 0) holds the current instant in both."""
    return size + 1 if not compat or size == 0 else size


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


# ---------------------------------------------------------------- the registry
KINDS: list[type[WindowKind]] = []


def register(cls: type[WindowKind]) -> type[WindowKind]:
    """Class decorator: make a window kind known to `kind_of`."""
    KINDS.append(cls)
    return cls


def kind_of(spec, compat: bool = False) -> WindowKind:
    """The window kind computing `spec` (TypeError when no registered kind matches)."""
    for cls in KINDS:
        if cls.matches(spec):
            return cls(spec, compat)
    raise TypeError(f"no window kind for {spec!r}")


@dataclass(frozen=True)
class WindowKind:
    """Base of the window kinds: configuration and the defaults of the runtime protocol."""

    spec: Any
    compat: bool = False
    store_mode: ClassVar[str | None] = None  # 'range' / 'rows': its elements live in a shared WindowStore
    has_state: ClassVar[bool] = True  # False: the window keeps nothing to snapshot (Unbounded)

    @classmethod
    def matches(cls, spec) -> bool:
        return False

    def process(self, op: WindowOp, b: Batch, bound: int) -> Batch:
        """The window's deltas for the input elements `b` (every element with ts ≤ bound not yet seen)."""
        raise NotImplementedError

    def contents(self, op: WindowOp) -> Batch | None:
        """The elements in the window after the last processed instant, with their own ts (None
        when the window keeps no state to tell)."""
        if op.buf is None:
            return Batch.empty(op.output.types) if op.done_through is not None and self.has_state else None
        return op.buf

    def extent(self) -> int:
        """A store-served window's extent: instants an element stays (range) or rows (rows)."""
        raise NotImplementedError

    def complete_from(self, cf):
        """First exact output instant given the input is exact from `cf`: by default never (the
        window needs history from before cf)."""
        return math.inf

    def state_class(self) -> tuple[int, bool]:
        """(size class of the window's relation, whether the window holds that state itself)."""
        return GROWS, False


class TimeWindow(WindowKind):
    """Windows whose elements' lifetimes are known on arrival: `lifetimes(ts)` → (t_in, t_out)."""

    def lifetimes(self, ts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        raise NotImplementedError

    def process(self, op, b, bound):
        t_in, t_out = self.lifetimes(b.ts)
        keep = t_in < t_out
        if op.buf is None:
            op.buf = b.take(keep)
            op.buf_in, op.buf_out = t_in[keep], t_out[keep]
            op.buf_entered = np.zeros(int(keep.sum()), bool)
        else:
            op.buf = concat([op.buf, b.take(keep)])
            op.buf_in = np.concatenate([op.buf_in, t_in[keep]])
            op.buf_out = np.concatenate([op.buf_out, t_out[keep]])
            op.buf_entered = np.concatenate([op.buf_entered, np.zeros(int(keep.sum()), bool)])
        enter = ~op.buf_entered & (op.buf_in <= bound)
        leave = op.buf_out <= bound
        out = emit(op.buf.take(enter), op.buf.take(leave), op.buf_out[leave], op.buf_in[enter])
        stay = ~leave
        op.buf_entered |= enter
        op.buf = op.buf.take(stay)
        op.buf_in, op.buf_out, op.buf_entered = op.buf_in[stay], op.buf_out[stay], op.buf_entered[stay]
        return out

    def contents(self, op):
        if op.buf is None:
            return super().contents(op)
        return op.buf.take(op.buf_entered)


# ---------------------------------------------------------------- the kinds
@register
class UnboundedWindow(WindowKind):
    """Range Unbounded / Rows Unbounded: every element enters, none leaves, so the window's
    deltas are the stream's elements and it keeps nothing (its readers hold the relation)."""

    has_state = False

    @classmethod
    def matches(cls, spec):
        return (isinstance(spec, RangeSpec) and spec.size is None and not spec.slide) or (
            isinstance(spec, RowsSpec) and spec.size is None
        )

    def process(self, op, b, bound):
        return b


@register
class RangeWindow(TimeWindow):
    """Range N: an element stays `range_life(N)` instants from its own ts."""

    store_mode = "range"

    @classmethod
    def matches(cls, spec):
        return isinstance(spec, RangeSpec) and spec.size not in (None, 0) and not spec.slide

    @property
    def life(self) -> int:
        return range_life(self.spec.size, self.compat)

    def lifetimes(self, ts):
        return ts, ts + self.life

    def extent(self) -> int:
        return self.life

    def complete_from(self, cf):
        return cf + self.life - 1

    def state_class(self):
        return RATE, True


@register
class NowWindow(RangeWindow):
    """Now (Range 0): the elements of the current instant."""

    @classmethod
    def matches(cls, spec):
        return isinstance(spec, RangeSpec) and spec.size == 0 and not spec.slide


@register
class RangeSlideWindow(TimeWindow):
    """Range N Slide M: the window moves at multiples of M; an element enters at the first
    multiple of M at or after its ts and leaves at the first one at or after ts + N."""

    @classmethod
    def matches(cls, spec):
        return isinstance(spec, RangeSpec) and bool(spec.slide)

    def lifetimes(self, ts):
        s = self.spec
        if s.size is None:
            return ts, np.full(len(ts), INF, np.int64)
        m, n = s.slide, s.size
        t_in = -(-ts // m) * m  # smallest multiple of M ≥ τ
        t_out = -(-(ts + n) // m) * m  # smallest multiple of M ≥ τ+N
        return t_in, t_out

    def state_class(self):
        return (RATE, True) if self.spec.size is not None else (GROWS, False)


@register
class RowsWindow(WindowKind):
    """Rows N: element j leaves when element j + N arrives."""

    store_mode = "rows"

    @classmethod
    def matches(cls, spec):
        return isinstance(spec, RowsSpec) and spec.size is not None and spec.slide is None

    def extent(self) -> int:
        return self.spec.size

    def process(self, op, b, bound):
        n = self.spec.size
        comb = b if op.buf is None else concat([op.buf, b])
        k = len(comb)
        dead = max(k - n, 0)  # combined positions [0, dead) leave at ts[i + n]
        out = emit(b, comb.slice(0, dead), comb.ts[n : n + dead] if dead else np.zeros(0, np.int64))
        op.buf = comb.slice(dead, k)
        return out

    def state_class(self):
        return BOUNDED, True


@register
class RowsSlideWindow(WindowKind):
    """Rows N Slide M: the window moves every M elements."""

    @classmethod
    def matches(cls, spec):
        return isinstance(spec, RowsSpec) and spec.size is not None and spec.slide is not None

    def process(self, op, b, bound):
        n, m = self.spec.size, self.spec.slide
        first = op.count - (0 if op.buf is None else len(op.buf))  # global index of buf[0]
        comb = b if op.buf is None else concat([op.buf, b])
        op.count += len(b)
        idx = np.arange(first, first + len(comb), dtype=np.int64)
        last = first + len(comb) - 1

        def g(j):  # index of the element completing j's slide group (1-based positions M, 2M, ...)
            return (j // m + 1) * m - 1

        gi, go = g(idx), g(idx + n)
        entered = np.zeros(len(comb), bool)
        if op.buf is not None:
            entered[: len(op.buf)] = op.buf_entered
        never = gi == go
        enter = ~entered & ~never & (gi <= last)
        leave = ~never & (go <= last) & (entered | enter)
        drop = never | leave
        ts_of = lambda j: comb.ts[j - first]  # noqa: E731 — indexes into the combined batch
        out = emit(comb.take(enter), comb.take(leave), ts_of(go[leave]), ts_of(gi[enter]))
        keep = ~drop
        # keep elements from the first kept one onwards so index arithmetic stays contiguous
        start = int(np.argmax(keep)) if keep.any() else len(comb)
        op.buf = comb.slice(start, len(comb))
        op.buf_entered = (entered | enter)[start:]
        return out

    def contents(self, op):
        if op.buf is None:
            return super().contents(op)
        return op.buf.take(op.buf_entered)

    def state_class(self):
        return BOUNDED, True


@register
class PartitionRowsWindow(WindowKind):
    """Partition By keys Rows N: the last N elements of each partition; the number of
    partitions grows with the distinct keys."""

    @classmethod
    def matches(cls, spec):
        return isinstance(spec, PartitionSpec)

    def process(self, op, b, bound):
        n = self.spec.rows
        comb = b if op.buf is None else concat([op.buf, b])
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
        out = emit(b, comb.take(dead_sorted), dead_ts)
        alive = np.ones(len(comb), bool)
        alive[dead_sorted] = False
        op.buf = comb.take(alive)
        return out

    def state_class(self):
        return GROWS, True
