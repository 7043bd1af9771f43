"""Window kinds (docs/semantics.md): one class per kind of stream → relation window.

A kind is configuration: a frozen dataclass of the logical window spec and the engine's mode
that declares what the plan asks of the window (which specs it computes, whether a shared window
store can serve it and with which extent, from when its output is exact, its memory class) and
makes its runtime with `logic()` (engine/operators/window_logic.py: the buffers and the per-call
work). `kind_of` picks the registered class whose `matches(spec)` holds; a new kind is one class
decorated with `@register` (plus, to be written in CQL, the grammar/analyzer entry producing its
spec).
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from cqlstream.cql.logical.nodes import PartitionSpec, RangeSpec, RowsSpec
from cqlstream.engine.operators.base import BOUNDED, GROWS, RATE
from cqlstream.engine.operators.window_logic import (
    PartitionLogic,
    PassThroughLogic,
    RowsLogic,
    RowsSlideLogic,
    TimeWindowLogic,
    WindowLogic,
)

INF = np.iinfo(np.int64).max


def range_life(size: int, compat: bool) -> int:
    """Instants an element of a Range `size` window stays, [τ, τ + life). The paper's Range N at
    t holds τ in [t−N, t] (N+1 instants), STREAM 0.6's (compat) τ in (t−N, t] (N instants); Now
    (N = 0) holds the current instant in both."""
    return size + 1 if not compat or size == 0 else size


# ---------------------------------------------------------------- the registry
KINDS: list[type[WindowKind]] = []


def register(cls: type[WindowKind]) -> type[WindowKind]:
    """Class decorator: make a window kind known to `kind_of`."""
    KINDS.append(cls)
    return cls


def kind_of(spec: Any, compat: bool = False) -> WindowKind:
    """The window kind computing `spec` (TypeError when no registered kind matches)."""
    for cls in KINDS:
        if cls.matches(spec):
            return cls(spec, compat)
    raise TypeError(f"no window kind for {spec!r}")


@dataclass(frozen=True)
class WindowKind(ABC):
    """Base of the window kinds: the configuration, and the defaults of what it declares."""

    spec: Any
    compat: bool = False
    store_mode: ClassVar[str | None] = None  # 'range' / 'rows': its elements live in a shared WindowStore
    has_state: ClassVar[bool] = True  # False: the window keeps nothing to snapshot (Unbounded)

    @classmethod
    def matches(cls, spec: Any) -> bool:
        return False

    @abstractmethod
    def logic(self) -> WindowLogic:
        """A fresh runtime for one window of this kind (its buffers, `process`, `contents`)."""

    def extent(self) -> int:
        """A store-served window's extent: instants an element stays (range) or rows (rows)."""
        raise NotImplementedError(type(self).__name__)

    def complete_from(self, cf: float) -> float:
        """First exact output instant given the input is exact from `cf`: by default never (the
        window needs history from before cf)."""
        return math.inf

    def state_class(self) -> tuple[int, bool]:
        """(size class of the window's relation, whether the window holds that state itself)."""
        return GROWS, False


class TimeWindow(WindowKind):
    """Windows whose elements' lifetimes are known on arrival: `lifetimes(ts)` → (t_in, t_out);
    their runtime is a `TimeWindowLogic` over those lifetimes."""

    @abstractmethod
    def lifetimes(self, ts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(t_in, t_out) of elements arriving at `ts`."""

    def logic(self) -> WindowLogic:
        return TimeWindowLogic(self.lifetimes)


# ---------------------------------------------------------------- the kinds
@register
class UnboundedWindow(WindowKind):
    """Range Unbounded / Rows Unbounded: every element enters, none leaves, so the window's
    deltas are the stream's elements and it keeps nothing (its readers hold the relation)."""

    has_state = False

    @classmethod
    def matches(cls, spec: Any) -> bool:
        return (isinstance(spec, RangeSpec) and spec.size is None and not spec.slide) or (
            isinstance(spec, RowsSpec) and spec.size is None
        )

    def logic(self) -> WindowLogic:
        return PassThroughLogic()


@register
class RangeWindow(TimeWindow):
    """Range N: an element stays `range_life(N)` instants from its own ts."""

    store_mode = "range"

    @classmethod
    def matches(cls, spec: Any) -> bool:
        return isinstance(spec, RangeSpec) and spec.size not in (None, 0) and not spec.slide

    @property
    def life(self) -> int:
        return range_life(self.spec.size, self.compat)

    def lifetimes(self, ts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return ts, ts + self.life

    def extent(self) -> int:
        return self.life

    def complete_from(self, cf: float) -> float:
        return cf + self.life - 1

    def state_class(self) -> tuple[int, bool]:
        return RATE, True


@register
class NowWindow(RangeWindow):
    """Now (Range 0): the elements of the current instant."""

    @classmethod
    def matches(cls, spec: Any) -> bool:
        return isinstance(spec, RangeSpec) and spec.size == 0 and not spec.slide


@register
class RangeSlideWindow(TimeWindow):
    """Range N Slide M: the window moves at multiples of M; an element enters at the first
    multiple of M at or after its ts and leaves at the first one at or after ts + N."""

    @classmethod
    def matches(cls, spec: Any) -> bool:
        return isinstance(spec, RangeSpec) and bool(spec.slide)

    def lifetimes(self, ts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        s = self.spec
        if s.size is None:
            return ts, np.full(len(ts), INF, np.int64)
        m, n = s.slide, s.size
        t_in = -(-ts // m) * m  # smallest multiple of M ≥ τ
        t_out = -(-(ts + n) // m) * m  # smallest multiple of M ≥ τ+N
        return t_in, t_out

    def state_class(self) -> tuple[int, bool]:
        return (RATE, True) if self.spec.size is not None else (GROWS, False)


@register
class RowsWindow(WindowKind):
    """Rows N: element j leaves when element j + N arrives."""

    store_mode = "rows"

    @classmethod
    def matches(cls, spec: Any) -> bool:
        return isinstance(spec, RowsSpec) and spec.size is not None and spec.slide is None

    def extent(self) -> int:
        return self.spec.size

    def logic(self) -> WindowLogic:
        return RowsLogic(self.spec.size)

    def state_class(self) -> tuple[int, bool]:
        return BOUNDED, True


@register
class RowsSlideWindow(WindowKind):
    """Rows N Slide M: the window moves every M elements."""

    @classmethod
    def matches(cls, spec: Any) -> bool:
        return isinstance(spec, RowsSpec) and spec.size is not None and spec.slide is not None

    def logic(self) -> WindowLogic:
        return RowsSlideLogic(self.spec.size, self.spec.slide)

    def state_class(self) -> tuple[int, bool]:
        return BOUNDED, True


@register
class PartitionRowsWindow(WindowKind):
    """Partition By keys Rows N: the last N elements of each partition; the number of
    partitions grows with the distinct keys."""

    @classmethod
    def matches(cls, spec: Any) -> bool:
        return isinstance(spec, PartitionSpec)

    def logic(self) -> WindowLogic:
        return PartitionLogic(self.spec.keys, self.spec.rows)

    def state_class(self) -> tuple[int, bool]:
        return GROWS, True
