"""The `Dsms` facade: the one entry point of the engine (server, Spark bridge, CLI and tests use it).

Register streams, relations, views and queries at any time (each query merges into the one shared
global plan, `engine.planner`); push input; heartbeat; run; subscribe to results (optionally
starting from the current relation); activate, deactivate, weigh and deregister queries; read and
set control tables (`engine.control`); persist the catalog and plans (`engine.persist`).
Input is accepted or rejected whole, with the offending row named.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, fields, is_dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from cqlstream.cql import ast, ddl
from cqlstream.cql.analyzer import AnalyzeOptions
from cqlstream.cql.approx.spec import ApproxSpec
from cqlstream.cql.catalog import UNIT_MS, Catalog, SourceDef, ViewDef
from cqlstream.cql.errors import CqlError
from cqlstream.cql.frontend import CompiledQuery, compile_query
from cqlstream.cql.functions import FunctionRegistry
from cqlstream.cql.logical import nodes as L
from cqlstream.cql.logical.explain import explain_partitioning, explain_plan
from cqlstream.cql.logical.partitioning import Partitioning, partitioning
from cqlstream.cql.logical.rewrites import RewriteMemo
from cqlstream.cql.parser import parse_query, parse_script
from cqlstream.cql.printer import to_cql
from cqlstream.engine import column_pruning
from cqlstream.engine.adaptive.config import AdaptiveConfig
from cqlstream.engine.approx.admission import Admission
from cqlstream.engine.approx.config import OverloadConfig
from cqlstream.engine.batch import Batch, from_rows
from cqlstream.engine.errors import EngineError, InputError, InUseError, KnobError
from cqlstream.engine.exprs import Evaluator
from cqlstream.engine.inputs import RelationInput, StreamInput, rows_to_batch
from cqlstream.engine.kconstraints import attach as kconstraints
from cqlstream.engine.limits import LimitGuard, Overdraft
from cqlstream.engine.operators import summary_mode
from cqlstream.engine.operators.base import IdSource
from cqlstream.engine.planner import INF, EngineOptions, PhysicalPlan, PNode
from cqlstream.engine.queues import Queue, Reader
from cqlstream.engine.scheduler import RoundRobin
from cqlstream.engine.sharing import lift_filters
from cqlstream.engine.synopsis_plan import SynopsisJoinPlan, synopsis_node, synopsis_plan

if TYPE_CHECKING:
    from cqlstream.engine.approx.admission import Decision
    from cqlstream.engine.approx.controller import Controller
    from cqlstream.engine.attached import Attached
    from cqlstream.engine.boundedness import Verdict
    from cqlstream.engine.persist import PlanFile
    from cqlstream.engine.sysstream import SysPublisher


@dataclass
class QueryHandle:
    """A registered continuous query (or a view's subplan kept running for queries reading it)."""

    id: int
    text: str
    compiled: CompiledQuery
    pnode: PNode | None
    name: str | None = None
    active: bool = True
    weight: float = 1.0
    share: bool = True
    complete_from: float | None = None  # results are exact from this instant (None: from the start)
    subscriptions: list[Subscription] = field(default_factory=list)
    ast: object = None  # the parsed query
    reads: frozenset[str] = frozenset()  # lower-case names of the sources and views it reads
    memory_limit: int | None = None  # knob: bytes of state it may hold (None: the engine's query_memory_limit)
    cpu_limit: float | None = None  # knob: engine seconds it may take in one run (None: the engine's query_cpu_limit)
    suspended: str | None = None  # why the engine suspended it (over a limit); None: not suspended
    synopsis_joins: bool = True  # a join judged bounded runs as a synopsis join (EngineOptions.synopsis_joins)
    _verdict: tuple[tuple[bool, bool], Verdict] | None = field(default=None, repr=False, compare=False)
    _run: tuple[tuple[bool, bool], L.Plan] | None = field(default=None, repr=False, compare=False)

    @property
    def state(self) -> str:
        """`active`, `inactive` (by the user) or `suspended` (by the engine: see `suspended`)."""
        return "active" if self.active else ("suspended" if self.suspended else "inactive")

    @property
    def queue(self) -> Queue | None:
        return None if self.pnode is None else self.pnode.queue

    @property
    def kind(self) -> str:
        return self.compiled.kind

    @property
    def schema(self) -> tuple[L.Attribute, ...]:
        return self.compiled.schema

    @property
    def complete(self) -> bool:
        """False when the query started late over a window that needs history it cannot have
        (Rows/Partition/Unbounded): its results then reflect only the data since registration."""
        return self.complete_from != INF

    @property
    def memory_verdict(self) -> Verdict:
        """The bounded-memory verdict with its procedure, rule, reason and synopsis
        (engine/boundedness.py), decided once per query."""
        how = (self.share, self.synopsis_joins)
        if self._verdict is None or self._verdict[0] != how:
            # the verdict machinery (engine/boundedness.py, cql/boundedness/) loads when asked
            from cqlstream.engine.boundedness import decide

            self._verdict = (how, decide(self._shared_plan, self.physical_plan))
        return self._verdict[1]

    @property
    def bounded_memory(self) -> bool | None:
        """True: bounded; None: bounded for a bounded arrival rate; False: grows with the input."""
        return self.memory_verdict.bounded

    @property
    def bounded_memory_note(self) -> str:
        return self.memory_verdict.note

    @property
    def partitioning(self) -> Partitioning:
        """The key its state partitions on, or why none (cql/logical/partitioning.py)."""
        return partitioning(self.compiled.plan)

    @property
    def _shared_plan(self) -> L.Plan:
        """The query's plan as shared (with sharing, selections stay above windows)."""
        return lift_filters(self.compiled.plan) if self.share else self.compiled.plan

    @property
    def physical_plan(self) -> L.Plan:
        """The logical plan the engine runs: the shared plan, or one synopsis join when the
        characterization judges the query a bounded join (engine/synopsis_plan.py)."""
        how = (self.share, self.synopsis_joins)
        if self._run is None or self._run[0] != how:
            plan = self._shared_plan
            self._run = (how, (synopsis_plan(plan) if self.synopsis_joins else None) or plan)
        return self._run[1]

    def completeness(self) -> dict[str, Any]:
        cf = self.complete_from
        return {"complete_from": None if cf is None or cf == INF else int(cf), "complete": self.complete}

    def explain(self) -> str:
        """The query's EXPLAIN, plus the plan it runs as when sharing lifts its selections above
        windows (docs/plan-manager.md) and, once merged, from when its results are exact."""
        text = self.compiled.explain()
        text += "\n" + "\n".join(self.memory_verdict.lines())
        shared = self.physical_plan
        if shared != self.compiled.plan:
            why = "shared: selections stay above windows so queries share them"
            node = synopsis_node(shared)
            if isinstance(node, SynopsisJoinPlan):
                why = "a synopsis join: judged bounded, it keeps constant-size synopses (docs/bounded-memory.md)"
            elif node is not None:
                kept = "representatives and partial extremes" if node.representatives else "partial aggregates"
                why = f"a synopsis aggregate: judged bounded, it keeps {kept} per bucket (docs/bounded-memory.md)"
            text += f"\nRuns as ({why}):\n" + "\n".join("  " + line for line in explain_plan(shared).splitlines())
        text += "\n" + explain_partitioning(self.compiled.plan)
        text += "".join("\n" + line for line in kconstraints.explain_lines(self))
        text += "".join("\n" + line for line in summary_mode.explain_lines(self.pnode))
        cf = self.completeness()
        if self.pnode is not None and cf["complete_from"] is not None:
            text += f"\nResults exact from instant {cf['complete_from']} (registered while data flowed)."
        elif self.pnode is not None and not cf["complete"]:
            text += "\nStarted late without the history its windows need: results reflect data since registration."
        return text


@dataclass(frozen=True)
class InputTime:
    """Where a source's time stands (what an adapter feeding it needs to know): its slack, the
    largest timestamp accepted, the instant below which rows are late (slack mode), late rows."""

    slack: int
    max_ts: int | None
    floor: int | None
    late: int


@dataclass
class Subscription:
    """A cursor on a query's result queue; `poll()` returns the results made final since last call.

    With `snapshot=True` the first poll starts with the current relation as `+` rows at the
    current instant. A subscription ends (`closed`, with `reason`) when its query is deactivated
    or deregistered, or when `close()` is called."""

    query: QueryHandle
    reader: Reader | None
    closed: bool = field(default=False)
    reason: str = ""

    def poll(self) -> Batch:
        """Results that are final (ts ≤ the queue's watermark) and not yet returned."""
        r = self.reader
        if r is None or r.q.watermark is None:
            return Batch.empty([a.type for a in self.query.schema])
        return r.take(r.q.watermark)

    @property
    def final_through(self) -> int | None:
        return None if self.reader is None else self.reader.q.watermark

    def close(self, reason: str = "closed by the subscriber") -> None:
        if self.reader is not None:
            self.reader.q.detach(self.reader)
            self.reader = None
        if not self.closed:
            self.closed, self.reason = True, reason
        if self in self.query.subscriptions:
            self.query.subscriptions.remove(self)


SYS_STREAM = "SysStream"


class Dsms:
    def __init__(
        self,
        *,
        compat: bool = False,
        functions: FunctionRegistry | None = None,
        scheduler: RoundRobin | None = None,
        clock: Callable[[], float] = time.time,
        silence_timeout: float | None = None,
        skew: int | None = None,
        binary_joins: bool = False,
        share: bool = True,
        data_dir: str | Path | None = None,
        sys_stream: bool = True,
        query_memory_limit: int | None = None,
        query_cpu_limit: float | None = None,
        adaptive: AdaptiveConfig | None = None,
        overload: OverloadConfig | None = None,
        synopsis_joins: bool = True,
        recent_tails: bool = True,
        cpu_clocks: bool = True,
        prune_columns: bool = True,
    ) -> None:
        """`clock()` gives wall seconds (system-timestamped streams, silence timeout);
        `silence_timeout`: a source silent that long is advanced to the others' time (CIDR §2.3);
        `skew`: streams are known to be at most this many units apart (thesis §2.2.5), so each
        source is complete through (largest ts on any source) − skew − 1;
        `share`: queries share common subplans (off: each query gets its own operators);
        `data_dir`: the catalog and plans persist in `data_dir/plan.json` and are restored here;
        `sys_stream`: register `SysStream`, on which entities publish their control tables;
        `query_memory_limit`: bytes of state a query may hold unless its own `memory_limit` knob
        says otherwise, `query_cpu_limit`: seconds of engine time it may take in one run unless
        its `cpu_limit` knob says otherwise; a query over a limit is suspended (engine/limits.py).
        None: no limit. `adaptive`: how selections order their conjuncts (default A-Greedy;
        engine/adaptive/config.py). `overload`: the overload controller's limits; enabled, it samples
        queries' input when queues or CPU pass them (engine/approx/controller.py; default off).
        `synopsis_joins`: a join of streams read whole that the bounded-memory characterization
        judges bounded runs as one constant-memory synopsis join (docs/bounded-memory.md); False:
        with windows and the ordinary join. `recent_tails`: queues keep their last rows for
        `peek`; False (a host nobody peeks through, e.g. a script run) saves a copy per push.
        `cpu_clocks`: operators measure each call's CPU time (`Counters.cpu`: CPU limits, control
        tables); False (a script run) saves a clock read per call. Forced on with a CPU limit.
        `prune_columns`: operators fill only the output columns some consumer reads, NULL in the
        others (engine/column_pruning.py; a peek at such an operator names them)."""
        self.clock = clock
        self.silence_timeout = silence_timeout
        self.skew = skew
        self.notices: list[str] = []
        self._last_seen: dict[str, float] = {}
        self.catalog = Catalog(functions)
        self.compat = compat
        # the rewrites' results per plan node, kept between queries: a view read by several
        # queries is the same node in each and is rewritten once (cql/logical/rewrites)
        self._rewrites = RewriteMemo()
        self.share = share
        self.ids = IdSource()
        options = EngineOptions(
            compat=compat,
            binary_joins=binary_joins,
            adaptive=adaptive or AdaptiveConfig(),
            synopsis_joins=synopsis_joins,
            recent_tails=recent_tails,
            cpu_clocks=cpu_clocks or query_cpu_limit is not None,
            prune_columns=prune_columns,
        )
        self.plan = PhysicalPlan(self.ids, Evaluator(self.catalog.functions), options)
        self.plan.share_policy = self._join_share_policy
        self.unshare_ratio = 10.0
        self.inputs: dict[str, StreamInput | RelationInput] = {}
        self.queries: dict[int, QueryHandle] = {}
        self.ddl: dict[str, str] = {}  # source/view name (lower) → its register statement, for persistence
        self.knobs: dict[str, dict[str, Any]] = {}  # entity id → knob values set through set_knob (persisted)
        self.attached: dict[str, Attached] = {}  # entity id → an entity outside the plan (engine/attached.py)
        self._next_id = 1  # query ids are never reused (persisted)
        self.scheduler = scheduler or RoundRobin()
        self.query_memory_limit = query_memory_limit
        self.query_cpu_limit = query_cpu_limit
        self.guard = LimitGuard(self)
        self.suspensions = 0  # queries suspended over a limit since start
        self.new_suspensions: list[tuple[int, str]] = []  # (query id, reason) not yet taken by the host's log
        self.ended = False
        self.sys: SysPublisher | None = None
        if sys_stream:
            from cqlstream.engine.sysstream import SysPublisher

            self.sys = SysPublisher(self)
        self.overload = OverloadConfig()
        self.approx: Controller | None = None  # the overload controller, while approximation is on
        self.approx_on_tick = True  # `tick()` runs it (a host that logs its changes runs it itself)
        self.admission = Admission(self)  # refuses rows at push time over the queue memory limit
        if overload is not None:
            from cqlstream.engine.approx import knobs as approx_knobs

            approx_knobs.configure(self, overload)
        self.plan_file: PlanFile | None = None
        if data_dir is not None:
            from cqlstream.engine.persist import PlanFile

            self.plan_file = PlanFile(data_dir)
            self.plan_file.restore(self)

    # ------------------------------------------------------------ registration
    def execute(self, text: str) -> list[SourceDef | ViewDef | QueryHandle]:
        """Run a `;`-separated script of registrations and queries; returns what each created."""
        out = []
        for stmt in parse_script(text):
            try:
                out.append(self._statement(stmt, text))
            except CqlError as e:
                raise e.with_text(text) from None
        return out

    def _statement(self, stmt: ast.Statement, text: str) -> SourceDef | ViewDef | QueryHandle:
        if isinstance(stmt, ast.RegisterSource):
            return self.register_source(stmt)
        if isinstance(stmt, ast.RegisterView):
            return self.register_view(stmt)
        return self.register_query(stmt, text=text)

    def register_source(self, stmt: ast.RegisterSource | str) -> SourceDef:
        if isinstance(stmt, str):
            text = stmt
            (parsed,) = parse_script(text)
            if not isinstance(parsed, ast.RegisterSource):
                raise CqlError("not_ddl", "expected register stream/relation")
            try:
                return self.register_source(parsed)
            except CqlError as e:
                raise e.with_text(text) from None
        d = ddl.register_source(self.catalog, stmt)
        if d.kind == "stream":
            q = self.plan.source_queue(d.plan())
            self.inputs[d.name.lower()] = StreamInput(d, q, self.ids)
        else:
            inp = RelationInput(d, self.plan.source_queue(d.plan()), self.ids, clock=self.t0)
            self.plan.source_queue(d.plan(), snapshot=inp)  # the same queue; its snapshots come from `inp`
            self.inputs[d.name.lower()] = inp
        self.ddl[d.name.lower()] = to_cql(stmt)
        self._save()
        return d

    def register_view(self, view: str | ast.RegisterView) -> ViewDef:
        text = view if isinstance(view, str) else None
        if isinstance(view, str):
            (stmt,) = parse_script(view)
            if not isinstance(stmt, ast.RegisterView):
                raise CqlError("not_ddl", "expected register view")
        else:
            stmt = view
        try:
            v = ddl.register_view(self.catalog, stmt, text)
        except CqlError as e:
            raise (e.with_text(text) if text else e) from None
        self.ddl[v.name.lower()] = to_cql(stmt)
        self._save()
        return v

    def _users_of(self, name: str) -> list[str]:
        """Queries and views that read source or view `name`."""
        low = name.lower()
        users = [f"query {h.id}" for h in self.queries.values() if low in h.reads]
        users += [
            f"view {e.name}"
            for e in self.catalog.entries()
            if isinstance(e, ViewDef) and e.name.lower() != low and low in names_read(e.query)
        ]
        return users

    def drop_source(self, name: str) -> None:
        """Unregister a stream or relation; refused (InUseError) while queries or views read it."""
        d = self.catalog.get(name)
        if not isinstance(d, SourceDef):
            raise EngineError("unknown_source", f"no stream or relation '{name}'")
        if self.sys is not None and d is self.sys.input.d:
            raise InUseError(f"'{d.name}' is built in (the engine publishes its control tables on it)", ["engine"])
        users = self._users_of(d.name)
        if users:
            raise InUseError(f"'{d.name}' is used by {', '.join(users)}", users)
        self.catalog.drop(d.name)
        self.inputs.pop(d.name.lower(), None)
        self.plan.drop_source(d.plan())
        self.ddl.pop(d.name.lower(), None)
        self._save()

    def drop_view(self, name: str) -> None:
        v = self.catalog.get(name)
        if not isinstance(v, ViewDef):
            raise EngineError("unknown_view", f"no view '{name}'")
        users = self._users_of(v.name)
        if users:
            raise InUseError(f"view '{v.name}' is used by {', '.join(users)}", users)
        self.catalog.drop(v.name)
        self.ddl.pop(v.name.lower(), None)
        self._save()

    def compile(self, query: str | ast.Query) -> CompiledQuery:
        return compile_query(
            query, self.catalog, options=AnalyzeOptions(stream_compat=self.compat), memo=self._rewrites
        )

    def register_query(
        self,
        query: str | ast.Query,
        *,
        name: str | None = None,
        text: str | None = None,
        active: bool = True,
        weight: float = 1.0,
        share: bool | None = None,
        query_id: int | None = None,
        approximate: object = None,
    ) -> QueryHandle:
        """Compile `query` and merge it into the running plan. The handle's `complete_from` says
        from which instant its results are exact (None: from the start; a late query over a
        shared window starts from the window's current contents). `approximate` ("static" or an
        ApproxSpec object, docs/approximation.md) approves static approximation; default exact."""
        text = query if isinstance(query, str) else (text or to_cql(query))
        tree = parse_query(query) if isinstance(query, str) else query
        try:
            spec = ApproxSpec.parse(approximate)
            options = AnalyzeOptions(stream_compat=self.compat)
            compiled = compile_query(tree, self.catalog, options=options, final=not spec.static, memo=self._rewrites)
            if spec.static:
                from cqlstream.cql.approx.static import approximate_query  # its rules load when approved

                compiled = approximate_query(compiled, spec, self.catalog)
        except CqlError as e:
            raise (e.with_text(query) if isinstance(query, str) else e) from None
        if query_id is None:
            query_id = self._next_id
            self._next_id += 1
        else:
            self.reserve_query_ids(query_id + 1)
        if query_id in self.queries:
            raise EngineError("query_id_taken", f"query id {query_id} is taken")
        h = QueryHandle(
            query_id,
            text,
            compiled,
            None,
            name,
            active,
            float(weight),
            self.share if share is None else bool(share),
            ast=tree,
            reads=frozenset(names_read(tree)),
            synopsis_joins=getattr(self.plan.options, "synopsis_joins", True),
        )
        self.queries[h.id] = h
        if active:
            try:
                self._attach(h)
            except BaseException:
                del self.queries[h.id]
                self.plan.release(h.id)
                raise
        self._save()
        return h

    def _join_share_policy(self, pn: PNode, user: int) -> str | None:
        """CIDR §3.2: a shared operator runs at the pace of its slowest consumer. Consumers read at
        different rates here only under a work budget with the weighted scheduler, where a
        query's weight sets its pace: a join whose queries' weights differ from the new query's
        by more than `unshare_ratio` is then left unshared."""
        s = self.scheduler
        h = self.queries.get(user)
        if h is None or s.name != "weighted" or s.budget is None:
            return None
        others = sorted({self.queries[u].weight for u in pn.users if u in self.queries and u != user})
        if not others:
            return None
        lo, hi = min(others + [h.weight]), max(others + [h.weight])
        if hi / lo <= self.unshare_ratio:
            return None
        users = sorted(u for u in pn.users if u in self.queries)
        return (
            f"join not shared with queries {users}: their weights {others} and this query's {h.weight:g} "
            f"differ by more than {self.unshare_ratio:g}x under the weighted scheduler, so a shared join "
            f"would run at the slowest consumer's pace (CIDR §3.2)"
        )

    def peek_next_query_id(self) -> int:
        return self._next_id

    def reserve_query_ids(self, below: int) -> None:
        """Make sure new queries get ids ≥ `below`."""
        self._next_id = max(self._next_id, int(below))

    def _attach(self, h: QueryHandle) -> None:
        if any(i.first is not None for i in self.inputs.values()):
            self._quiesce()
        pn = self.plan.build(h.physical_plan, h.id, share=h.share)
        conflicts = kconstraints.column_conflicts(self, pn)
        pruned = column_pruning.conflicts(self.plan, self._outputs(pn))
        if conflicts or pruned:  # it reads columns a running operator no longer stores or produces
            self.plan.release(h.id)
            closed: dict[object, str] = {}
            for p in self.plan.nodes.values():
                if any(kconstraints.reaches(p, c) for c in conflicts):
                    closed[p.key] = "not shared: a k-Mon join below eliminated columns this query reads"
                elif any(kconstraints.reaches(p, c) for c in pruned):
                    closed[p.key] = "not shared: an operator below produced rows without columns this query reads"
            self.plan.closed[h.id] = closed
            try:
                pn = self.plan.build(h.physical_plan, h.id, share=h.share)
            finally:
                self.plan.closed.pop(h.id, None)
        existed = pn.flowed
        pn = self.plan.attachable(pn, h.id, h.share)
        h.pnode = pn
        kconstraints.bind(self, h)  # joins that declared k-constraints apply to keep less state
        reads = column_pruning.choose(self.plan, self._outputs())  # operators fill only the columns read above
        kconstraints.choose_columns(self, reads)  # and k-Mon joins keep only those (the union over the queries)
        h.complete_from = self.plan.late_complete_from(pn) if existed else pn.complete_from
        if not pn.is_stream and not pn.flowed:
            self.plan.add_result_store(pn)
        self.guard.invalidate()

    def _outputs(self, also: PNode | None = None) -> list[PNode]:
        """The output nodes of the active queries (and `also`), which are read whole."""
        return [h.pnode for h in self.queries.values() if h.pnode is not None] + ([also] if also else [])

    def _quiesce(self) -> None:
        """Run every operator through its inputs' watermarks, so that all state is consistent
        with the queues' ends (what a late query's snapshot relies on)."""
        budget = self.scheduler.budget
        if budget is not None:
            self.scheduler.budget = None
        try:
            self.run()
        finally:
            if budget is not None:
                self.scheduler.budget = budget

    def deregister(self, query_id: int) -> None:
        """Remove a query; every operator, queue and synopsis no other query uses is freed."""
        h = self.queries.pop(query_id)
        self._detach(h, "query deregistered")
        self._save()

    def _detach(self, h: QueryHandle, reason: str) -> None:
        for sub in list(h.subscriptions):
            sub.close(reason)
        self.plan.release(h.id)
        h.pnode = None
        self.guard.invalidate()

    def set_active(self, query_id: int, active: bool) -> QueryHandle:
        """An inactive query keeps its compiled plan but no operators: it produces nothing and
        costs nothing; reactivating merges it again (its `complete_from` says from when)."""
        h = self.queries[query_id]
        active = bool(active)
        h.suspended = None  # the user's word replaces the engine's
        if active != h.active:
            h.active = active
            if active:
                self._attach(h)
            else:
                self._detach(h, "query deactivated")
            self._save()
        return h

    def suspend(self, query_id: int, reason: str) -> None:
        """Release an active query's operators as deactivating does, recording why (state
        `suspended`); its subscriptions end with `suspended: <reason>`. Activating it again (after
        raising the limit) merges it again like any inactive query."""
        h = self.queries[query_id]
        if not h.active:
            return
        h.active = False
        h.suspended = reason
        self.suspensions += 1
        self.new_suspensions.append((h.id, reason))
        self._detach(h, f"suspended: {reason}")
        self.notices.append(f"query {h.id} suspended: {reason}")
        self._save()

    def set_weight(self, query_id: int, weight: float) -> QueryHandle:
        w = float(weight)
        if not w > 0 or w == float("inf"):
            raise KnobError("weight must be a positive number")
        h = self.queries[query_id]
        h.weight = w
        self._save()
        return h

    def subscribe(self, query_id: int, snapshot: bool = False) -> Subscription:
        """A cursor on the query's results from now on; with `snapshot`, first the current
        relation (a relation-valued query) as `+` rows at the current instant."""
        h = self.queries[query_id]
        if h.pnode is None:
            sub = Subscription(h, None, True, "query is inactive")
            return sub
        pn = h.pnode
        prefix = None
        if snapshot and not pn.is_stream and pn.flowed:
            self._quiesce()
            snap = self.plan.snapshot(pn)
            prefix = None if snap is None else snap[0]
        sub = Subscription(h, pn.queue.reader(prefix=prefix))
        h.subscriptions.append(sub)
        return sub

    def explain(self, query: int | str) -> str:
        if isinstance(query, int):
            return self.queries[query].explain()
        from cqlstream.engine.boundedness import explain as explain_with_verdict

        return explain_with_verdict(self.compile(query))

    def explain_plan(self, fmt: str = "text") -> str | dict[str, Any]:
        """The global plan: text, or a JSON-able graph (nodes = entities with their control
        tables, edges = queues)."""
        from cqlstream.engine import plan_view

        return plan_view.explain_plan(self, fmt)

    def attach(self, entity: Attached) -> None:
        """List `entity` (e.g. a Spark source) among the control tables; replaces one of the same id."""
        self.attached[entity.eid] = entity

    def detach(self, eid: str) -> None:
        self.attached.pop(eid, None)

    def control_tables(self) -> list[dict[str, Any]]:
        from cqlstream.engine import control

        return control.tables(self)

    def control_table(self, entity_id: str) -> dict[str, Any]:
        from cqlstream.engine import control

        return control.table(self, entity_id)

    def set_knob(self, entity_id: str, knob: str, value: object) -> dict[str, Any]:
        from cqlstream.engine import control

        out = control.set_knob(self, entity_id, knob, value)
        self._save()
        return out

    def attribution(self) -> dict[int, dict[str, float]]:
        from cqlstream.engine import control

        return control.attribution(self)

    def peek(self, entity_id: str, n: int = 20) -> dict[str, Any]:
        from cqlstream.engine import plan_view

        return plan_view.peek(self, entity_id, n)

    def _save(self) -> None:
        if self.plan_file is not None and not self.plan_file.restoring:
            self.plan_file.save(self)

    # ------------------------------------------------------------ input
    def _input(self, name: str) -> StreamInput | RelationInput:
        inp = self.inputs.get(name.lower())
        if inp is None:
            if self.sys is not None and name.lower() == SYS_STREAM.lower():
                raise InputError(f"'{SYS_STREAM}' is published by the engine itself: it takes no input")
            raise InputError(f"unknown stream or relation '{name}'")
        if self.ended:
            raise InputError("input has ended")
        return inp

    def _now_units(self, d: SourceDef) -> int:
        return int(self.clock() * 1000) // UNIT_MS[d.time_unit]

    def push(
        self,
        name: str,
        rows: Sequence[Sequence[object]],
        ts: npt.ArrayLike | None = None,
        signs: npt.ArrayLike | None = None,
    ) -> int:
        """Push Python rows with their timestamps (and signs for relations); all or nothing.

        A system-timestamped stream (`with (timestamp = system)`) takes no `ts`: arrivals are
        stamped with the clock in the stream's time unit."""
        inp = self._input(name)
        if inp.d.timestamp == "system":
            if ts is not None:
                raise InputError(f"stream '{inp.d.name}' is system-timestamped: push rows without timestamps")
            ts = [self._now_units(inp.d)] * len(rows)
        elif ts is None:
            raise InputError(f"'{inp.d.name}' is application-timestamped: every row needs a timestamp")
        ts = np.asarray(ts, dtype=np.int64)
        if len(ts) != len(rows):
            raise InputError(f"{len(rows)} rows but {len(ts)} timestamps")
        if signs is not None and isinstance(inp, StreamInput):
            raise InputError(f"'{inp.d.name}' is a stream: its tuples carry no sign")
        if signs is None and isinstance(inp, RelationInput):
            signs = np.ones(len(rows), np.int8)
        if signs is not None:
            signs = np.asarray(signs)
            if not np.all((signs == 1) | (signs == -1)):
                raise InputError("signs must be +1 or -1", int(np.argmax((signs != 1) & (signs != -1))), "sign")
        return self.push_batch(name, rows_to_batch(rows, inp.types, ts, signs))

    def push_batch(
        self,
        name: str,
        batch: Batch,
        *,
        drop_late: bool = False,
        decision: Decision | None = None,
        replayed: bool = False,
    ) -> int:
        """Push a columnar batch (already typed: the fast path used by file readers and Arrow).
        Returns the number of tuples accepted (load shedding by a source's `sampling_rate`
        knob drops some of them afterwards, counted as `shed`; admission control under overload
        refuses some, counted as `refused` too: engine/approx/admission.py, whose decision for this
        push is `self.admission.last` afterwards).

        `drop_late`: rows older than the source's time (ts < its largest ts, on a source without a
        slack) are dropped and counted in its `late` counter instead of rejecting the push; they
        count as accepted, like the rows a stream with a slack drops as late itself. The counter
        moves only if the rest of the push is accepted. `replayed`: a push replayed from a log,
        with the admission `decision` the live push made (not decided again)."""
        inp = self._input(name)
        n = len(batch)
        late = 0
        keep = inp.in_time(batch) if drop_late else None
        if keep is not None:
            late = int(n - np.count_nonzero(keep))
            batch = batch.take(keep)
        offered = batch
        if isinstance(inp, StreamInput):
            inp.check(batch)  # all or nothing: rows shed or refused below must not hide a disorder
        batch = self.admission.admit(name, inp, batch, decision, replayed)
        inp.push(batch)
        if len(batch) < len(offered) and isinstance(inp, StreamInput):
            # rows shed or refused still move the stream's time, as if they were pushed: a window
            # waiting for it must not wait for rows that will never come
            inp.heartbeat(int(offered.ts.max()) - (inp.d.slack or 0))
        inp.late += late
        self._after_input(name)
        return n

    def input_time(self, name: str) -> InputTime:
        """Where source `name`'s time stands (see InputTime)."""
        inp = self._input(name)
        slack = inp.d.slack if isinstance(inp, StreamInput) else 0
        floor = inp.floor if isinstance(inp, StreamInput) else None
        return InputTime(slack, inp.max_ts, floor, inp.late)

    def heartbeat(self, name: str, t: int) -> None:
        """Time on source `name` reached t: no element with ts < t will come."""
        self._input(name).heartbeat(int(t))
        self._after_input(name)

    def _after_input(self, name: str) -> None:
        self._last_seen[name.lower()] = self.clock()
        if self.skew is not None:
            top = max((i.max_ts for i in self.inputs.values() if i.max_ts is not None), default=None)
            if top is not None:
                for key, i in self.inputs.items():
                    if key != name.lower() and (i.max_ts is None or i.max_ts < top - self.skew):
                        i.heartbeat(top - self.skew)

    def tick(self) -> None:
        """Clock-driven time: heartbeats for system-timestamped streams, and the silence timeout
        for application-timestamped sources (each advance is recorded in `notices`)."""
        now = self.clock()
        for i in self.inputs.values():
            if i.d.timestamp == "system":
                i.heartbeat(self._now_units(i.d))
        if self.approx is not None and self.approx_on_tick:
            self.approx.tick()
        if self.sys is not None:
            self.sys.publish()
            self.sys.heartbeat()
        if self.silence_timeout is None:
            return
        top = max((i.max_ts for i in self.inputs.values() if i.max_ts is not None), default=None)
        for key, i in self.inputs.items():
            if i.d.timestamp == "system" or top is None:
                continue
            last = self._last_seen.get(key)
            if (last is None or now - last >= self.silence_timeout) and (i.max_ts is None or i.max_ts < top):
                i.heartbeat(top)
                self._last_seen[key] = now
                self.notices.append(
                    f"source '{i.d.name}' silent for {self.silence_timeout:g} s: its time was advanced to {top}"
                )

    def t0(self) -> int | None:
        firsts = [i.first for i in self.inputs.values() if i.first is not None]
        return min(firsts) if firsts else None

    def end(self) -> None:
        """End of input: every source is complete through the last instant seen; flush results."""
        lasts = [i.max_ts for i in self.inputs.values() if i.max_ts is not None]
        if lasts:
            last = max(lasts)
            for i in self.inputs.values():
                i.end(last)
        if self.sys is not None and self.sys.input.max_ts is not None:
            self.sys.input.end(self.sys.input.max_ts)
        self.ended = True
        self.run()

    # ------------------------------------------------------------ execution
    def run(self, max_passes: int | None = None) -> int:
        """Run the scheduler until no operator can make progress. A query whose state passes its
        memory limit is suspended as soon as an operator call makes it so; the run goes on for the
        others."""
        guard = self.guard
        if not guard.armed():
            n = self.scheduler.run(self.plan.operators, max_passes)
            self.plan.advance_result_stores()
            return n
        guard.start_run()
        n = self._guarded_run(max_passes, guard.check)
        while guard.over:
            self._suspend_over()
            n += self._guarded_run(max_passes, guard.check if guard.armed() else None)
        self.plan.advance_result_stores()
        if guard.armed() and guard.check():  # result stores took their queues' rows in
            self._suspend_over()
        return n

    def _guarded_run(self, max_passes: int | None, check: Callable[[], bool] | None) -> int:
        """A scheduler run that stops at an operator call abandoned before an allocation over the
        limits of all its queries (engine/limits.py `reserve`): they are then in `guard.over`."""
        try:
            return self.scheduler.run(self.plan.operators, max_passes, check=check)
        except Overdraft as e:
            # a parallel pass may have found others over a limit in the same level: suspend them too
            found = {o.query_id for o in e.overruns}
            self.guard.over = [*e.overruns, *(o for o in self.guard.over if o.query_id not in found)]
            return 0

    def _suspend_over(self) -> None:
        over, self.guard.over = self.guard.over, []
        for o in over:
            self.suspend(o.query_id, o.reason)

    def rows(self, batch: Batch) -> list[tuple]:
        return batch.rows()


__all__ = ["Dsms", "InputError", "QueryHandle", "Subscription", "from_rows"]


def names_read(node: object) -> set[str]:
    """Lower-case names of the sources and views a query AST reads (FROM items, bare names)."""
    out: set[str] = set()
    stack = [node]
    while stack:
        n = stack.pop()
        if isinstance(n, ast.FromItem) and isinstance(n.source, str):
            out.add(n.source.lower())
        elif isinstance(n, ast.TableQuery):
            out.add(n.name.lower())
        if isinstance(n, (list, tuple)):
            stack.extend(n)
        elif is_dataclass(n) and not isinstance(n, type):
            stack.extend(getattr(n, f.name) for f in fields(n) if f.name != "pos")
    return out
