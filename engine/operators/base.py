"""The operator protocol: read whole instants from input queues up to a common bound, emit a
delta batch with ts ≤ bound, advance the output watermark to the bound.

An operator call processes every input element with ts ≤ bound, where bound is the smallest
input watermark (cut earlier to whole instants when a work budget is given), so outputs never
depend on how input was batched or how often the scheduler runs it.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from dataclasses import dataclass, field

import numpy as np
from cqlstream.engine.batch import Batch, splitmix64
from cqlstream.engine.queues import Queue, Reader


class IdSource:
    """Fresh tuple-instance ids (uint64), shared by all operators of one engine."""

    def __init__(self, start: int = 1):
        self.next_id = start

    def take(self, n: int) -> np.ndarray:
        out = np.arange(self.next_id, self.next_id + n, dtype=np.uint64)
        self.next_id += n
        return out


@dataclass
class Counters:
    """Live statistics of an entity (part of its control table)."""

    tuples_in: int = 0
    tuples_out: int = 0
    calls: int = 0
    seconds: float = 0.0
    extra: dict = field(default_factory=dict)


class Operator(ABC):
    """Base class; subclasses implement `process(inputs, bound) -> Batch | None`."""

    kind = "operator"
    fanout = False  # True: deliver() routes each call's output to several queues (FilterHub)

    def __init__(self, inputs: list[Queue], output: Queue, ids: IdSource, options=None):
        self.readers: list[Reader] = [q.reader() for q in inputs]
        self.output = output
        self.ids = ids
        self.options = options
        self.done_through: int | None = None  # output is final through this instant
        self.t0: int | None = None
        self.counters = Counters()
        self.active = True
        # a late operator whose inputs start from snapshots taken at different instants first
        # runs once every input is complete through the latest of them (plan manager, #5)
        self.hold_until: int | None = None
        self.sampling_rate = 1.0  # knob: < 1 sheds input load (approximate results, counted)

    @property
    def inputs(self) -> list[Queue]:
        return [r.q for r in self.readers]

    def bound(self) -> int | None:
        wms = [q.watermark for q in self.inputs]
        if any(w is None for w in wms):
            return None
        return min(wms)

    def ready(self) -> bool:
        b = self.bound()
        return b is not None and (self.done_through is None or b > self.done_through)

    def step(self, budget: int | None = None) -> int:
        """Run once; returns the number of input elements consumed (0 = nothing to do)."""
        b = self.bound()
        if b is None or (self.done_through is not None and b <= self.done_through):
            return 0
        if self.hold_until is not None:
            if b < self.hold_until:
                return 0
            self.hold_until = None
        if self.t0 is None:
            if any(q.start is None and not q.ended for q in self.inputs):
                return 0  # an input has not started: its time is unknown
            starts = [q.start for q in self.inputs if q.start is not None]
            self.t0 = min(starts) if starts else b
            # no input ever started (all ended empty): the output has no start either, so
            # operators downstream know their sources never began (no scalar aggregate row)
            if starts and (self.output.start is None or self.t0 < self.output.start):
                self.output.start = self.t0
        if budget is not None:
            b = min(r.cut(b, budget) for r in self.readers)
        began = time.perf_counter()
        data = [r.take(b) for r in self.readers]
        if self.sampling_rate < 1.0:
            data = [self._shed(d) for d in data]
        n_in = sum(len(d) for d in data)
        out = self.process(data, b)
        self.done_through = b
        self.output.ended = all(q.ended and q.watermark == b for q in self.inputs)
        self.output.push(out, watermark=b)
        if self.fanout:
            self.deliver(out, b, n_in)
        c = self.counters
        c.calls += 1
        c.tuples_in += n_in
        c.tuples_out += 0 if out is None else len(out)
        c.seconds += time.perf_counter() - began
        return max(n_in, 1)

    def _shed(self, d: Batch) -> Batch:
        """Load shedding (the `sampling_rate` knob): keep an element iff a hash of its instance id
        falls below the rate, so an insert and the delete retracting it share their fate and a
        sampled relation stays consistent."""
        if not len(d):
            return d
        u = (splitmix64(d.id ^ np.uint64(0x5DEECE66D)) >> np.uint64(11)).astype(np.float64) * 2.0**-53
        keep = u < self.sampling_rate
        self.counters.extra["shed"] = self.counters.extra.get("shed", 0) + int(len(d) - keep.sum())
        return d if keep.all() else d.take(keep)

    @abstractmethod
    def process(self, inputs: list[Batch], bound: int) -> Batch | None:
        """Every input element with ts ≤ bound → the output elements with ts ≤ bound, ts-sorted."""

    def state_bytes(self) -> int:
        return 0

    @property
    def ending(self) -> bool:
        """True when this call processes the last instant of the input (end of input)."""
        return all(q.ended for q in self.inputs)
