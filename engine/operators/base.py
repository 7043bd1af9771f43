"""The operator protocol: read whole instants from input queues up to a common bound, emit a
delta batch with ts ≤ bound, advance the output watermark to the bound.

An operator call processes every input element with ts ≤ bound, where bound is the smallest
input watermark (cut earlier to whole instants when a work budget is given), so outputs never
depend on how input was batched or how often the scheduler runs it.
"""

from __future__ import annotations

import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from cqlstream.cql.logical.explain import node_label
from cqlstream.cql.logical.nodes import Plan
from cqlstream.engine import knobs as K
from cqlstream.engine import parallel
from cqlstream.engine.batch import Batch, splitmix64
from cqlstream.engine.queues import Queue, Reader

if TYPE_CHECKING:
    from cqlstream.engine.exprs import Evaluator
    from cqlstream.engine.planner import EngineOptions
    from cqlstream.engine.synopses import Synopsis
    from cqlstream.engine.window_store import WindowStore

# Size classes of the state a plan holds (the bounded-memory verdict, engine/boundedness.py),
# ordered: bounded whatever the input; bounded for a bounded arrival rate; grows with the input.
BOUNDED, RATE, GROWS = 0, 1, 2


@dataclass(frozen=True, eq=False)
class BuildContext:
    """What the planner hands every operator it builds, besides the operator's logical node: its
    input and output queues, the engine's id source, expression evaluator and options, and (for
    operators that read their inputs' state from shared synopses, i.e. joins) those stores."""

    inputs: list[Queue]
    output: Queue
    ids: IdSource
    ev: Evaluator
    options: EngineOptions
    stores: list[Synopsis] | None = None


class IdSource:
    """Fresh tuple-instance ids (uint64), shared by all operators of one engine.

    Operators running side by side (the parallel scheduler) each draw from a *lease* of their
    own, a range fixed before they start (`leased`), so the ids they get never depend on which
    thread ran first; elsewhere ids come from the shared counter (under a lock)."""

    def __init__(self, start: int = 1) -> None:
        self.next_id = start
        self.high = 0  # overflow ids of leases handed out so far end below this (0: none yet)
        self._lock = threading.Lock()

    def __getstate__(self) -> dict[str, Any]:  # checkpoints pickle the plan: a lock does not pickle
        return {"next_id": self.next_id, "high": self.high}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.next_id = state["next_id"]
        self.high = state.get("high", 0)
        self._lock = threading.Lock()

    def take(self, n: int) -> np.ndarray:
        lease = _leases.current
        if lease is not None and lease.source is self:
            return lease.take(n)
        first = self._advance(n)
        return np.arange(first, first + n, dtype=np.uint64)

    def reserve(self, n: int) -> int:
        """The first of `n` (≥ 1) fresh consecutive ids, as `take(n)[0]` without building the
        array (the parallel scheduler reserves blocks of up to ~100k ids per pass)."""
        lease = _leases.current
        if lease is not None and lease.source is self:
            return int(lease.take(n)[0])
        return self._advance(n)

    def _advance(self, n: int) -> int:
        """The shared counter moved past `n` ids, under the lock; returns the first."""
        with self._lock:
            first = self.next_id
            self.next_id += n
        return first


class Lease:
    """An operator's own ids: a block [next, end) of its IdSource, and for one pass an overflow
    range [over_next, over_end) fixed in advance, drawn in order by the code running under
    `leased` (engine/parallel_pass.py sizes and refills them)."""

    def __init__(self, source: IdSource, start: int, end: int) -> None:
        self.source, self.start, self.next, self.end = source, start, start, end
        self.over_start = self.over_next = self.over_end = 0
        self.used = 0  # ids taken since the last refill
        self.recent = 0.0  # recent use per pass (decaying maximum)

    def take(self, n: int) -> np.ndarray:
        self.used += n
        if self.next + n <= self.end:
            out = np.arange(self.next, self.next + n, dtype=np.uint64)
            self.next += n
            return out
        if self.over_next + n > self.over_end:
            from cqlstream.engine.errors import EngineError

            raise EngineError(
                "internal", f"an operator call took more than {self.over_end - self.over_start} tuple ids"
            )
        out = np.arange(self.over_next, self.over_next + n, dtype=np.uint64)
        self.over_next += n
        return out


