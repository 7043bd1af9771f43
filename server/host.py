"""The engine host: the process's one `Dsms` behind a lock, and the catalog, query and input calls of the routes."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections import defaultdict
from collections.abc import Iterable
from typing import Any

import numpy as np

from cqlstream.cql import ast
from cqlstream.cql.catalog import SourceDef, ViewDef
from cqlstream.cql.errors import CqlError
from cqlstream.cql.logical.nodes import Attribute
from cqlstream.cql.parser import parse_script
from cqlstream.engine import parallel
from cqlstream.engine.approx.admission import Decision
from cqlstream.engine.approx.config import OverloadConfig
from cqlstream.engine.batch import Batch
from cqlstream.engine.dsms import SYS_STREAM, Dsms, QueryHandle, names_read
from cqlstream.engine.errors import InputError
from cqlstream.engine.operators.summary_mode import query_summaries
from cqlstream.engine.scheduler import for_threads
from cqlstream.engine.seeding import register_seeded
from cqlstream.io.decoders import Parsed, Target
from cqlstream.io.errors import IngestError
from cqlstream.io.formats import decode
from cqlstream.server.archive import ArchiveReplay, archive_of
from cqlstream.server.control import Control
from cqlstream.server.dir_lock import DataDirLock
from cqlstream.server.engine_lock import EngineLock
from cqlstream.server.idempotency import IdempotencyStore
from cqlstream.server.problems import ProblemError
from cqlstream.server.publication import Fanout, ResultChunk, SnapshotUnavailable, Subscriber
from cqlstream.server.recovery import Journal, has_log
from cqlstream.server.result_history import HistoryGone
from cqlstream.server.settings import Settings
from cqlstream.server.spark_host import SparkHost

log = logging.getLogger("cqlstream.server")


def make_dsms(settings: Settings) -> Dsms:
    """The engine for the settings (its catalog and queries persist under `data_dir` when set). A data
    dir with a log is recovered from the log (server/recovery.py), not from its plan.json."""
    data_dir = settings.data_dir or None
    with_log = data_dir is not None and has_log(data_dir)
    d = Dsms(
        compat=settings.compat,
        data_dir=None if with_log else data_dir,
        silence_timeout=settings.silence_timeout,
        scheduler=for_threads(settings.engine_threads, settings.work_budget),
        query_memory_limit=settings.query_memory_limit,
        query_cpu_limit=settings.query_cpu_limit,
        overload=_overload(settings),
        synopsis_joins=settings.synopsis_joins,
    )
    if with_log and data_dir is not None:
        from cqlstream.engine.persist import PlanFile

        d.plan_file = PlanFile(data_dir)  # still written, as an export
    return d


def follow_engine_threads(d: Dsms, engine_threads: int) -> None:
    """At start, round robin and `parallel` (one schedule, on one thread or on several) follow
    --engine-threads, whichever of the two a data dir recorded; another scheduler chosen through
    the `scheduler` knob is kept."""
    s = d.scheduler
    if s.name in ("round-robin", "parallel"):
        want = for_threads(engine_threads, s.budget)
        if want.name != s.name:
            d.scheduler = want


def _overload(settings: Settings) -> OverloadConfig | None:
    """The overload controller's settings (`serve --overload-control on`), None when off."""
    if not settings.overload_control:
        return None
    return OverloadConfig(
        enabled=True,
        queue_memory_limit=settings.overload_queue_memory_limit,
        cpu_limit=settings.overload_cpu_limit,
        admission=settings.overload_admission,
        policy=settings.overload_policy,
    )


def _too_deep() -> ProblemError:
    """The problem of a RecursionError in a step of a registration (past the parser's depth check)."""
    return ProblemError(422, "too_deep", "statement is nested too deeply")


def _attrs(attrs: Iterable[Attribute]) -> list[dict[str, str]]:
    return [{"name": a.name, "type": str(a.type)} for a in attrs]


