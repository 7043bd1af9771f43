"""Result fan-out: one engine subscription per query shared by its HTTP subscribers, and snapshots lined up with it."""

from __future__ import annotations

import asyncio
import itertools
import logging
import threading
import time
from collections import deque
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from cqlstream.cql.types import DataType
from cqlstream.engine.batch import Batch
from cqlstream.io.formats import RESULT_FORMATS
from cqlstream.server.result_history import ResultHistory

if TYPE_CHECKING:
    import anyio

    from cqlstream.engine.dsms import Dsms, QueryHandle, Subscription
    from cqlstream.engine.planner import PNode

log = logging.getLogger("cqlstream.server")


class ResultChunk:
    """Results of one query made final by one engine run, encoded lazily once per format."""

    __slots__ = ("_enc", "_lock", "batch", "through")

    def __init__(self, batch: Batch, through: int | None):
        self.batch = batch
        self.through = through
        self._enc: dict[str, bytes] = {}
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self.batch)

    def encoded(self, fmt: str) -> bytes:
        got = self._enc.get(fmt)
        if got is None:
            with self._lock:
                got = self._enc.get(fmt)
                if got is None:
                    got = self._enc[fmt] = RESULT_FORMATS[fmt].elements(self.batch)
        return got


class ControlChunk(ResultChunk):
    """A control message in a query's result stream (no elements), in order with the results
    around it: today `approximation`, sent when the overload controller changes what is in force."""

    __slots__ = ("event", "info")

    def __init__(self, event: str, info: dict[str, Any], types: Sequence[DataType]):
        super().__init__(Batch.empty(types), None)
        self.event = event
        self.info = info

    def encoded(self, fmt: str) -> bytes:
        return RESULT_FORMATS[fmt].control(self.event, self.info)


def approximation_message(approx: dict[str, Any] | None) -> dict[str, Any]:
    """What the result stream says of a query's approximation: its sampling rate, since when and
    why (exact: rate 1.0, no `since`). Refused-row counts change with every push and stay in the
    query's reply and control table, not in the stream."""
    if approx is None or approx.get("since") is None:
        return {"sampling_rate": 1.0, "since": None, "reason": "exact"}
    return {k: approx[k] for k in ("sampling_rate", "since", "reason")}


class Subscriber:
    """One client of a query's results: a bounded buffer filled by the engine thread and drained by
    the response coroutine on the event loop."""

    _ids = itertools.count(1)

    def __init__(
        self, fanout: Fanout, query_id: int, fmt: str, loop: asyncio.AbstractEventLoop, capacity: int, lag_grace: float
    ):
        self.id = next(self._ids)
        self.fanout = fanout
        self.query_id = query_id
        self.fmt = fmt
        self.loop = loop
        self.capacity = max(int(capacity), 1)
        self.lag_grace = lag_grace
        self.buf: deque[ResultChunk] = deque()
        self.count = 0  # elements buffered
        self.lagged = False
        self.ended: str | None = None  # why the stream ended (query dropped or deactivated, server stopping)
        self.detached = False
        self.event = asyncio.Event()
        self.waiting = False
        self.send_scope: anyio.CancelScope | None = None  # the response's stream (a lag sets its deadline)
        self.lag_deadline: float | None = None
        self.sent = 0
        self._lock = threading.Lock()

    # -- engine side (under the host lock)
    def offer(self, chunk: ResultChunk, wakes: list[Subscriber] | None = None) -> bool:
        """Buffer a chunk; False when this subscriber just lagged (the caller detaches it). With
        `wakes`, a subscriber to wake is added there for the caller to wake them all at once."""
        with self._lock:
            if self.lagged or self.ended:
                return False
            n = len(chunk)
            if self.count and self.count + n > self.capacity:
                self.lagged = True
                self.buf.clear()
                self.count = 0
                self._wake(lag=True)
                return False
            control = isinstance(chunk, ControlChunk)
            if (
                n == 0
                and not control
                and self.buf
                and not len(self.buf[-1])
                and not isinstance(self.buf[-1], ControlChunk)
            ):
                self.buf[-1] = chunk  # progress only: keep the latest, so a stalled reader holds O(1) of them
            else:
                self.buf.append(chunk)
            self.count += n
            if n or control or self.waiting:
                if wakes is None:
                    self._wake()
                else:
                    wakes.append(self)
        return True

    def end(self, reason: str) -> None:
        with self._lock:
            if self.ended is None:
                self.ended = reason
            self._wake()

    def _wake(self, lag: bool = False) -> None:
        try:
            self.loop.call_soon_threadsafe(self._on_wake, lag)
        except RuntimeError:  # loop closed: the client is gone anyway
            pass

    def _on_wake(self, lag: bool) -> None:
        self.event.set()
        if lag:
            import anyio

            self.lag_deadline = time.monotonic() + self.lag_grace
            scope = self.send_scope
            if scope is not None:
                scope.deadline = anyio.current_time() + self.lag_grace

    # -- response side (event loop)
    def take(self) -> ResultChunk | None:
        with self._lock:
            if not self.buf:
                return None
            c = self.buf.popleft()
            self.count -= len(c)
            return c

    def pending(self) -> bool:
        with self._lock:
            return bool(self.buf)