class _ThreadLease(threading.local):
    """The Lease the code on this thread draws ids from (None: the shared counter). A class
    default, not `getattr(local, name, None)`: a missing attribute of a thread-local raises and
    catches inside getattr, ~0.5 µs on every operator call that takes ids."""

    current: Lease | None = None


_leases = _ThreadLease()


@contextmanager
def leased(lease: Lease | None) -> Iterator[None]:
    """Draw this thread's ids of `lease.source` from `lease` (None: from the shared counter)."""
    before = _leases.current
    _leases.current = lease
    try:
        yield
    finally:
        _leases.current = before


@dataclass
class Counters:
    """Live statistics of an entity (part of its control table)."""

    tuples_in: int = 0
    tuples_out: int = 0
    calls: int = 0
    seconds: float = 0.0  # wall time of its calls (the schedulers' cost estimates)
    # CPU time of its calls: the thread's own (time.thread_time) plus what engine workers spent on
    # parts it handed over, so two threads running side by side do not count each other's turns
    # (query attribution and cpu limits, engine/limits.py)
    cpu: float = 0.0
    extra: dict[str, float] = field(default_factory=dict)


def _set_sampling_rate(op: Operator, v: object) -> None:
    op.sampling_rate = K.sampling_rate(v)


SAMPLING_RATE = K.Knob("sampling_rate", lambda op: op.sampling_rate, _set_sampling_rate)


