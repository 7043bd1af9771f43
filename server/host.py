"""The engine host: the one `Dsms` of the process behind one lock, and the fan-out of its results.

- Every engine call happens under `self.lock`, in a worker thread (the app calls these methods
  through `run_in_threadpool`), never on the event loop.
- After each accepted push or heartbeat the host runs the engine and *publishes*: every query has
  one engine subscription owned by the host (its `Publication`), polled after each run; the new
  results become one `ResultChunk`, offered to every subscriber of the query. A chunk is encoded
  at most once per format, whatever the number of subscribers.
- Each subscriber has a bounded buffer (in result elements). A subscriber whose buffer would
  overflow is *lagged*: its buffer is dropped, it receives a final `lagged` message and is
  disconnected (counted in the metrics). Ingestion and other subscribers never wait for it.
- A clock thread ticks the engine (system-timestamped streams) every `tick_interval` seconds.

This module is also the one adapter to the engine's evolving API: features of the plan manager
(persistence, drop, activate/weight, control tables, attribution) are used when the `Dsms` has
them and otherwise emulated here. Snapshots are always the host's own (`Publication.state`): the
engine's `subscribe(snapshot=True)` does not cover every plan shape (none above an aggregate).
"""
from __future__ import annotations

import asyncio
import inspect
import itertools
import logging
import threading
import time
from collections import defaultdict, deque
from dataclasses import dataclass

import numpy as np

from cql.catalog import UNIT_MS, SourceDef, ViewDef
from cql.errors import CqlError
from engine.batch import Batch, concat, match_deletes
from engine.dsms import Dsms, InputError
from server import encoders
from server.ingest import IngestError, Target, parse
from server.problems import ProblemError, cql_problem, input_problem
from server.settings import Settings

log = logging.getLogger("cqlstream.server")


# ====================================================================== engine capabilities


@dataclass(frozen=True)
class Capabilities:
    data_dir: bool
    drop_source: bool
    drop_view: bool
    set_active: bool
    set_weight: bool
    snapshot: bool
    sub_close: bool
    control_tables: bool
    set_knob: bool
    attribution: bool

    @staticmethod
    def of(cls_or_obj) -> "Capabilities":
        def has(name):
            return hasattr(cls_or_obj, name)

        sub_sig = inspect.signature(cls_or_obj.subscribe).parameters if has("subscribe") else {}
        init = inspect.signature(Dsms.__init__).parameters
        from engine.dsms import Subscription

        return Capabilities(data_dir="data_dir" in init, drop_source=has("drop_source"), drop_view=has("drop_view"),
                            set_active=has("set_active"), set_weight=has("set_weight"),
                            snapshot="snapshot" in sub_sig, sub_close=hasattr(Subscription, "close"),
                            control_tables=has("control_tables") and has("control_table"),
                            set_knob=has("set_knob"), attribution=has("attribution"))


def make_dsms(settings: Settings) -> tuple[Dsms, bool]:
    """A Dsms for the settings; (dsms, persistent) — persistent when the engine takes `data_dir`."""
    kwargs = {"compat": settings.compat}
    persistent = False
    if settings.data_dir:
        if "data_dir" in inspect.signature(Dsms.__init__).parameters:
            kwargs["data_dir"] = settings.data_dir
            persistent = True
        else:
            log.warning("this engine does not persist its catalog yet (Dsms has no data_dir): --data-dir %s is "
                        "ignored", settings.data_dir)
    return Dsms(**kwargs), persistent


# ====================================================================== results


class ResultChunk:
    """Results of one query made final by one engine run, encoded lazily once per format."""

    __slots__ = ("batch", "through", "_enc", "_lock")

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
                    got = self._enc[fmt] = encoders.encode(self.batch, fmt)
        return got