def wake_all(subs: list[Subscriber]) -> None:
    """Wake the subscribers offered one publish's results: one cross-thread call per event loop,
    not one per subscriber (each costs tens of µs on a busy machine, paid under the engine lock:
    about a millisecond per publish with 50 subscribers)."""
    by_loop: dict[asyncio.AbstractEventLoop, list[Subscriber]] = {}
    for s in subs:
        by_loop.setdefault(s.loop, []).append(s)
    for loop, group in by_loop.items():
        try:
            loop.call_soon_threadsafe(_on_wake_all, group)
        except RuntimeError:  # loop closed: the clients are gone anyway
            pass


def _on_wake_all(group: list[Subscriber]) -> None:
    for s in group:
        s._on_wake(False)


class SnapshotUnavailable(Exception):
    """The engine cannot give this query's current relation lined up with its published deltas."""


class Publication:
    """A query's one engine subscription and its subscribers."""

    def __init__(self, handle: QueryHandle, engine_sub: Subscription, history: int = 0) -> None:
        self.handle = handle
        self.sub = engine_sub
        self.subscribers: dict[int, Subscriber] = {}
        self.through: int | None = None  # results are published (final) through this instant
        self.emitted = 0
        self.history = ResultHistory(history)  # what was published, for subscribers resuming after an instant
        self.approximation: dict[str, Any] = approximation_message(None)  # last told to the subscribers

    def live(self) -> int:
        return sum(1 for s in list(self.subscribers.values()) if not s.detached)

    def end_all(self, reason: str) -> None:
        for s in list(self.subscribers.values()):
            s.end(reason)
        self.subscribers.clear()