class Operator(ABC):
    """Base class; subclasses implement `process(inputs, bound) -> Batch | None`.

    Besides `process`, an operator answers for its own behaviour in the global plan (the operator
    protocol; each method has a default that subclasses override as needed): `from_node` builds it
    from its logical plan node, `bind` attaches it to its readers and identity; `snapshot` /
    `snapshotable` give its current relation for a late consumer; `complete_from` says from which
    instant its output is exact; `state_class` its contribution to the bounded-memory verdict;
    `KNOBS` / `control_table` / `set_knob` its control table; `release` what it frees when
    dropped; `state_bytes` the memory it holds; `peek` what a UI shows of it; `output_queues`,
    `shared_stores` and `shared_operators` what it writes and what it shares with other operators
    (the parallel scheduler's pass graph).
    """

    kind = "operator"
    fanout = False  # True: deliver() routes each call's output to several queues (FilterHub)
    # True: a call whose inputs hold no rows outputs nothing and changes no state, so `step`
    # only advances the output's watermark (a per-minute trigger's many empty calls)
    quiet_on_empty = False
    unshed: frozenset[int] = frozenset()  # inputs load shedding never thins (read for their instants only)
    KNOBS: ClassVar[tuple[K.Knob, ...]] = (K.MEMORY_LIMIT, SAMPLING_RATE)
    reads_input_stores: ClassVar[bool] = False  # True: from_node takes its inputs' shared stores (joins)
    # the parallel scheduler's (engine/parallel_pass.py), class defaults so that operators of older
    # checkpoints have them: this operator's block of tuple ids, and the error of a call it made
    # in a pass where an earlier operator failed too, raised at its next call
    id_lease: Lease | None = None
    held_error: BaseException | None = None
    # False: calls add nothing to `Counters.cpu` and read no CPU clock (EngineOptions.cpu_clocks,
    # set by the plan; a class default, so that operators of older checkpoints measure)
    cpu_clock = True

    # column pruning (engine/column_pruning.py): the output columns this operator fills; the
    # others are NULL placeholders nothing reads (None: every column; also operators of older
    # checkpoints)
    produced: frozenset[int] | None = None

    def __init__(self, inputs: list[Queue], output: Queue, ids: IdSource, options: EngineOptions | None = None) -> None:
        self.readers: list[Reader] = [q.reader() for q in inputs]
        self.node: Plan | None = None  # the logical plan node it computes (set by bind)
        self.eid: str | None = None  # entity id in the control tables (set by bind)
        self.label = ""  # display name when the node's label does not describe it
        self.memory_limit: int | None = None  # knob: flagged in the control table when exceeded
        self.output = output
        self.ids = ids
        self.options = options
        self.done_through: int | None = None  # output is final through this instant
        self.t0: int | None = None
        self.counters = Counters()
        self.active = True
        # a late operator whose inputs start from snapshots taken at different instants first
        # runs once every input is complete through the latest of them (docs/plan-manager.md)
        self.hold_until: int | None = None
        self.sampling_rate = 1.0  # knob: < 1 sheds input load (approximate results, counted)

    def output_queues(self) -> list[Queue]:
        """The queues this operator writes (a fan-out operator also writes its members')."""
        return [self.output]

    def shared_stores(self) -> list[Synopsis]:
        """The stores this operator's call reads or changes that other operators may hold too
        (shared synopses, window stores, the views it reads and the stores behind them): the
        parallel scheduler never runs two operators declaring one store at once, and orders
        this operator after the producers of the stores' queues (engine/parallel_pass.py).
        Default: none (all its state is its own)."""
        return []

    def shared_operators(self) -> list[Operator]:
        """Other operator objects this operator's call uses (a grouped selection's members): the
        parallel scheduler never runs it beside them. Default: none."""
        return []

    def cursors(self) -> list[Reader]:
        """The queue readers whose positions this operator's calls move (its inputs'); the limit
        ledger of a parallel pass tracks them (engine/limits_ledger.py)."""
        return list(self.readers)

    @property
    def inputs(self) -> list[Queue]:
        return [r.q for r in self.readers]

    def bound(self) -> int | None:
        wms = [q.watermark for q in self.inputs]
        known = [w for w in wms if w is not None]
        if len(known) < len(wms):
            return None
        return min(known)

    def ready(self) -> bool:
        b = self.bound()
        return b is not None and (self.done_through is None or b > self.done_through)

    def step(self, budget: int | None = None) -> int:
        """Run once; returns the number of input elements consumed (0 = nothing to do).

        Runs ~6,000 times in a Linear Road run, half of them with nothing to do: the inputs'
        watermarks are read in one loop over the readers (no `inputs` / `bound` lists)."""
        readers = self.readers
        if not readers:
            return self._step(self.bound(), budget)  # an operator without inputs: bound()'s answer
        b = readers[0].q.watermark
        if b is None:
            return 0
        for r in readers:
            w = r.q.watermark
            if w is None:
                return 0
            if w < b:
                b = w
        done = self.done_through
        if done is not None and b <= done:
            return 0
        return self._step(b, budget)

    def _step(self, b: int | None, budget: int | None) -> int:
        """`step` once the bound `b` is past what the operator is done through."""
        if b is None:
            return 0
        if self.hold_until is not None:
            if b < self.hold_until:
                return 0
            self.hold_until = None
        readers = self.readers
        if self.t0 is None:
            if any(r.q.start is None and not r.q.ended for r in readers):
                return 0  # an input has not started: its time is unknown
            starts = [r.q.start for r in readers if r.q.start is not None]
            self.t0 = min(starts) if starts else b
            # no input ever started (all ended empty): the output has no start either, so
            # operators downstream know their sources never began (no scalar aggregate row)
            if starts and (self.output.start is None or self.t0 < self.output.start):
                self.output.start = self.t0
        if budget is not None:
            b = min(r.cut(b, budget) for r in readers)
        cpu_clock = self.cpu_clock
        began, cpu0 = time.perf_counter(), (time.thread_time() + parallel.helped() if cpu_clock else 0.0)
        data = [r.take(b) for r in readers]
        if self.sampling_rate < 1.0:
            data = [d if i in self.unshed else self._shed(d) for i, d in enumerate(data)]
        n_in = 0
        for d in data:
            n_in += len(d.ts)
        out = None if not n_in and self.quiet_on_empty else self.process(data, b)
        self.done_through = b
        ended = True
        for r in readers:
            q = r.q
            if not q.ended or q.watermark != b:
                ended = False
                break
        output = self.output
        output.ended = ended
        output.push(out, watermark=b)
        if self.fanout:
            self.deliver(out, b, n_in)
        c = self.counters
        c.calls += 1
        c.tuples_in += n_in
        if out is not None:
            c.tuples_out += len(out.ts)
        c.seconds += time.perf_counter() - began
        if cpu_clock:
            c.cpu += time.thread_time() + parallel.helped() - cpu0
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

    def deliver(self, out: Batch | None, bound: int, n_in: int) -> None:
        """Route a call's output to the operator's several queues (`fanout` operators only)."""
        raise NotImplementedError(type(self).__name__)

    @property
    def ending(self) -> bool:
        """True when this call processes the last instant of the input (end of input)."""
        return all(q.ended for q in self.inputs)

    # ------------------------------------------------------------ the operator protocol
    @classmethod
    def from_node(cls, node: Plan, ctx: BuildContext) -> Operator:
        """The operator computing logical plan node `node` (its configuration), built with what
        the planner hands every operator (`ctx`); `bind` then attaches it to the plan."""
        raise NotImplementedError(cls.__name__)

    def bind(self, readers: list[Reader] | None = None, *, eid: str, node: Plan, hold_until: int | None = None) -> None:
        """Attach to the plan: `readers` replace the constructor's plain ones (a consumer starting
        while data flows reads from a snapshot or a store's position); `hold_until`: first run
        once every input is complete through this instant (inputs starting from snapshots taken
        at different instants)."""
        if readers is not None:
            for r in self.readers:
                r.q.detach(r)
            self.readers = readers
        self.eid, self.node = eid, node
        if hold_until is not None:
            self.hold_until = hold_until

    def snapshot(self, at: int, inputs: Callable[[], list[Batch] | None]) -> Batch | None:
        """The operator's current relation as `+` elements at `at` (the instant it is done
        through), or None when it cannot tell. `inputs()` gives its inputs' relations at `at`
        (None when one of them cannot)."""
        return None

    def snapshotable(self, inputs: Callable[[], bool]) -> bool:
        """Whether `snapshot` will give the relation once data flows (`inputs()`: whether every
        input's relation can be snapshotted)."""
        return False

    def complete_from(self, cf: float) -> float:
        """First instant from which the output is exact given inputs exact from `cf` (not None,
        finite); math.inf: never."""
        return cf

    @classmethod
    def state_class(cls, node: Plan, kids: list[int]) -> tuple[int, list[tuple[int, str]]]:
        """(size class of the relation node computes, [(class, reason)] of the state it holds),
        given its inputs' size classes `kids`. Default: no state of its own."""
        return max(kids, default=BOUNDED), []

    @property
    def name(self) -> str:
        return self.label or f"{self.kind} {node_label(self.node) if self.node is not None else ''}".strip()

    def control_table(self) -> dict[str, Any]:
        """The operator's part of its control table: type, name, queues, counters, knobs."""
        c = self.counters
        state = self.state_bytes()
        limit = self.memory_limit
        counters = {
            "tuples_in": c.tuples_in,
            "tuples_out": c.tuples_out,
            "selectivity": round(c.tuples_out / c.tuples_in, 6) if c.tuples_in else None,
            "calls": c.calls,
            "seconds": round(c.seconds, 6),
            "cpu_seconds": round(c.cpu, 6),
            "state_bytes": state,
            "done_through": self.done_through,
            "over_memory_limit": bool(limit is not None and state > limit),
        }
        counters.update({k: v for k, v in c.extra.items() if isinstance(v, (int, float))})
        return {
            "type": self.kind,
            "name": self.name,
            "inputs": [q.eid for q in self.inputs],
            "output": self.output.eid,
            "counters": counters,
            "knobs": K.values(self, self.KNOBS),
        }

    def set_knob(self, name: str, value: object) -> None:
        """Validate and set one of `KNOBS` (KnobError: no such knob, or a bad value)."""
        K.set_one(self, self.KNOBS, name, value, f"operator {self.eid or ''}")

    def release(self) -> list[object]:
        """Stop reading (the operator leaves the plan); returns the shared objects (stores,
        grouped operators) that nothing uses any more, for the plan to forget."""
        for r in self.readers:
            r.q.detach(r)
        return []

    def groupable(self) -> bool:
        """Whether a grouped selection may take this running operator over (engine/operators/filterhub.py)."""
        return False

    def scheduled(self) -> Operator:
        """The operator the scheduler runs on this one's behalf (itself, or its group)."""
        return self

    def produce_only(self, cols: frozenset[int] | None) -> None:
        """Fill only the output columns `cols` from now on, the others with placeholders
        (batch.placeholder) that nothing reads (None: every column). An operator that does not
        prune (this default) keeps producing every column, which is always exact; one that does
        sets `produced`, and must never read a column it was not asked to produce to compute one
        it was."""
        return None

    def window_store_mode(self) -> str | None:
        """The kind of shared window store that serves this operator ('range' / 'rows'), if any."""
        return None

    def join_store(self, ws: WindowStore) -> None:
        """Read from the shared window store `ws` (operators with a `window_store_mode`)."""
        raise NotImplementedError(type(self).__name__)

    def relation_view(self, eid: str) -> Synopsis | None:
        """A view (a store with entity id `eid`) through which consumers read this operator's
        relation without a copy, or None."""
        return None

    def state_bytes(self) -> int:
        return 0

    def pending_bytes(self) -> int:
        """Bytes of input taken from the queues but not processed yet (e.g. elements a window
        holds until they enter it): queue memory the overload controller counts, though no queue
        holds it any more."""
        return 0

    def events(self) -> list[tuple[str, float]]:
        """(metric, value) events since the last call, for SysStream (e.g. a selection's re-orderings)."""
        return []

    def explain_detail(self) -> list[str]:
        """Extra EXPLAIN lines about how the operator currently runs (e.g. a selection's conjunct order)."""
        return []

    def peek(self, n: int) -> tuple[str, Batch | None]:
        """(what is shown, tuples) for a UI looking at this operator."""
        return "recent tuples leaving the operator", self.output.recent_rows(n)


def held_state(node: Plan, kids: list[int], what: str | None = None) -> tuple[int, list[tuple[int, str]]]:
    """`state_class` of an operator holding state the size of its inputs' relations."""
    worst = max(kids, default=BOUNDED)
    return worst, [(worst, what or f"{type(node).__name__.lower()} state")]


class Stateless(Operator):
    """An operator whose output relation is a function of its input's current relation alone
    (selection, projection, pass): its snapshot is itself applied to its input's snapshot."""

    def snapshot(self, at: int, inputs: Callable[[], list[Batch] | None]) -> Batch | None:
        assert self.node is not None, "snapshots are taken of operators bound into the plan"
        if self.node.is_stream:
            return None
        parts = inputs()
        return None if parts is None else self.process([parts[0]], at)

    def snapshotable(self, inputs: Callable[[], bool]) -> bool:
        assert self.node is not None, "snapshots are taken of operators bound into the plan"
        return not self.node.is_stream and inputs()


__all__ = ["BOUNDED", "GROWS", "RATE", "Counters", "IdSource", "Lease", "Operator", "Stateless", "held_state", "leased"]