class Subscriber:
    """One client of a query's results: a bounded buffer filled by the engine thread and drained by
    the response coroutine on the event loop."""

    _ids = itertools.count(1)

    def __init__(self, host: "EngineHost", pub: "Publication", fmt: str, loop: asyncio.AbstractEventLoop,
                 capacity: int):
        self.id = next(self._ids)
        self.host = host
        self.pub = pub
        self.query_id = pub.handle.id
        self.fmt = fmt
        self.loop = loop
        self.capacity = max(int(capacity), 1)
        self.buf: deque[ResultChunk] = deque()
        self.count = 0  # elements buffered
        self.lagged = False
        self.ended: str | None = None  # why the stream ended (query dropped, server stopping)
        self.detached = False
        self.event = asyncio.Event()
        self.waiting = False
        self.send_scope = None  # anyio cancel scope of a send in progress (set by the response)
        self.lag_deadline: float | None = None
        self.sent = 0
        self._lock = threading.Lock()

    # -- engine side (under the host lock)
    def offer(self, chunk: ResultChunk) -> bool:
        """Buffer a chunk; False when this subscriber just lagged (the caller detaches it)."""
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
            if n == 0 and self.buf and not len(self.buf[-1]):
                self.buf[-1] = chunk  # progress only: keep the latest, so a stalled reader holds O(1) of them
            else:
                self.buf.append(chunk)
            self.count += n
            if n or self.waiting:
                self._wake()
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

            self.lag_deadline = time.monotonic() + self.host.settings.lag_grace_seconds
            scope = self.send_scope
            if scope is not None:
                scope.deadline = anyio.current_time() + self.host.settings.lag_grace_seconds

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


class Publication:
    """A query's one engine subscription, its subscribers and, for a relation-valued query, its
    current contents (kept from the deltas published, compacted lazily: the snapshot subscribers
    can start from, lined up exactly with the deltas that follow it)."""

    def __init__(self, handle, engine_sub, keep_state: bool):
        self.handle = handle
        self.sub = engine_sub
        self.subscribers: dict[int, Subscriber] = {}
        self.through: int | None = None
        self.keep_state = keep_state and handle.kind == "relation"
        self.deltas: list[Batch] = []
        self.state_rows = 0
        self.delta_rows = 0
        self.emitted = 0

    def live(self) -> int:
        return sum(1 for s in list(self.subscribers.values()) if not s.detached)

    def record(self, b: Batch) -> None:
        if not self.keep_state or not len(b):
            return
        self.deltas.append(b)
        self.delta_rows += len(b)
        if self.delta_rows > 2 * self.state_rows + 100_000:
            self.state()

    def state(self) -> Batch:
        """The current contents (inserts not yet retracted), compacted in place."""
        types = [a.type for a in self.handle.schema]
        if not self.deltas:
            return Batch.empty(types)
        allb = concat(self.deltas, types)
        ins = np.flatnonzero(allb.sign > 0)
        dels = np.flatnonzero(allb.sign < 0)
        if len(dels):
            ci, _ = match_deletes(allb.id[ins], allb.id[dels])
            keep = np.ones(len(ins), bool)
            keep[ci] = False
            ins = ins[keep]
        st = allb.take(ins)
        self.deltas = [st] if len(st) else []
        self.state_rows = self.delta_rows = len(st)
        return st


# ====================================================================== the host


def _type_name(t) -> str:
    return str(t)


