"""Physical planning and the plan manager: logical plan → operators, queues and synopses of one
global plan shared by every query (STREAM, IEEE DE Bulletin §2.2; CIDR §3).

Equal logical subplans hash equal (after `engine.sharing.share_key` normalizes predicates), so a
memo dict makes every query share the operators of the subplans it has in common with the queries
already running. Each physical node counts the queries using it; releasing a query frees the
nodes no other query uses. A query registered while data flows attaches to running queues with a
snapshot of their relation (a window: its extent of the stream's shared window store) and records from which
instant its results are complete (`PNode.complete_from`).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

from cqlstream.cql.logical import nodes as L
from cqlstream.engine import snapshots
from cqlstream.engine.adaptive.config import AdaptiveConfig
from cqlstream.engine.batch import Batch
from cqlstream.engine.errors import EngineError
from cqlstream.engine.exprs import Evaluator
from cqlstream.engine.operators.base import BuildContext, IdSource, Operator
from cqlstream.engine.operators.filterhub import FilterHub, HubMember, eq_const
from cqlstream.engine.operators.registry import operator_class
from cqlstream.engine.queues import Queue, Reader
from cqlstream.engine.sharing import share_key
from cqlstream.engine.synopses import RelationStore, Synopsis
from cqlstream.engine.window_store import WindowStore

if TYPE_CHECKING:
    from cqlstream.cql.types import DataType
    from cqlstream.engine.inputs import RelationInput
    from cqlstream.engine.operators.window import WindowOp


@dataclass(frozen=True)
class EngineOptions:
    """`compat`: STREAM 0.6 behaviour (docs/semantics.md). `binary_joins`: run joins of 3+
    inputs as left-deep trees of binary joins (XJoin style, thesis Table 2.1) instead of one MJoin.
    `adaptive`: how new selections order their conjuncts (engine/adaptive/config.py).
    `synopsis_joins`: run a join the bounded-memory characterization judges bounded with the
    constant-memory synopsis join (engine/synopsis_plan.py); False: the ordinary plan.
    `recent_tails`: every queue keeps a copy of the last rows pushed into it, for a UI's `peek`;
    False (a script run, which nobody peeks at): none, saving a copy per push.
    `cpu_clocks`: every operator call reads the thread's CPU clock for its `Counters.cpu` (CPU
    limits, control tables); False (a script run, which reads neither): none. A read of that
    clock is a system call, ~6 µs on the benchmark machine's VM: ~35 ms of Linear Road's run.
    `prune_columns`: operators fill only the output columns their consumers read, NULL in the
    others (engine/column_pruning.py); False: every column."""

    compat: bool = False
    binary_joins: bool = False
    adaptive: AdaptiveConfig = AdaptiveConfig()
    synopsis_joins: bool = True
    recent_tails: bool = True
    cpu_clocks: bool = True
    prune_columns: bool = True


def _types(node: L.Plan) -> list[DataType]:
    return [a.type for a in node.schema]


INF = math.inf  # "never complete" (e.g. an Unbounded window started late)

Snapshot = tuple[Batch, int]  # a relation as `+` elements at an instant, and that instant
User = int | str  # who uses a physical node: a query id, or "catalog" (a registered source)


@dataclass(eq=False)
class PNode:
    """One physical node of the global plan: the queue carrying a subplan's output, the operator
    writing it (None for a source), and the queries using it (sources belong to the catalog)."""

    key: object
    node: L.Plan
    queue: Queue
    op: Operator | None = None
    inputs: list[PNode] = field(default_factory=list)
    users: set[User] = field(default_factory=set)
    complete_from: float | None = None  # None: complete from the start
    store: RelationStore | None = None  # a result store (relation-valued query outputs)
    note: str = ""

    @property
    def is_stream(self) -> bool:
        return self.node.is_stream

    @property
    def flowed(self) -> bool:
        q = self.queue
        return q.watermark is not None or q.start is not None or q.last_ts is not None


def _max_cf(values: Iterable[float | None]) -> float | None:
    vals = [v for v in values if v is not None]
    return max(vals) if vals else None


class PhysicalPlan:
    """The global plan: operators in producer-before-consumer order, physical nodes memoized by
    shared subplan, each with the set of queries using it."""

    def __init__(self, ids: IdSource, evaluator: Evaluator, options: EngineOptions) -> None:
        self.ids = ids
        self.ev = evaluator
        self.options = options
        self.nodes: dict[object, PNode] = {}
        self.operators: list[Operator] = []
        self.stores: dict[int, Synopsis] = {}  # id(queue) → the synopsis of that relation (a store or a view)
        self.window_stores: dict[tuple, WindowStore] = {}  # (id(stream queue), mode, private) → store
        self.filter_hubs: dict[tuple, FilterHub] = {}  # (id(queue), column) → grouped selection
        self.late_stores: list[RelationStore] = []  # private stores of joins registered while data flowed
        self.source_snapshots: dict[object, Callable[[int | None], Snapshot | None]] = {}  # source key → snapshot
        self.source_readers: dict[object, Callable[[], Snapshot | None]] = {}  # source key → (prefix, at)
        self._eids = {k: itertools.count(1) for k in ("op", "q", "syn")}
        # (existing join PNode, new user) → a reason not to share it, or None (set by the Dsms)
        self.share_policy: Callable[[PNode, Any], str | None] | None = None
        # user → {key of an existing node: why that user must not share it} (set by the Dsms)
        self.closed: dict[Any, dict[object, str]] = {}

    def _eid(self, kind: str) -> str:
        return f"{kind}:{next(self._eids[kind])}"

    # Pickling (server checkpoints): three tables are keyed by id(queue), which a copy of the plan
    # does not keep; they travel keyed by the queue objects themselves and are re-keyed on load.
    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        queues = {id(pn.queue): pn.queue for pn in self.nodes.values()}
        queues.update((id(v.queue), v.queue) for v in self.stores.values())
        queues.update((id(v.queue), v.queue) for v in self.window_stores.values())
        queues.update((id(h.inputs[0]), h.inputs[0]) for h in self.filter_hubs.values())
        state["stores"] = [(queues[k], v) for k, v in self.stores.items() if k in queues]
        state["window_stores"] = [((queues[k[0]], *k[1:]), v) for k, v in self.window_stores.items() if k[0] in queues]
        state["filter_hubs"] = [((queues[k[0]], *k[1:]), v) for k, v in self.filter_hubs.items() if k[0] in queues]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        state["stores"] = {id(q): v for q, v in state["stores"]}
        state["window_stores"] = {(id(k[0]), *k[1:]): v for k, v in state["window_stores"]}
        state["filter_hubs"] = {(id(k[0]), *k[1:]): v for k, v in state["filter_hubs"]}
        self.__dict__.update(state)

    def store(self, q: Queue, producer: Operator | None = None) -> Synopsis:
        """The one shared store of a relation-valued queue (created on first use): a view of the
        window store when a plain window produces it, otherwise a RelationStore."""
        st = self.stores.get(id(q))
        if st is None:
            eid = self._eid("syn")
            view = producer.relation_view(eid) if producer is not None else None
            st = RelationStore(q, eid) if view is None else view
            self.stores[id(q)] = st
        return st

    def _store_for(self, pn: PNode) -> Synopsis:
        """pn's shared store for a new join. While data flows the join starts from pn's snapshot
        (`+` elements at the snapshot instant), and its store must date those rows the same way:
        a store created now is seeded with the snapshot; an existing shared store dates its rows
        by their real insertion instants, so the late join gets its own seeded store instead."""
        if not pn.flowed:
            return self.store(pn.queue, pn.op)
        snap = self.snapshot(pn) if pn.op is not None else self.source_prefix(pn)
        if id(pn.queue) in self.stores or snap is None:
            st = RelationStore(pn.queue, self._eid("syn"), "relation store (late join)")
            self.late_stores.append(st)
        else:  # the queue's shared store, a RelationStore: a view would date rows by their own ts
            st = self.stores[id(pn.queue)] = RelationStore(pn.queue, self._eid("syn"))
        if snap is not None:
            st.start_from(snap[0])
        return st

    def _new_queue(self, types: Iterable[DataType], name: str) -> Queue:
        q = Queue(types, name=name, recent=self.options.recent_tails)
        q.eid = self._eid("q")
        return q

    def source_queue(self, node: L.Plan, snapshot: RelationInput | None = None) -> Queue:
        key = share_key(node)
        pn = self.nodes.get(key)
        if pn is None:
            pn = self.nodes[key] = PNode(key, node, self._new_queue(_types(node), getattr(node, "name", "")))
            pn.users.add("catalog")
        if snapshot is not None:
            self.source_snapshots[key] = snapshot.snapshot
            self.source_readers[key] = snapshot.reader_prefix
        return pn.queue

    def drop_source(self, node: L.Plan) -> None:
        key = share_key(node)
        pn = self.nodes.get(key)
        if pn is not None:
            pn.users.discard("catalog")
            if not pn.users:
                del self.nodes[key]
                self.source_snapshots.pop(key, None)
                self.source_readers.pop(key, None)

    # ------------------------------------------------------------ building
    def build(self, node: L.Plan, user: User | None = None, *, share: bool = True, skey: L.Plan | None = None) -> PNode:
        """The physical node computing `node` for query `user`, creating what is not present.
        `skey`: `share_key(node)` when the caller has it (a node's key holds its inputs' keys:
        computing each input's key again walked every subtree once per level above it)."""
        plain = share_key(node) if skey is None else skey
        key: object = plain
        if isinstance(node, (L.StreamSource, L.RelationSource)):
            pn = self.nodes.get(key)
            if pn is None:
                self.source_queue(node)
                pn = self.nodes[key]
            return pn
        if not share:
            key = ("private", user, key)
        pn = self.nodes.get(key)
        if pn is not None and share:
            reason = self._unshare_reason(pn, node, user)
            if reason:  # cost-aware sharing (CIDR §3.2): this join is better left unshared
                key = ("unshared", user, key)
                fresh = self.nodes.get(key) or self._create(node, key, user, share, plain)
                fresh.note = reason
                self._use(fresh, user)
                return fresh
        if pn is not None:
            self._use(pn, user)
            return pn
        return self._create(node, key, user, share, plain)

    def _unshare_reason(self, pn: PNode, node: L.Plan, user: User | None) -> str | None:
        """Why `user` must not share the existing node pn, or None: it is closed to the user (a
        k-Mon join storing rows without columns the user reads, or a node above one), or the
        share policy leaves the join unshared."""
        reason = self.closed.get(user, {}).get(pn.key)
        if reason is None and isinstance(node, L.Join) and self.share_policy is not None:
            reason = self.share_policy(pn, user)
        return reason

    def _create(self, node: L.Plan, key: object, user: User | None, share: bool, skey: L.Plan | None = None) -> PNode:
        # the inputs' share keys are the inputs of `skey` (share_key rebuilds a node over its inputs' keys)
        subkeys: tuple[L.Plan | None, ...] = (
            skey.inputs if skey is not None and len(skey.inputs) == len(node.inputs) else (None,) * len(node.inputs)
        )
        kids = [
            self.attachable(self.build(i, user, share=share, skey=k), user, share) for i, k in zip(node.inputs, subkeys)
        ]
        if isinstance(node, L.Join) and self.options.binary_joins and len(kids) > 2:
            pn = self._binary_tree(node, key, kids, user, share)
        else:
            pn = self._add(node, key, kids, user)
        self.nodes[key] = pn
        return pn

    def attachable(self, pn: PNode, user: User | None, share: bool = True) -> PNode:
        """`pn` if a new consumer can start from it now; otherwise a private copy of it that can
        (a relation already flowing whose state no snapshot can give)."""
        if pn.op is None or pn.is_stream or not pn.flowed or self.snapshot(pn) is not None:
            return pn
        self.unuse(pn, user)
        key = ("late", user, pn.key)
        old = self.nodes.get(key)
        if old is not None:
            self._use(old, user)
            return old
        kids = [self.attachable(self.build(i, user, share=share), user, share) for i in pn.node.inputs]
        fresh = self._add(pn.node, key, kids, user)
        fresh.note = "private copy: the shared operator's state cannot be snapshotted for a late start"
        self.nodes[key] = fresh
        return fresh

    def _use(self, pn: PNode, user: User | None) -> None:
        if user is None or user in pn.users:
            return
        pn.users.add(user)
        for i in pn.inputs:
            self._use(i, user)

    def _reader(self, pn: PNode, at: Reader | None = None) -> tuple[Reader, float | None, int | None]:
        """A reader on pn's queue for a new consumer, the instant from which it sees pn's
        output exactly (None: from the start), and the instant of the snapshot it starts from
        (None: it starts from no snapshot)."""
        q = pn.queue
        if at is not None:  # a window store's member reads from the store's position
            return q.reader(at=at), pn.complete_from, None
        if not pn.flowed:
            return q.reader(), pn.complete_from, None
        if pn.is_stream:
            seen = [v for v in (q.watermark, q.last_ts) if v is not None]
            return q.reader(), _max_cf([pn.complete_from, max(seen) + 1 if seen else None]), None
        snap = self.snapshot(pn) if pn.op is not None else self.source_prefix(pn)
        if snap is None:
            raise EngineError("internal", f"no snapshot of {q.eid}")  # attachable() prevents this
        batch, snap_at = snap
        return q.reader(prefix=batch), _max_cf([pn.complete_from, snap_at]), snap_at

    def source_prefix(self, pn: PNode) -> Snapshot | None:
        """A source relation's snapshot at its watermark followed by the updates accepted since,
        for a reader starting at its queue's end (what `inputs.RelationInput.reader_prefix` gives)."""
        fn = self.source_readers.get(pn.key)
        return None if fn is None else fn()

    def late_complete_from(self, pn: PNode) -> float | None:
        """From which instant a new consumer starting now sees pn's output exactly."""
        q = pn.queue
        if not pn.flowed:
            return pn.complete_from
        if pn.is_stream:
            seen = [v for v in (q.watermark, q.last_ts) if v is not None]
            return _max_cf([pn.complete_from, max(seen) + 1 if seen else None])
        snap = self.snapshot(pn)
        return INF if snap is None else _max_cf([pn.complete_from, snap[1]])

    def snapshot(self, pn: PNode) -> Snapshot | None:
        """(pn's relation at its last complete instant as inserts, that instant), or None."""
        return snapshots.snapshot(self, pn)

    def _add(self, node: L.Plan, key: object, kids: list[PNode], user: User | None) -> PNode:
        if isinstance(node, L.Filter) and key == share_key(node):
            ec = eq_const(node.predicate)
            if ec is not None:
                pn = self._hub_member(node, key, kids[0], ec, user)
                if pn is not None:
                    return pn
        cls = operator_class(node)
        assert cls is not None, "sources are built by source_queue, not here"
        q = self._new_queue(_types(node), type(node).__name__)
        inputs = [k.queue for k in kids]
        # operators that read their inputs' state from shared synopses (joins) get them here
        stores = [self._store_for(k) for k in kids] if cls.reads_input_stores else None
        op = cls.from_node(node, BuildContext(inputs, q, self.ids, self.ev, self.options, stores))
        eid = self._eid("op")
        pn = PNode(key, node, q, op, list(kids))
        ws = None
        mode = op.window_store_mode()
        if mode is not None:
            ws = self._window_store(kids[0], mode, None if key == share_key(node) else user)
        readers, cfs, starts = [], [], []
        for k in kids:  # attach to running inputs (a window store's members read from its position)
            r, cf, snap_at = self._reader(k, ws.reader if ws is not None and ws.through is not None else None)
            readers.append(r)
            cfs.append(cf)
            if snap_at is not None:
                starts.append(snap_at)
        op.bind(readers, eid=eid, node=node, hold_until=max(starts) if len(readers) > 1 and starts else None)
        if ws is not None:
            op.join_store(ws)
            pn.complete_from = ws.complete_from(cast("WindowOp", op))  # only windows have a store mode
            if len(ws.members) > 1:
                pn.note = f"reads its extent of {ws.eid}"
        else:
            pn.complete_from = self._own_cf(op, _max_cf(cfs))
        self._use(pn, user)
        self._insert_op(op, kids)
        return pn

    def _hub_member(
        self, node: L.Filter, key: object, kid: PNode, ec: tuple[int, object], user: User | None
    ) -> PNode | None:
        """Join `column = value` selections over one queue into one grouped selection (from the
        second one on; a running plain selection is moved into the new hub, it has no state)."""
        col, value = ec
        hkey = (id(kid.queue), col)
        hub = self.filter_hubs.get(hkey)
        if hub is None:
            sib = next(
                (
                    pn
                    for pn in self.nodes.values()
                    if pn.op is not None
                    and pn.op.groupable()
                    and pn.inputs == [kid]
                    and pn.key == share_key(pn.node)
                    and isinstance(pn.node, L.Filter)
                    and (eq_const(pn.node.predicate) or (None,))[0] == col
                ),
                None,
            )
            if sib is None:
                return None
            hub = self._new_hub(kid, col, sib)
            self.filter_hubs[hkey] = hub
        q = self._new_queue(_types(node), type(node).__name__)
        m = HubMember(q, self.ids, node.predicate, self.ev, value, hub, eid=self._eid("op"), node=node)
        hub.add(m)
        pn = PNode(key, node, q, m, [kid])
        if hub.done_through is not None:  # joining while data flows: from the hub's position on
            q.start, q.watermark = hub.output.start, hub.done_through
            pn.complete_from = self.late_complete_from(kid)
        else:
            pn.complete_from = kid.complete_from
        pn.note = f"grouped in {hub.eid}"
        self._use(pn, user)
        return pn

    def _new_hub(self, kid: PNode, col: int, sib: PNode) -> FilterHub:
        old = sib.op
        assert old is not None and isinstance(sib.node, L.Filter)
        ec = eq_const(sib.node.predicate)
        assert ec is not None  # chosen for being `column = constant`
        hub = FilterHub([kid.queue], self.ids, col, label=f"grouped select on {kid.node.schema[col].name} (= constant)")
        hub.resume(old)
        hub.bind(eid=self._eid("op"), node=kid.node)
        value = ec[1]
        m = HubMember(
            sib.queue,
            self.ids,
            sib.node.predicate,
            self.ev,
            value,
            hub,
            eid=old.eid,
            node=sib.node,
            counters=old.counters,
        )
        m.produce_only(old.produced)  # the running selection's column pruning carries over
        hub.add(m)
        i = self.operators.index(old)
        self.operators[i] = self._clocked(hub)
        old.release()
        sib.op, sib.note = m, f"grouped in {hub.eid}"
        return hub

    def _window_store(self, kid: PNode, mode: str, private: User | None) -> WindowStore:
        """The one store of `mode` windows over kid's stream (per query when not shared)."""
        wkey = (id(kid.queue), mode, private)
        ws = self.window_stores.get(wkey)
        if ws is None:
            cf = None
            if kid.queue.tuples_in:  # started while the stream flows: it holds what arrives from now on
                seen = [v for v in (kid.queue.watermark, kid.queue.last_ts) if v is not None]
                cf = _max_cf([kid.complete_from, max(seen) + 1])
            elif kid.complete_from is not None:
                cf = kid.complete_from
            # a stream is complete from an instant (INF, "never", only marks relations)
            held_from = None if cf is None else int(cf)
            ws = self.window_stores[wkey] = WindowStore(kid.queue, mode, self._eid("syn"), held_from=held_from)
        return ws

    @staticmethod
    def _own_cf(op: Operator, cf: float | None) -> float | None:
        """First complete instant of op's output given its inputs are complete from `cf`."""
        if cf is None or cf == INF:
            return cf
        return op.complete_from(cf)

    def _clocked(self, op: Operator) -> Operator:
        """`op`, reading the CPU clock in its calls or not as the options say (every operator of
        the plan enters `operators` here or as a FilterHub)."""
        if not self.options.cpu_clocks:
            op.cpu_clock = False
        return op

    def _insert_op(self, op: Operator, kids: list[PNode]) -> None:
        """Keep `operators` producer-before-consumer: a new operator goes after its producers."""
        self._clocked(op)
        producers = {id(k.op.scheduled()) for k in kids if k.op is not None}
        pos = 0
        for i, o in enumerate(self.operators):
            if id(o) in producers:
                pos = i + 1
        self.operators.insert(pos, op) if pos < len(self.operators) else self.operators.append(op)

    def _binary_tree(self, node: L.Join, key: object, kids: list[PNode], user: User | None, share: bool) -> PNode:
        """((I0 ⋈ I1) ⋈ I2) ⋈ ...: each conjunct is applied at the first join that has its columns.
        The columns keep their positions (each step's output is a prefix of the full schema)."""
        from cqlstream.cql.logical import expr as X

        widths = [len(i.schema) for i in node.inputs_]
        pending = X.conjuncts(node.predicate)
        left, left_node = kids[0], node.inputs_[0]
        for k in range(1, len(kids)):
            width = sum(widths[: k + 1])
            here = [c for c in pending if max(X.columns(c), default=-1) < width]
            pending = [c for c in pending if c not in here]
            step = L.Join((left_node, node.inputs_[k]), X.conjoin(here))
            last = k == len(kids) - 1
            skey = key if last else (share_key(step) if share else ("private", user, share_key(step)))
            existing = None if last else self.nodes.get(skey)
            if existing is not None and skey in self.closed.get(user, {}):
                existing, skey = None, ("unshared", user, skey)
            if existing is not None:
                self._use(existing, user)
                left = self.attachable(existing, user, share)
            else:
                left = self._add(step, skey, [left, kids[k]], user)
                if not last:
                    self.nodes[skey] = left
            left_node = step
        return left

    # ------------------------------------------------------------ releasing
    def unuse(self, pn: PNode, user: User | None) -> None:
        """`user` no longer needs pn (nor, through it, its inputs); frees what nobody uses."""
        if user not in pn.users:
            return
        pn.users.discard(user)
        for i in pn.inputs:
            if not any(user in o.users for o in self._consumers(i)):
                self.unuse(i, user)
        if not pn.users:
            self._free(pn)

    def release(self, user: User) -> None:
        """Drop every use of `user` (a query deregistered or deactivated)."""
        for pn in list(self.nodes.values()):
            if user in pn.users and pn.key in self.nodes:
                pn.users.discard(user)
        for pn in list(self.nodes.values()):
            if not pn.users and pn.op is not None:
                self._free(pn)

    def _consumers(self, pn: PNode) -> list[PNode]:
        return [o for o in self.nodes.values() if pn in o.inputs]

    def _free(self, pn: PNode) -> None:
        self.nodes.pop(pn.key, None)
        op = pn.op
        if op is None:
            return
        if op in self.operators:
            self.operators.remove(op)
        for x in op.release():  # shared objects (stores, a grouped selection) nothing uses any more
            self._forget(x)
        if pn.store is not None:
            pn.store.release()
            pn.store = None
        for r in list(pn.queue.readers):  # subscriptions of the freed output end here
            pn.queue.detach(r)

    def _forget(self, x: object) -> None:
        """Drop a released shared object from every registry of the plan."""
        if isinstance(x, Operator) and any(o is x for o in self.operators):
            self.operators.remove(x)
        registries: tuple[dict[Any, Any], ...] = (self.filter_hubs, self.window_stores, self.stores)
        for reg in registries:
            for k in [k for k, v in reg.items() if v is x]:
                del reg[k]
        self.late_stores = [st for st in self.late_stores if st is not x]

    def add_result_store(self, pn: PNode) -> None:
        """Keep the current relation of a query's output (for late subscribers and late identical
        queries) when its producer cannot give a snapshot."""
        if pn.is_stream or pn.store is not None or self._snapshotable(pn):
            return
        pn.store = RelationStore(pn.queue, self._eid("syn"), "result store")

    def _snapshotable(self, pn: PNode) -> bool:
        return snapshots.snapshotable(self, pn)

    def advance_result_stores(self) -> None:
        for pn in self.nodes.values():
            if pn.store is not None and pn.queue.watermark is not None:
                pn.store.advance(pn.queue.watermark)