class EngineHost:
    """The one `Dsms` of the process and what the routes do with it.

    - Every engine call happens under `self.lock`, in a worker thread (the app calls these methods
      through `run_in_threadpool`), never on the event loop.
    - After every engine call that may run the plan (a push, a heartbeat, a clock tick, registering
      or activating a query, setting a knob) the host publishes (`Fanout.publish`) under the same
      lock, so the engine's state and what subscribers were sent always line up (snapshots rely on it).
    - A clock thread ticks the engine (system-timestamped streams, SysStream, silence timeout) every
      `tick_interval` s (down to 1 ms), skipping ticks that would move no source's time.
    - Event-time results never wait for the clock: the push or heartbeat that makes an instant final
      runs the engine and publishes that instant's results before it replies.
    """

    def __init__(self, settings: Settings | None = None, dsms: Dsms | None = None):
        self.settings = settings or Settings()
        # one server per data dir: refused here, before anything in it is read (server/dir_lock.py)
        self.dir_lock = DataDirLock(self.settings.data_dir) if self.settings.data_dir else None
        # the engine's threads are the process's (engine/parallel.py): set for this server, given back at stop
        self._threads_before = parallel.threads()
        parallel.set_threads(self.settings.engine_threads)
        try:
            self._open(dsms)
        except BaseException:
            parallel.set_threads(self._threads_before)
            if self.dir_lock is not None:
                self.dir_lock.release()
            raise

    def _open(self, dsms: Dsms | None) -> None:
        self.d = dsms if dsms is not None else make_dsms(self.settings)
        self.d.approx_on_tick = False  # the clock thread runs the overload controller and logs its changes
        self.persistent = self.d.plan_file is not None
        self.lock = EngineLock()  # tells lock-free since when it is held (readiness, backpressure)
        self.pending_pushes = 0  # pushes in flight (counted by the app's admission middleware)
        self.busy_replies = 0  # pushes answered 429 (engine behind)
        self.started = time.time()
        self.fanout = Fanout(self.d, self.settings.lag_grace_seconds, self.settings.result_history)
        self.control = Control(self)
        self.spark = SparkHost(self)
        self.idempotency = IdempotencyStore(self.settings.idempotency_keys)  # keys of applied pushes
        # metrics
        self.accepted: dict[str, int] = defaultdict(int)
        self.rejected: dict[str, int] = defaultdict(int)
        self.rejected_pushes: dict[str, int] = defaultdict(int)
        self.pushes = 0
        self.replayed: dict[str, int] = defaultdict(int)  # pushes answered from their idempotency key
        self.run_seconds = 0.0
        self.runs = 0
        self.errors_5xx = 0
        self._stop = threading.Event()
        self._ticker: threading.Thread | None = None
        self.journal = Journal(self)  # the write-ahead log and checkpoints under data_dir
        with self.lock:
            self.journal.recover()  # the last checkpoint and the log after it
            for qid in sorted(self.d.queries):  # queries restored by the engine from data_dir
                if qid not in self.fanout.pubs:
                    self.fanout.add(self.d.queries[qid])
            for text in self.settings.ddl:
                self._startup_ddl(text)
            follow_engine_threads(self.d, self.settings.engine_threads)

    def _startup_ddl(self, text: str) -> None:
        """Register the streams, relations and views of `text` (one or more `;`-separated statements);
        a name the catalog already holds (restored from the data dir) is kept as it is."""
        for stmt in parse_script(text):
            if isinstance(stmt, ast.RegisterSource):
                if self.d.catalog.get(stmt.name) is None:
                    self.d.register_source(stmt)
                    self.journal.log("register_source", ddl=self.d.ddl[stmt.name.lower()])
            elif isinstance(stmt, ast.RegisterView):
                if self.d.catalog.get(stmt.name) is None:
                    self.d.register_view(stmt)
                    self.journal.log("register_view", ddl=self.d.ddl[stmt.name.lower()])
            else:
                raise ProblemError(422, "not_ddl", "--ddl takes 'register stream|relation|view' statements only")

    # ------------------------------------------------------------ lifecycle
    def start(self) -> None:
        if self._ticker is None:
            self._ticker = threading.Thread(target=self._tick_loop, name="cqlstream-clock", daemon=True)
            self._ticker.start()
        self.spark.start()

    def stop(self) -> None:
        self._stop.set()
        if self._ticker is not None:
            self._ticker.join(timeout=5)
            self._ticker = None
        self.spark.stop()  # the streaming queries first: an in-flight batch still reaches the engine
        with self.lock:
            self.fanout.end_all("server stopping")
        self.journal.close()  # a last checkpoint: the restart replays nothing
        if self.dir_lock is not None:
            self.dir_lock.release()
        parallel.set_threads(self._threads_before)

    def end_streams(self, reason: str) -> None:
        """End every result stream (lock-free: safe on the event loop at shutdown)."""
        self.fanout.end_all(reason)

    def _tick_loop(self) -> None:
        while not self._stop.wait(self.settings.tick_interval):
            try:
                self._clock_step()
            except Exception:
                log.exception("clock tick failed")

    def _clock_step(self) -> None:
        """One turn of the clock thread: a checkpoint when one is due, then a tick when it can move
        time. At a 1 ms tick most turns move nothing (a stream in seconds, no system-timestamped
        stream): those take neither the lock nor an engine run."""
        self.journal.maybe_checkpoint()
        if self._clock_moves():
            with self.lock:
                self._tick()
        if self.d.approx is not None:
            with self.lock:
                self._approximate()

    def _approximate(self) -> None:
        """One turn of the overload controller; a change is logged (a replay applies the logged
        steps instead of deciding again: the results depend only on when the knobs changed)."""
        a = self.d.approx
        if a is None:
            return
        with self.journal.moment():
            if a.tick():
                self.journal.log("approximate", levels={str(q): k for q, k in a.levels.items()}, reason=a.reason)
                self._run()

    def _tick(self) -> None:
        """One clock tick; logged when it moved a source's time (system timestamps, silence timeout)."""
        with self.journal.moment():
            notices = len(self.d.notices)
            self.d.tick()
            if len(self.d.notices) != notices or any(i.d.timestamp == "system" for i in self.d.inputs.values()):
                self.journal.log("tick")
            self._run()

    def _clock_moves(self) -> bool:
        """Whether a tick now can change anything: always with a silence timeout or a read system
        stream; else only when a system-timestamped source's time would move (the clock reached a
        new instant of its unit). A skipped tick is one that would have heartbeat every source to
        where it already is, so what is published, and at which instant, does not change."""
        d = self.d
        if d.silence_timeout is not None or (d.sys is not None and d.sys.wanted):
            return True
        return any(i.d.timestamp == "system" and i.moved_by(d._now_units(i.d)) for i in list(d.inputs.values()))

    def _run(self) -> None:
        t = time.perf_counter()
        self.d.run()
        self.run_seconds += time.perf_counter() - t
        self.runs += 1
        self.publish()

    def publish(self) -> None:
        """Deliver results after an engine call that may have run the plan (call under the lock).
        A query the run suspended over a limit is logged first: a replay suspends it at the same
        record even where its limit depends on timing (CPU)."""
        while self.d.new_suspensions:
            qid, reason = self.d.new_suspensions.pop(0)
            self.journal.log("suspend", id=qid, reason=reason)
        self.fanout.publish()

    # ------------------------------------------------------------ sources
    def _source(self, name: str) -> SourceDef:
        e = self.d.catalog.get(name)
        if not isinstance(e, SourceDef):
            raise ProblemError(404, "unknown_source", f"no stream or relation named '{name}'")
        return e

    def _source_out(self, s: SourceDef) -> dict[str, Any]:
        inp = self.d.inputs.get(s.name.lower())
        return {
            "name": s.name,
            "kind": s.kind,
            "attrs": _attrs(s.attrs),
            "time_unit": s.time_unit,
            "slack": s.slack,
            "timestamp": s.timestamp,
            "static": s.static,
            "keys": [list(k) for k in s.keys],
            "constraints": [c.to_cql() for c in s.constraints],
            "accepted": int(inp.accepted) if inp is not None else 0,
            "max_ts": None if inp is None else inp.max_ts,
        }

    def register_source(self, ddl: str) -> dict[str, Any]:
        with self.lock:
            stmts = parse_script(ddl)
            if len(stmts) != 1 or not isinstance(stmts[0], ast.RegisterSource):
                raise ProblemError(
                    422,
                    "not_ddl",
                    "expected exactly one 'register stream|relation' statement"
                    + (f" (found {len(stmts)} statements)" if len(stmts) != 1 else ""),
                )
            out = self._source_out(self.d.register_source(ddl))
            self.journal.log("register_source", ddl=ddl)
            return out

    def list_sources(self) -> list[dict[str, Any]]:
        with self.lock:
            return [self._source_out(e) for e in self.d.catalog.entries() if isinstance(e, SourceDef)]

    def get_source(self, name: str) -> dict[str, Any]:
        with self.lock:
            return self._source_out(self._source(name))

    def drop_source(self, name: str) -> None:
        with self.lock:
            s = self._source(name)
            if s.name.lower() not in self.d.inputs:
                raise ProblemError(409, "read_only", f"'{s.name}' is a system stream: it cannot be dropped")
            self.d.drop_source(s.name)
            self.journal.log("drop_source", name=s.name)
            self.idempotency.forget(s.name)

    # ------------------------------------------------------------ input
    def target(self, name: str) -> Target:
        with self.lock:
            s = self._source(name)
            return Target.of(s, self.settings.ts_field, self.settings.sign_field)

    def _replay(self, name: str, key: str) -> dict[str, Any] | None:
        """The reply of the push applied on source `name` with idempotency `key`, marked replayed
        (None: the key is new). Call under the lock."""
        s = self._source(name)
        reply = self.idempotency.seen(s.name, key)
        if reply is None:
            return None
        self.replayed[s.name] += 1
        return {**reply, "replayed": True}

    def push(
        self,
        name: str,
        body: bytes,
        content_type: str | None,
        *,
        drop_late: bool = False,
        heartbeat: int | None = None,
        key: str | None = None,
    ) -> dict[str, Any]:
        """Parse (outside the lock), push whole or reject whole, advance the source's time to
        `heartbeat` (a no-op when its time is past it already), run, publish: one request, one
        micro-batch and its watermark. `drop_late`: rows older than the source's time are dropped
        and counted (`late`) instead of rejecting the push. With an idempotency `key` already
        applied on the source, nothing happens and the first reply comes back (`replayed`); a key
        is recorded under the lock of the push it belongs to, and only when the push was applied."""
        if key is not None:
            with self.lock:  # a retry: answer without decoding the body again
                replay = self._replay(name, key)
            if replay is not None:
                return replay
        target = self.target(name)
        try:
            parsed = decode(body, content_type, target)
        except IngestError as e:
            self.rejected_pushes[e.code] += 1
            raise ProblemError(e.status, e.code, str(e), row=e.row, field=e.field, source=target.name) from None
        return self.apply(name, target, parsed, drop_late=drop_late, heartbeat=heartbeat, key=key)

    def apply(
        self,
        name: str,
        target: Target,
        parsed: Parsed,
        *,
        drop_late: bool = False,
        heartbeat: int | None = None,
        key: str | None = None,
    ) -> dict[str, Any]:
        """Apply decoded rows (`target` is what they were decoded for) as `push` does: every push of
        the server, HTTP or an embedded Spark source, goes through here."""
        n = len(parsed)
        with self.lock, self.journal.moment():
            s = self._source(name)
            if key is not None:  # a concurrent retry with the same key may have applied it meanwhile
                replay = self._replay(s.name, key)
                if replay is not None:
                    return replay
            if s.name != target.name or s.timestamp != ("system" if target.system_ts else "application"):
                raise ProblemError(409, "source_changed", f"'{name}' changed during the push; retry")
            if s.name.lower() not in self.d.inputs:
                raise ProblemError(409, "read_only", f"'{s.name}' is a system stream: it cannot be pushed to")
            ts = np.full(n, self.d._now_units(s), np.int64) if target.system_ts else None
            return self._apply_batch(s, parsed.batch(ts), drop_late, heartbeat, key)

    def _apply_batch(
        self,
        s: SourceDef,
        batch: Batch,
        drop_late: bool,
        heartbeat: int | None,
        key: str | None,
        replay: tuple[Decision | None] | None = None,
    ) -> dict[str, Any]:
        """Push a batch with its timestamps assigned, heartbeat, log, run (under the lock): the
        part of `apply` a log record replays. `replay`: (the admission decision the log recorded,)
        — applied instead of deciding again."""
        n = len(batch)
        inp = self.d.inputs[s.name.lower()]
        late0, refused0 = inp.late, inp.refused
        self.d.admission.last = None
        try:
            if n and replay is not None:
                self.d.push_batch(s.name, batch, drop_late=drop_late, decision=replay[0], replayed=True)
            elif n:
                self.d.push_batch(s.name, batch, drop_late=drop_late)
        except InputError as e:  # counted, and the reply names the source
            self.rejected[s.name] += n
            self.rejected_pushes[e.code] += 1
            e.details["source"] = s.name
            dec = self.d.admission.last
            if dec is not None and dec.levels is not None:  # the controller stepped before the push failed
                self.journal.log("approximate", levels={str(q): k for q, k in dec.levels.items()}, reason=dec.reason)
            raise
        if heartbeat is not None:
            self.d.heartbeat(s.name, int(heartbeat))  # the engine ignores a heartbeat below the time
        dec = self.d.admission.last
        # before the reply: durable when acked
        self.journal.log_push(s.name, batch, drop_late, heartbeat, key, None if dec is None else dec.to_json())
        late = int(inp.late - late0)  # dropped as late (late=drop, or behind a slack): not accepted
        refused = int(inp.refused - refused0)  # refused by admission control under overload
        accepted = n - late
        self.accepted[s.name] += accepted
        self.pushes += 1
        reply = {"source": s.name, "accepted": accepted, "late": late, "refused": refused, "replayed": False}
        if key is not None:  # recorded once applied: a retry after a failed run must not apply twice
            self.idempotency.record(s.name, key, reply)
        if n or heartbeat is not None:
            self._run()
        return reply

    def heartbeat(self, name: str, t: int) -> dict[str, Any]:
        with self.lock, self.journal.moment():
            s = self._source(name)
            if s.name.lower() not in self.d.inputs:
                raise ProblemError(409, "read_only", f"'{s.name}' is a system stream: its time is the clock's")
            self.d.heartbeat(s.name, int(t))
            self.journal.log("heartbeat", source=s.name, t=int(t))
            self._run()
            return {"source": s.name, "ts": int(t)}

    # ------------------------------------------------------------ queries
    def _query(self, qid: int) -> QueryHandle:
        h = self.d.queries.get(qid)
        if h is None:
            raise ProblemError(404, "unknown_query", f"no query with id {qid}")
        return h

    def _query_out(self, h: QueryHandle) -> dict[str, Any]:
        pub = self.fanout.pubs.get(h.id)
        return {
            "id": h.id,
            "name": h.name,
            "cql": h.text,
            "kind": h.kind,
            "schema": _attrs(h.schema),
            "explain": h.explain(),
            **h.completeness(),
            "active": h.active,
            "state": h.state,
            "suspended": h.suspended,
            "memory_limit": self.d.guard.limit_of(h),
            "cpu_limit": self.d.guard.cpu_limit_of(h),
            "weight": h.weight,
            "bounded_memory": h.bounded_memory,
            "bounded_memory_note": h.bounded_memory_note,
            "bounded_memory_verdict": h.memory_verdict.to_dict(),
            "partitioning": h.partitioning.to_dict(),
            "subscribers": pub.live() if pub else 0,
            "approximation": None if self.d.approx is None else self.d.approx.of(h.id),
            "summaries": query_summaries(h.pnode),
            **(
                {} if h.compiled.approximation is None else {"static_approximation": h.compiled.approximation.to_json()}
            ),
        }

    def _one_query(self, cql: str, name: str | None) -> ast.Query:
        """The one query statement of `cql` (422 otherwise; 409 when `name` is taken)."""
        if name is not None and any((h.name or "").lower() == name.lower() for h in self.d.queries.values()):
            raise ProblemError(409, "duplicate_name", f"a query named '{name}' already exists")
        stmts = parse_script(cql)
        if len(stmts) != 1 or isinstance(stmts[0], (ast.RegisterSource, ast.RegisterView)):
            raise ProblemError(
                422,
                "not_a_query",
                "expected exactly one CQL query (register streams at /streams, views at /views)",
            )
        return stmts[0]

    def register_query(
        self,
        cql: str,
        name: str | None = None,
        seed_from: int | None = None,
        *,
        upto: int | None = None,
        approximate: Any = None,
    ) -> dict[str, Any]:
        """Register a query. `seed_from` T: as if it had been registered at instant T, from the log
        archive (server/archive.py): most of the log is replayed before the lock is taken; `upto`: the
        log record it was registered at (a recovery replaying its record), default the log's end."""
        replay = None
        if seed_from is not None and approximate is not None:
            raise ProblemError(422, "approximate_with_seed", "a seeded query is registered exact: drop approximate")
        if seed_from is not None:
            wal = archive_of(self.journal.wal, self.settings, replaying=upto is not None)
            with self.lock:  # a query that cannot register is refused before the log is read
                try:
                    self.d.compile(self._one_query(cql, name))
                except CqlError as e:
                    raise e.with_text(cql) from None
            replay = ArchiveReplay(wal, self.settings, seed_from)
            replay.advance(upto)  # outside the lock: the live server keeps appending meanwhile
        with self.lock:
            stmts = [self._one_query(cql, name)]
            before = set(self.d.queries)
            logged = None
            try:
                if replay is None:
                    h = self.d.register_query(cql, name=name, approximate=approximate)
                    approx = {} if approximate is None else {"approximate": approximate}
                    self.journal.log("register_query", cql=cql, name=name, id=h.id, **approx)
                else:
                    if SYS_STREAM.lower() in names_read(stmts[0]):
                        raise ProblemError(
                            422, "nothing_to_seed", f"{SYS_STREAM} is not in the log: it cannot be seeded"
                        )
                    replay.advance(upto if upto is not None else replay.wal.next_lsn)  # what was appended meanwhile
                    h = register_seeded(self.d, cql, name, replay.seeds(self.d))
                    self.journal.log("register_query", cql=cql, name=name, id=h.id, seed_from=int(replay.t))
                logged = h.id
                self.fanout.add(h)
                if replay is None:
                    self.publish()  # registering ran the plan (a late query's catch-up): deliver that now
                else:
                    self._run()  # the seeded query catches up on its input since T (only its operators have any)
                return self._query_out(h)
            except BaseException as e:  # a failed registration leaves nothing registered
                for qid in set(self.d.queries) - before:
                    self.fanout.remove(qid, "registration failed")
                    self.d.deregister(qid)
                    if qid == logged:  # the log must forget it too
                        self.journal.log("delete_query", id=qid)
                if isinstance(e, RecursionError):
                    raise _too_deep() from None
                raise

    def list_queries(self) -> list[dict[str, Any]]:
        with self.lock:
            return [self._query_out(h) for h in self.d.queries.values()]

    def get_query(self, qid: int) -> dict[str, Any]:
        with self.lock:
            return self._query_out(self._query(qid))

    def patch_query(
        self, qid: int, active: bool | None, weight: float | None, memory_limit: tuple[int | None] | None = None
    ) -> dict[str, Any]:
        """`memory_limit`: (bytes or None for the server's default,) to set it, None to leave it."""
        with self.lock:
            self._query(qid)
            try:
                if memory_limit is not None:
                    self.d.set_knob(f"query:{qid}", "memory_limit", memory_limit[0])
                if weight is not None:
                    self.d.set_weight(qid, float(weight))
                    self.journal.log("patch_query", id=qid, weight=float(weight))
                if active is not None:
                    self.d.set_active(qid, bool(active))
                    self.journal.log("patch_query", id=qid, active=bool(active))
            finally:
                self.publish()  # activating ran the plan; deactivating ends the query's subscribers
            return self._query_out(self.d.queries[qid])

    def delete_query(self, qid: int) -> None:
        with self.lock:
            self._query(qid)
            self.d.deregister(qid)
            self.journal.log("delete_query", id=qid)
            self.fanout.remove(qid, "query deregistered")

    # ------------------------------------------------------------ views
    def _view_out(self, v: ViewDef) -> dict[str, Any]:
        return {"name": v.name, "kind": v.kind, "schema": _attrs(v.attrs)}

    def register_view(self, text: str) -> dict[str, Any]:
        with self.lock:
            stmts = parse_script(text)
            if len(stmts) != 1 or not isinstance(stmts[0], ast.RegisterView):
                raise ProblemError(422, "not_a_view", "expected exactly one 'register view V as …' statement")
            name = stmts[0].name
            existed = self.d.catalog.get(name) is not None
            try:
                out = self._view_out(self.d.register_view(text))
            except BaseException as e:  # a failed registration leaves nothing registered
                if not existed and self.d.catalog.get(name) is not None:
                    self.d.catalog.drop(name)
                    self.d.ddl.pop(name.lower(), None)
                if isinstance(e, RecursionError):
                    raise _too_deep() from None
                raise
            self.journal.log("register_view", ddl=text)
            return out

    def list_views(self) -> list[dict[str, Any]]:
        with self.lock:
            return [self._view_out(v) for v in self.d.catalog.entries() if isinstance(v, ViewDef)]

    def _view(self, name: str) -> ViewDef:
        v = self.d.catalog.get(name)
        if not isinstance(v, ViewDef):
            raise ProblemError(404, "unknown_view", f"no view named '{name}'")
        return v

    def get_view(self, name: str) -> dict[str, Any]:
        with self.lock:
            return self._view_out(self._view(name))

    def drop_view(self, name: str) -> None:
        with self.lock:
            v = self._view(name)
            self.d.drop_view(v.name)
            self.journal.log("drop_view", name=v.name)

    # ------------------------------------------------------------ subscriptions
    def subscribe(
        self,
        qid: int,
        fmt: str,
        loop: asyncio.AbstractEventLoop,
        snapshot: bool = False,
        follow: bool = True,
        capacity: int | None = None,
        after: int | None = None,
    ) -> tuple[Subscriber | None, ResultChunk]:
        """(subscriber attached to the query's results, or None when not following; the snapshot
        chunk, empty unless asked for). Both are taken under the lock right after a publish, so the
        snapshot (the engine's, at the instant the results are final through) and the deltas that
        follow it line up exactly. With `after`, the chunk is instead the published elements with ts >
        `after` (the retained history), lined up the same way; 410 `history_gone` when they are no
        longer all retained. 409 `query_inactive` / `snapshot_unavailable` otherwise."""
        with self.lock:
            h = self._query(qid)
            if not h.active or h.pnode is None:
                raise ProblemError(
                    409,
                    "query_inactive",
                    f"query {qid} is inactive: activate it (PATCH "
                    f'/queries/{qid} with {{"active": true}}) to stream its results',
                )
            pub = self.fanout.pubs.get(qid) or self.fanout.add(h)
            self.fanout.publish()
            b = Batch.empty([a.type for a in h.schema])
            if after is not None:
                try:
                    b = self.fanout.resume(pub, after)
                except HistoryGone as e:
                    raise ProblemError(
                        410,
                        "history_gone",
                        f"query {qid}: results after instant {after} are no longer retained (the oldest instant a "
                        f"resume may start after is {e.oldest}); subscribe with snapshot=true instead",
                        oldest=e.oldest,
                    ) from None
            elif snapshot and h.kind == "relation":
                try:
                    b = self.fanout.snapshot(pub)
                except SnapshotUnavailable as e:
                    raise ProblemError(
                        409,
                        "snapshot_unavailable",
                        f"query {qid}: {e}; subscribe without snapshot=true for its changes from now on",
                    ) from None
            snap = ResultChunk(b, pub.through)
            s = None
            if follow:
                s = self.fanout.attach(pub, fmt, loop, capacity or self.settings.subscriber_buffer)
            self.fanout.subscriptions_total += 1
            return s, snap

    def query_info(self, qid: int) -> tuple[str, list[tuple[str, str]]]:
        with self.lock:
            h = self._query(qid)
            return h.kind, [(a.name, str(a.type)) for a in h.schema]

    # ------------------------------------------------------------ metrics
    def metrics(self) -> dict[str, Any]:
        with self.lock:
            try:
                attribution = self.d.attribution()
            except Exception:
                log.exception("attribution failed")
                attribution = {}
            pubs = self.fanout.pubs
            keys = self.idempotency.sizes()
            return {
                "accepted": dict(self.accepted),
                "rejected": dict(self.rejected),
                "rejected_pushes": dict(self.rejected_pushes),
                "pushes": self.pushes,
                "replayed": dict(self.replayed),
                "lag_disconnects": self.fanout.lag_disconnects,
                "cutoffs": self.fanout.cutoffs,
                "subscriptions_total": self.fanout.subscriptions_total,
                "subscribers": {qid: p.live() for qid, p in pubs.items()},
                "emitted": {qid: p.emitted for qid, p in pubs.items()},
                "buffered": {qid: sum(s.count for s in p.subscribers.values()) for qid, p in pubs.items()},
                "attribution": attribution,
                "run_seconds": self.run_seconds,
                "runs": self.runs,
                "queries": len(self.d.queries),
                "sources": {
                    i.d.name: {
                        "accepted": int(i.accepted),
                        "late": int(getattr(i, "late", 0)),
                        "max_ts": i.max_ts,
                        "idempotency_keys": keys.get(i.d.name.lower(), 0),
                    }
                    for i in self.d.inputs.values()
                },
                "uptime": time.time() - self.started,
                "errors_5xx": self.errors_5xx,
                "spark": self.spark.metrics(),
                "log": self.journal.metrics(),
            }

    def health(self) -> dict[str, Any]:
        """Liveness: a few counters read without the engine lock (safe on the event loop)."""
        return {
            "status": "ok",
            "streams": len(self.d.inputs),
            "queries": len(self.d.queries),
            "subscribers": self.fanout.live(),
            "uptime_seconds": round(time.time() - self.started, 3),
            "persistence": self.persistent,
        }

    def behind(self) -> str | None:
        """Why the engine is too far behind to take more input (None: it is not), read lock-free:
        one engine call running longer than `max_engine_lag`, or `max_pending_pushes` in flight."""
        s = self.settings
        lag = self.lock.held_for()
        if lag > s.max_engine_lag:
            return f"the engine has been busy on one call for {lag:.1f} s (bound {s.max_engine_lag:g} s)"
        if self.pending_pushes >= s.max_pending_pushes:
            return f"{self.pending_pushes} pushes in flight (bound {s.max_pending_pushes})"
        return None

    def readiness(self) -> dict[str, Any]:
        """Readiness: the engine's lag, read lock-free (`ready` false when `behind()`)."""
        why = self.behind()
        return {
            "ready": why is None,
            "reason": why,
            "engine_busy_seconds": round(self.lock.held_for(), 3),
            "lock_waiters": self.lock.waiting,
            "pending_pushes": self.pending_pushes,
            "max_engine_lag": self.settings.max_engine_lag,
            "max_pending_pushes": self.settings.max_pending_pushes,
            "suspended_queries": sum(1 for h in list(self.d.queries.values()) if h.suspended),
        }