class EngineHost:
    def __init__(self, settings: Settings | None = None, dsms: Dsms | None = None):
        self.settings = settings or Settings()
        if dsms is None:
            dsms, self.persistent = make_dsms(self.settings)
        else:
            self.persistent = getattr(dsms, "store", None) is not None
        self.d = dsms
        self.caps = Capabilities.of(dsms)
        self.lock = threading.RLock()
        self.started = time.time()
        self.pubs: dict[int, Publication] = {}
        self.query_meta: dict[int, dict] = {}  # active/weight when the engine does not keep them
        # metrics
        self.accepted: dict[str, int] = defaultdict(int)
        self.rejected: dict[str, int] = defaultdict(int)
        self.rejected_pushes: dict[str, int] = defaultdict(int)
        self.pushes = 0
        self.lag_disconnects = 0
        self.cutoffs = 0  # lagged subscribers cut off for not reading even the lagged message
        self.subscriptions_total = 0
        self.run_seconds = 0.0
        self.runs = 0
        self.errors_5xx = 0
        self._stop = threading.Event()
        self._ticker: threading.Thread | None = None
        with self.lock:
            for qid in sorted(self.d.queries):  # queries restored by the engine from data_dir
                self._publish_query(self.d.queries[qid])

    # ------------------------------------------------------------ lifecycle
    def start(self) -> None:
        if self._ticker is None:
            self._ticker = threading.Thread(target=self._tick_loop, name="cqlstream-clock", daemon=True)
            self._ticker.start()

    def stop(self) -> None:
        self._stop.set()
        if self._ticker is not None:
            self._ticker.join(timeout=5)
            self._ticker = None
        with self.lock:
            for pub in self.pubs.values():
                for s in list(pub.subscribers.values()):
                    s.end("server stopping")
            close = getattr(self.d, "close", None)
            if callable(close):
                try:
                    close()
                except Exception:  # noqa: BLE001 - best effort at shutdown
                    log.exception("closing the engine failed")

    def end_streams(self, reason: str) -> None:
        """End every result stream (lock-free: safe on the event loop at shutdown)."""
        for pub in list(self.pubs.values()):
            for s in list(pub.subscribers.values()):
                s.end(reason)

    def _tick_loop(self) -> None:
        while not self._stop.wait(self.settings.tick_interval):
            try:
                if not self._needs_clock():
                    continue
                with self.lock:
                    self.d.tick()
                    self._run()
            except Exception:  # noqa: BLE001 - the clock must keep going
                log.exception("clock tick failed")

    def _needs_clock(self) -> bool:
        if getattr(self.d, "silence_timeout", None) is not None:
            return True
        sys_ = getattr(self.d, "sys", None)
        if sys_ is not None and getattr(sys_, "wanted", False):
            return True
        return any(i.d.timestamp == "system" for i in list(self.d.inputs.values()))

    # ------------------------------------------------------------ engine run + fan-out
    def _run(self) -> None:
        t = time.perf_counter()
        self.d.run()
        self.run_seconds += time.perf_counter() - t
        self.runs += 1
        self._publish()

    def _publish(self) -> None:
        for pub in list(self.pubs.values()):
            if getattr(pub.sub, "closed", False):
                if getattr(pub.handle, "pnode", True) is None:
                    continue  # an inactive query: nothing flows until it is activated again
                pub.sub = self.d.subscribe(pub.handle.id)  # re-activated: follow its new plan
                pub.through = None
                pub.deltas, pub.state_rows, pub.delta_rows = [], 0, 0  # its results start over
            b = pub.sub.poll()
            through = pub.sub.final_through
            if not len(b) and through == pub.through:
                continue
            pub.through = through
            pub.record(b)
            pub.emitted += len(b)
            if not pub.subscribers:
                continue
            chunk = ResultChunk(b, through)
            for s in list(pub.subscribers.values()):
                if s.detached:
                    pub.subscribers.pop(s.id, None)
                elif not s.offer(chunk):
                    self._lagged(pub, s)

    def _lagged(self, pub: Publication, s: Subscriber) -> None:
        if pub.subscribers.pop(s.id, None) is not None:
            s.detached = True
            self.lag_disconnects += 1
            log.info("subscriber %d of query %d lagged (buffer of %d elements) and is disconnected", s.id,
                     pub.handle.id, s.capacity)

    def _publish_query(self, h) -> Publication:
        # the host keeps each relation query's current contents itself (from the deltas it publishes):
        # the engine's snapshot does not cover every plan shape (e.g. none above an aggregate), and
        # this one lines up exactly with the deltas that follow it
        pub = Publication(h, self.d.subscribe(h.id), keep_state=True)
        self.pubs[h.id] = pub
        return pub

    def _close_engine_sub(self, sub) -> None:
        if sub is None:
            return
        close = getattr(sub, "close", None)
        if callable(close):
            close()
            return
        # engine without Subscription.close: detach the reader so the queue stops keeping data for it
        try:
            readers = sub.query.queue.readers
            if sub.reader in readers:
                readers.remove(sub.reader)
        except AttributeError:
            pass

    # ------------------------------------------------------------ sources
    def _source(self, name: str) -> SourceDef:
        e = self.d.catalog.get(name)
        if not isinstance(e, SourceDef):
            raise ProblemError(404, "unknown_source", f"no stream or relation named '{name}'")
        return e

    def _source_out(self, s: SourceDef) -> dict:
        inp = self.d.inputs.get(s.name.lower())
        return {"name": s.name, "kind": s.kind, "attrs": [{"name": a.name, "type": _type_name(a.type)}
                                                         for a in s.attrs],
                "time_unit": s.time_unit, "slack": s.slack, "timestamp": s.timestamp, "static": s.static,
                "keys": [list(k) for k in s.keys], "accepted": int(getattr(inp, "accepted", 0) or 0),
                "max_ts": getattr(inp, "max_ts", None)}

    def register_source(self, ddl: str) -> dict:
        from cql.parser import parse_script
        from cql import ast

        with self.lock:
            try:
                stmts = parse_script(ddl)
                if len(stmts) != 1 or not isinstance(stmts[0], ast.RegisterSource):
                    raise ProblemError(422, "not_ddl", "expected exactly one 'register stream|relation' statement"
                                       + (f" (found {len(stmts)} statements)" if len(stmts) != 1 else ""))
                d = self.d.register_source(ddl)
            except CqlError as e:
                raise cql_problem(e.with_text(ddl), 422) from None
            return self._source_out(d)

    def list_sources(self) -> list[dict]:
        with self.lock:
            return [self._source_out(e) for e in self.d.catalog.entries() if isinstance(e, SourceDef)]

    def get_source(self, name: str) -> dict:
        with self.lock:
            return self._source_out(self._source(name))

    def _users(self, name: str) -> list[str]:
        """Queries and views that read source/view `name` (for engines without drop_source)."""
        from cql.logical.nodes import RelationSource, StreamSource

        def reads(plan) -> bool:
            stack = [plan]
            while stack:
                p = stack.pop()
                if isinstance(p, (StreamSource, RelationSource)) and p.name.lower() == name.lower():
                    return True
                stack.extend(p.inputs)
            return False

        users = [f"query {h.id}" for h in self.d.queries.values() if reads(h.compiled.plan)]
        users += [f"view {v.name}" for v in self.d.catalog.entries()
                  if isinstance(v, ViewDef) and v.name.lower() != name.lower() and reads(v.plan)]
        return users

    def drop_source(self, name: str) -> None:
        with self.lock:
            s = self._source(name)
            if s.name.lower() not in self.d.inputs:
                raise ProblemError(409, "read_only", f"'{s.name}' is a system stream: it cannot be dropped")
            if self.caps.drop_source:
                try:
                    self.d.drop_source(s.name)
                except KeyError:
                    raise ProblemError(404, "unknown_source", f"no stream or relation named '{name}'") from None
                except ValueError as e:  # engine.errors.InUseError
                    raise ProblemError(409, "in_use", str(e)) from None
                return
            users = self._users(s.name)
            if users:
                raise ProblemError(409, "in_use", f"'{s.name}' is used by {', '.join(users)}")
            self.d.catalog.drop(s.name)
            self.d.inputs.pop(s.name.lower(), None)

    # ------------------------------------------------------------ input
    def target(self, name: str) -> Target:
        with self.lock:
            s = self._source(name)
            return Target(s.name, s.kind, tuple((a.name, a.type.kind) for a in s.attrs), s.timestamp == "system",
                          self.settings.ts_field, self.settings.sign_field)

    def push(self, name: str, body: bytes, content_type: str | None) -> dict:
        """Parse (outside the lock), push whole or reject whole, run, publish."""
        target = self.target(name)
        try:
            parsed = parse(body, content_type, target)
        except IngestError as e:
            self.rejected_pushes[e.code] += 1
            raise ProblemError(e.status, e.code, str(e), row=e.row, field=e.field, source=target.name) from None
        n = len(parsed)
        with self.lock:
            s = self._source(name)
            if s.name != target.name or s.timestamp != ("system" if target.system_ts else "application"):
                raise ProblemError(409, "source_changed", f"'{name}' changed during the push; retry")
            inp = self.d.inputs.get(s.name.lower())
            if inp is None:
                raise ProblemError(409, "read_only", f"'{s.name}' is a system stream: it cannot be pushed to")
            late0 = getattr(inp, "late", 0)
            ts = None
            if target.system_ts:
                now_units = getattr(self.d, "_now_units", None)
                t = now_units(s) if now_units else int(self.d.clock() * 1000) // UNIT_MS[s.time_unit]
                ts = np.full(n, t, np.int64)
            try:
                accepted = self.d.push_batch(s.name, parsed.batch(ts)) if n else 0
            except InputError as e:
                self.rejected[s.name] += n
                self.rejected_pushes["invalid_input"] += 1
                p = input_problem(e)
                p.extra["source"] = s.name
                raise p from None
            self.accepted[s.name] += int(accepted)
            self.pushes += 1
            late = int(getattr(inp, "late", 0) - late0)
            if n:
                self._run()
            return {"source": s.name, "accepted": int(accepted), "late": late}

    def heartbeat(self, name: str, t: int) -> dict:
        with self.lock:
            s = self._source(name)
            if s.name.lower() not in self.d.inputs:
                raise ProblemError(409, "read_only", f"'{s.name}' is a system stream: its time is the clock's")
            try:
                self.d.heartbeat(s.name, int(t))
            except InputError as e:
                raise input_problem(e) from None
            self._run()
            return {"source": s.name, "ts": int(t)}

    # ------------------------------------------------------------ queries
    def _query(self, qid: int):
        h = self.d.queries.get(qid)
        if h is None:
            raise ProblemError(404, "unknown_query", f"no query with id {qid}")
        return h

    def _query_out(self, h) -> dict:
        meta = self.query_meta.get(h.id, {})
        pub = self.pubs.get(h.id)
        bm = getattr(h, "bounded_memory", None)
        if bm is None:
            bm = getattr(getattr(h, "compiled", None), "bounded_memory", None)
        comp = h.completeness() if hasattr(h, "completeness") else {"complete_from": None, "complete": True}
        return {"id": h.id, "name": h.name, "cql": h.text, "kind": h.kind, "complete": comp["complete"],
                "schema": [{"name": a.name, "type": _type_name(a.type)} for a in h.schema],
                "explain": h.explain(), "complete_from": comp["complete_from"],
                "active": bool(getattr(h, "active", meta.get("active", True))),
                "weight": float(getattr(h, "weight", meta.get("weight", 1.0))),
                "bounded_memory": bm if isinstance(bm, bool) else None,
                "subscribers": pub.live() if pub else 0}

    def register_query(self, cql: str, name: str | None = None) -> dict:
        from cql import ast
        from cql.parser import parse_script

        with self.lock:
            if name is not None and any((h.name or "").lower() == name.lower() for h in self.d.queries.values()):
                raise ProblemError(409, "duplicate_name", f"a query named '{name}' already exists")
            try:
                stmts = parse_script(cql)
                if len(stmts) != 1 or isinstance(stmts[0], (ast.RegisterSource, ast.RegisterView)):
                    raise ProblemError(422, "not_a_query", "expected exactly one CQL query (register streams at "
                                       "/streams, views at /views)")
                h = self.d.register_query(cql, name=name)
            except CqlError as e:
                raise cql_problem(e.with_text(cql), 422) from None
            except NotImplementedError as e:
                raise ProblemError(422, "not_supported", f"not supported by the engine: {e}") from None
            self._publish_query(h)
            self._publish()  # registering may have run the plan (a late query's catch-up): deliver that now
            return self._query_out(h)

    def list_queries(self) -> list[dict]:
        with self.lock:
            return [self._query_out(h) for h in self.d.queries.values()]

    def get_query(self, qid: int) -> dict:
        with self.lock:
            return self._query_out(self._query(qid))

    def patch_query(self, qid: int, active: bool | None, weight: float | None) -> dict:
        with self.lock:
            h = self._query(qid)
            meta = self.query_meta.setdefault(qid, {})
            try:
                if active is not None:
                    if self.caps.set_active:
                        h = self.d.set_active(qid, bool(active))
                    else:
                        h.active = bool(active)
                        meta["active"] = bool(active)
                if weight is not None:
                    if self.caps.set_weight:
                        h = self.d.set_weight(qid, float(weight))
                    else:
                        h.weight = float(weight)
                        meta["weight"] = float(weight)
            except ValueError as e:
                raise ProblemError(422, "bad_value", str(e)) from None
            self._publish()
            return self._query_out(self.d.queries.get(qid, h))

    def delete_query(self, qid: int) -> None:
        with self.lock:
            self._query(qid)
            try:
                self.d.deregister(qid)
            except ValueError as e:
                raise ProblemError(409, "in_use", str(e)) from None
            pub = self.pubs.pop(qid, None)
            if pub is not None:
                for s in list(pub.subscribers.values()):
                    s.end("query deregistered")
                pub.subscribers.clear()
                self._close_engine_sub(pub.sub)
            self.query_meta.pop(qid, None)

    # ------------------------------------------------------------ views
    def _view_out(self, v: ViewDef) -> dict:
        return {"name": v.name, "kind": v.kind, "schema": [{"name": a.name, "type": _type_name(a.type)}
                                                           for a in v.attrs]}

    def register_view(self, text: str) -> dict:
        from cql import ast
        from cql.parser import parse_script

        with self.lock:
            try:
                stmts = parse_script(text)
                if len(stmts) != 1 or not isinstance(stmts[0], ast.RegisterView):
                    raise ProblemError(422, "not_a_view", "expected exactly one 'register view V as …' statement")
                v = self.d.register_view(text)
            except CqlError as e:
                raise cql_problem(e.with_text(text), 422) from None
            return self._view_out(v)

    def list_views(self) -> list[dict]:
        with self.lock:
            return [self._view_out(v) for v in self.d.catalog.entries() if isinstance(v, ViewDef)]

    def _view(self, name: str) -> ViewDef:
        v = self.d.catalog.get(name)
        if not isinstance(v, ViewDef):
            raise ProblemError(404, "unknown_view", f"no view named '{name}'")
        return v

    def get_view(self, name: str) -> dict:
        with self.lock:
            return self._view_out(self._view(name))

    def drop_view(self, name: str) -> None:
        with self.lock:
            v = self._view(name)
            if self.caps.drop_view:
                try:
                    self.d.drop_view(v.name)
                except KeyError:
                    raise ProblemError(404, "unknown_view", f"no view named '{name}'") from None
                except ValueError as e:
                    raise ProblemError(409, "in_use", str(e)) from None
                return
            # views are inlined into query plans, so the users of a view are found by its text
            users = [f"query {h.id}" for h in self.d.queries.values() if _mentions(h.text, v.name)]
            users += [f"view {w.name}" for w in self.d.catalog.entries() if isinstance(w, ViewDef) and w is not v
                      and _mentions(_view_text(w), v.name)]
            if users:
                raise ProblemError(409, "in_use", f"view '{v.name}' is used by {', '.join(users)}")
            self.d.catalog.drop(v.name)

    # ------------------------------------------------------------ subscriptions
    def subscribe(self, qid: int, fmt: str, loop: asyncio.AbstractEventLoop, snapshot: bool = False,
                  follow: bool = True, capacity: int | None = None) -> tuple[Subscriber | None, ResultChunk | None]:
        """(subscriber attached to the query's results, or None when not following; the snapshot
        chunk when asked for). Both are taken under the lock, so the snapshot and the deltas that
        follow it line up exactly."""
        with self.lock:
            h = self._query(qid)
            pub = self.pubs.get(qid) or self._publish_query(h)
            # the snapshot (or nothing) plus how far the results are final already
            b = self._snapshot(pub) if snapshot else Batch.empty([a.type for a in h.schema])
            snap = ResultChunk(b, pub.through)
            s = None
            if follow:
                s = Subscriber(self, pub, fmt, loop, capacity or self.settings.subscriber_buffer)
                pub.subscribers[s.id] = s
            self.subscriptions_total += 1
            return s, snap

    def query_info(self, qid: int) -> tuple[str, list[tuple[str, str]]]:
        with self.lock:
            h = self._query(qid)
            return h.kind, [(a.name, _type_name(a.type)) for a in h.schema]

    def _snapshot(self, pub: Publication) -> Batch:
        """The query's current relation as `+` rows at the last final instant (empty for streams)."""
        if not pub.keep_state:
            return Batch.empty([a.type for a in pub.handle.schema])
        st = pub.state()
        if len(st) and pub.through is not None:
            st = Batch(st.cols, st.nulls, np.full(len(st), pub.through, np.int64), np.ones(len(st), np.int8), st.id)
        return st

    def detach(self, s: Subscriber) -> None:
        """Release a subscriber (lock-free: the next publish drops it)."""
        s.detached = True

    # ------------------------------------------------------------ control tables
    def entities(self) -> list[dict]:
        with self.lock:
            if self.caps.control_tables:
                return [_plain(e) for e in self.d.control_tables()]
            return self._basic_entities()

    def entity(self, entity_id: str) -> dict:
        with self.lock:
            if self.caps.control_tables:
                try:
                    return _plain(self.d.control_table(entity_id))
                except KeyError:
                    raise ProblemError(404, "unknown_entity", f"no entity '{entity_id}'") from None
            for e in self._basic_entities():
                if e["id"] == entity_id:
                    return e
            raise ProblemError(404, "unknown_entity", f"no entity '{entity_id}'")

    def set_knobs(self, entity_id: str, knobs: dict) -> dict:
        with self.lock:
            if self.caps.control_tables and self.caps.set_knob:
                try:
                    self.d.control_table(entity_id)
                except KeyError:
                    raise ProblemError(404, "unknown_entity", f"no entity '{entity_id}'") from None
                for k, v in knobs.items():
                    try:
                        self.d.set_knob(entity_id, k, v)
                    except KeyError as e:
                        raise ProblemError(422, "unknown_knob", f"entity '{entity_id}': unknown knob {e}",
                                           field=k) from None
                    except (ValueError, TypeError) as e:
                        raise ProblemError(422, "bad_knob_value", f"entity '{entity_id}' knob '{k}': {e}",
                                           field=k) from None
                return _plain(self.d.control_table(entity_id))
            e = self.entity(entity_id)
            if not entity_id.startswith("query:"):
                bad = next(iter(knobs), None)
                if bad is None:
                    return e
                raise ProblemError(422, "unknown_knob", f"entity '{entity_id}' has no settable knob '{bad}'",
                                   field=bad)
            qid = int(entity_id.split(":", 1)[1])
            for k, v in knobs.items():
                if k == "active" and isinstance(v, bool):
                    self.patch_query(qid, v, None)
                elif k == "weight" and isinstance(v, (int, float)) and not isinstance(v, bool) and 0 < v <= 1e9:
                    self.patch_query(qid, None, float(v))
                elif k in ("active", "weight"):
                    raise ProblemError(422, "bad_knob_value", f"knob '{k}': bad value {v!r}", field=k)
                else:
                    raise ProblemError(422, "unknown_knob", f"entity '{entity_id}' has no settable knob '{k}'",
                                       field=k)
            return self.entity(entity_id)

    def _basic_entities(self) -> list[dict]:
        """Control tables of sources and queries, for engines without the plan manager's."""
        out = []
        for key, inp in self.d.inputs.items():
            s = inp.d
            users = [h.id for h in self.d.queries.values() if f"query {h.id}" in self._users(s.name)]
            out.append({"id": f"source:{s.name}", "kind": "source", "name": s.name,
                        "counters": {"tuples_in": int(getattr(inp, "accepted", 0)),
                                     "late": int(getattr(inp, "late", 0)),
                                     "max_ts": getattr(inp, "max_ts", None)},
                        "knobs": {}, "queries": users})
        for h in self.d.queries.values():
            pub = self.pubs.get(h.id)
            q = self._query_out(h)
            out.append({"id": f"query:{h.id}", "kind": "query", "name": h.name or f"q{h.id}",
                        "counters": {"tuples_out": pub.emitted if pub else 0,
                                     "queue_length": h.queue.length() if hasattr(h, "queue") else 0,
                                     "subscribers": q["subscribers"]},
                        "knobs": {"active": q["active"], "weight": q["weight"]}, "queries": [h.id]})
        return out

    # ------------------------------------------------------------ metrics
    def metrics(self) -> dict:
        with self.lock:
            attribution = {}
            if self.caps.attribution:
                try:
                    attribution = self.d.attribution() or {}
                except Exception:  # noqa: BLE001 - metrics never fail the scrape
                    log.exception("attribution failed")
            return {
                "accepted": dict(self.accepted), "rejected": dict(self.rejected),
                "rejected_pushes": dict(self.rejected_pushes), "pushes": self.pushes,
                "lag_disconnects": self.lag_disconnects, "cutoffs": self.cutoffs,
                "subscriptions_total": self.subscriptions_total,
                "subscribers": {qid: p.live() for qid, p in self.pubs.items()},
                "emitted": {qid: p.emitted for qid, p in self.pubs.items()},
                "buffered": {qid: sum(s.count for s in p.subscribers.values()) for qid, p in self.pubs.items()},
                "attribution": attribution, "run_seconds": self.run_seconds, "runs": self.runs,
                "queries": len(self.d.queries),
                "sources": {i.d.name: {"accepted": int(getattr(i, "accepted", 0)), "late": int(getattr(i, "late", 0)),
                                       "max_ts": getattr(i, "max_ts", None)} for i in self.d.inputs.values()},
                "uptime": time.time() - self.started, "errors_5xx": self.errors_5xx,
            }

    def health(self) -> dict:
        with self.lock:
            return {"status": "ok", "streams": len(self.d.inputs), "queries": len(self.d.queries),
                    "subscribers": sum(p.live() for p in self.pubs.values()),
                    "uptime_seconds": round(time.time() - self.started, 3), "persistence": self.persistent}


def _plain(e) -> dict:
    """A control-table dict with JSON-safe values."""
    def conv(v):
        if isinstance(v, dict):
            return {str(k): conv(x) for k, x in v.items()}
        if isinstance(v, (list, tuple)):
            return [conv(x) for x in v]
        if isinstance(v, np.generic):
            return v.item()
        if isinstance(v, float) and not np.isfinite(v):
            return None
        return v

    return conv(dict(e))


def _mentions(text: str, name: str) -> bool:
    import re

    return re.search(rf"(?<![A-Za-z0-9_]){re.escape(name)}(?![A-Za-z0-9_])", text or "", re.I) is not None


def _view_text(v: ViewDef) -> str:
    try:
        from cql.printer import to_cql

        return to_cql(v.query)
    except Exception:  # noqa: BLE001
        return ""