class Fanout:
    """Every query's `Publication`: publish after each engine run, attach subscribers, snapshots.

    - Every query has one engine subscription owned by the server (its `Publication`), polled after
      each engine run (`publish`); the new results become one `ResultChunk`, offered to every
      subscriber of the query. A chunk is encoded at most once per format, whatever the number of
      subscribers, and the subscribers are woken together once the publish is done (one call into
      the event loop, not one per subscriber).
    - Each subscriber has a bounded buffer (in result elements). A subscriber whose buffer would
      overflow is *lagged*: its buffer is dropped, it receives a final `lagged` message and is
      disconnected (counted in the metrics). Ingestion and other subscribers never wait for it.
    - A snapshot is the engine's (`PhysicalPlan.snapshot`: the relation at the producing operator's
      `done_through`), taken right after a publish, when the publication has consumed everything
      final through the queue's watermark: the two instants must be equal, so the snapshot and the
      deltas that follow it line up exactly. When the engine has no snapshot for a plan shape, or
      one at another instant, the subscriber is told (`SnapshotUnavailable`); the server keeps no
      copy of any query's relation.
    - Every published batch is also retained in the query's `ResultHistory` (at most `history`
      elements, oldest instants dropped whole), so a subscriber can resume after the instant it last
      saw: the retained elements after it, then the live ones, taken under the same lock as publish.

    Everything here except the subscribers' response side runs under the host lock.
    """

    def __init__(self, dsms: Dsms, lag_grace: float, history: int = 100_000) -> None:
        self.d = dsms
        self.lag_grace = lag_grace
        self.history = history  # result elements retained per query for resuming subscribers
        self.pubs: dict[int, Publication] = {}
        self.lag_disconnects = 0
        self.cutoffs = 0  # lagged subscribers cut off for not reading even the lagged message
        self.subscriptions_total = 0

    def add(self, h: QueryHandle) -> Publication:
        pub = self.pubs[h.id] = Publication(h, self.d.subscribe(h.id), self.history)
        return pub

    def remove(self, qid: int, reason: str) -> None:
        pub = self.pubs.pop(qid, None)
        if pub is not None:
            pub.end_all(reason)
            pub.sub.close(reason)

    def publish(self) -> None:
        """Offer every query's newly final results to its subscribers, then wake them together."""
        wakes: list[Subscriber] = []
        try:
            self._offer_all(wakes)
        finally:
            wake_all(wakes)

    def _offer_all(self, wakes: list[Subscriber]) -> None:
        for pub in list(self.pubs.values()):
            if pub.sub.closed:
                # deactivated (the engine closed the subscription): its subscribers end; once it is
                # active again the publication follows its new plan (results start over)
                pub.end_all(pub.sub.reason or "query deactivated")
                if pub.handle.pnode is None:
                    continue
                pub.sub = self.d.subscribe(pub.handle.id)
                pub.history.restart(pub.through)
                pub.through = None
            self._tell_approximation(pub, wakes)
            b = pub.sub.poll()
            through = pub.sub.final_through
            if not len(b) and through == pub.through:
                continue
            pub.through = through
            pub.emitted += len(b)
            pub.history.add(b, through)
            if not pub.subscribers:
                continue
            chunk = ResultChunk(b, through)
            for s in list(pub.subscribers.values()):
                if s.detached:
                    pub.subscribers.pop(s.id, None)
                elif not s.offer(chunk, wakes):
                    self._lagged(pub, s)

    def _lagged(self, pub: Publication, s: Subscriber) -> None:
        if pub.subscribers.pop(s.id, None) is not None:
            s.detached = True
            self.lag_disconnects += 1
            log.info(
                "subscriber %d of query %d lagged (buffer of %d elements) and is disconnected",
                s.id,
                pub.handle.id,
                s.capacity,
            )

    def _tell_approximation(self, pub: Publication, wakes: list[Subscriber]) -> None:
        """A change of the query's approximation becomes an `approximation` control message, ahead
        of the results published with it (docs/approximation.md)."""
        if self.d.approx is None:  # the controller is off: queries stay exact
            return
        now = approximation_message(self.d.approx.of(pub.handle.id))
        if now == pub.approximation:
            return
        pub.approximation = now
        chunk = ControlChunk("approximation", now, [a.type for a in pub.handle.schema])
        for s in list(pub.subscribers.values()):
            if not s.detached and not s.offer(chunk, wakes):
                self._lagged(pub, s)

    def attach(self, pub: Publication, fmt: str, loop: asyncio.AbstractEventLoop, capacity: int) -> Subscriber:
        s = Subscriber(self, pub.handle.id, fmt, loop, capacity, self.lag_grace)
        pub.subscribers[s.id] = s
        if pub.approximation["since"] is not None:  # approximated now: say so before any result
            s.offer(ControlChunk("approximation", pub.approximation, [a.type for a in pub.handle.schema]))
        return s

    def resume(self, pub: Publication, after: int) -> Batch:
        """The published elements with ts > `after` (call right after `publish`, then attach: the live
        deltas follow them exactly). Raises HistoryGone when some are no longer retained."""
        return pub.history.after(after, [a.type for a in pub.handle.schema])

    def snapshot(self, pub: Publication) -> Batch:
        """The query's current relation as `+` rows at `pub.through`, the instant through which its
        deltas are published (call right after `publish`). Raises SnapshotUnavailable."""
        h = pub.handle
        pn = h.pnode
        assert pn is not None, "only active queries (with a plan node) are published"
        if pub.through is None and (not pn.flowed or (pn.op is not None and pn.op.done_through is None)):
            # nothing final yet and nothing produced: the relation is empty, every delta is to come
            return Batch.empty([a.type for a in h.schema])
        snap = self.d.plan.snapshot(pn)
        if snap is None:
            raise SnapshotUnavailable(
                f"the engine keeps no snapshot of this query's result relation (plan shape: {_producer(pn)})"
            )
        b, at = snap
        if at != pub.through:
            raise SnapshotUnavailable(
                f"the engine's snapshot of this query's result is at instant {at}, but its "
                f"results are final through {pub.through} (plan shape: {_producer(pn)})"
            )
        return b

    def end_all(self, reason: str) -> None:
        for pub in list(self.pubs.values()):
            for s in list(pub.subscribers.values()):
                s.end(reason)

    def live(self) -> int:
        return sum(p.live() for p in list(self.pubs.values()))


def _producer(pn: PNode) -> str:
    """The operator producing a query's result, as in `GET /plan` (e.g. `op:5 select FILTER (N > 1)`)."""
    if pn.op is None:
        return f"source relation {pn.queue.name or ''}".strip()
    from cqlstream.cql.logical.explain import node_label

    node = pn.op.node
    return f"{pn.op.eid} {pn.op.kind} {node_label(node)}" if node is not None else f"{pn.op.eid} {pn.op.kind}"
