"""What the query limit check reads, kept as of a point of plan order while a parallel pass runs
as a graph (engine/parallel_pass.py): the check of round robin after each call, at the same
points and on the same sizes, whatever ran meanwhile on the other threads.

Round robin checks after every operator call that did work, on the state left by the calls
before it in plan order. A pass running as a graph has calls of higher plan position running, or
done, when a call ends. So the check reads no live size: each call *reports* the sizes it changed
(on its own thread, right after the call, when no operator sharing that state runs: the pass
graph orders them), and the pass *commits* the reports in plan order; the check after call `c`
reads the ledger, which then holds exactly what the calls 0..c left:

- an operator's state (`state_bytes`), a store's bytes (`nbytes`): the value the last call of
  plan position <= c that may change it reported (the operator itself, the operators sharing the
  object, a hub's members), else the value when the pass began;
- a queue's bytes: the batches from the lowest cursor of its readers to its end, where a reader
  of plan position <= c is at the cursor its call reported and the others where they were when
  the pass began, and the batches its producer appended count once the producer is committed
  (a queue keeps exactly the batches from its slowest reader on: engine/queues.py `trim`);
- a query's CPU seconds: its operators' `Counters.cpu` as their calls reported them.

Per-query totals are kept incrementally (a commit touches a few entities); a total near a limit
is summed again in the check's own order, so `held` is the figure round robin's check computes.
When a check finds queries over a limit the ledger drops them as their suspension will (their
entities' sharers and readers), so later checks of the pass read what round robin's checks read
after it suspended them and went on.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from cqlstream.engine.limits import Overrun
from cqlstream.engine.queues import Queue

if TYPE_CHECKING:
    from cqlstream.engine.limits import LimitGuard
    from cqlstream.engine.operators.base import Operator
    from cqlstream.engine.synopses import Synopsis


@dataclass
class Slot:
    """One entity of the plan as the check counts it (a plan entity, `control.plan_entities`)."""

    obj: Any
    kind: str  # operator, queue or store
    users: set[int]  # ids of the queries using it
    size: int = 0
    cpu: float = 0.0  # operators: Counters.cpu


@dataclass
class QueueModel:
    """A queue's batches' bytes and its readers' cursors, as of the committed calls."""

    q: Queue
    base: int  # absolute index of nb[0]
    nb: list[int]
    cursor: dict[int, int]  # id(reader) → its batch index
    had_readers: bool
    slots: list[int] = field(default_factory=list)  # the queue's slots (indices)

    def nbytes(self) -> int:
        if not self.cursor:  # every reader gone: a queue with readers that all left keeps nothing
            return 0 if self.had_readers else sum(self.nb)
        lo = min(self.cursor.values()) - self.base
        return sum(self.nb[max(lo, 0) :])


@dataclass
class Report:
    """What one call left, measured on its thread right after it: sizes and CPU of the operator
    and store entities it may change, its readers' cursors, the batches it appended."""

    sizes: list[tuple[int, int]]  # (slot index, bytes)
    cpu: list[tuple[int, float]]  # (slot index, Counters.cpu)
    cursors: list[tuple[int, int, int]]  # (queue model index, id(reader), batch index)
    appended: list[tuple[int, list[int]]]  # (queue model index, appended batches' bytes)


class Ledger:
    """The limit check's view of one pass (see the module doc). Built when the pass begins, on the
    calling thread, with no operator running."""

    def __init__(self, guard: LimitGuard, ops: Sequence[Operator]) -> None:
        from cqlstream.engine.control import plan_entities

        d = guard.d
        self.guard = guard
        self.queries = d.queries
        self.slots: list[Slot] = []
        self.index: dict[int, list[int]] = {qid: [] for qid in guard._entries()}  # the check's order
        for kind, obj, _pn, users in plan_entities(d).values():
            us = {u for u in users if u in d.queries}
            k = len(self.slots)
            self.slots.append(Slot(obj, kind, us))
            for u in sorted(us):
                if u in self.index:
                    self.index[u].append(k)
        self.share = [len(s.users) for s in self.slots]
        by_obj: dict[int, list[int]] = {}
        for k, s in enumerate(self.slots):
            by_obj.setdefault(id(s.obj), []).append(k)
        self.by_obj = by_obj
        # the operator and store slots each plan position's call may change
        pos = {id(op): i for i, op in enumerate(ops)}
        self.touch: list[list[int]] = [[] for _ in ops]
        for i, op in enumerate(ops):
            near = [op, *op.shared_stores(), *op.shared_operators()]  # (a hub's members are its shared operators)
            seen: set[int] = set()
            for x in near:
                for k in by_obj.get(id(x), ()):
                    if k not in seen and self.slots[k].kind != "queue":
                        seen.add(k)
                        self.touch[i].append(k)
        for k, s in enumerate(self.slots):  # stores changed by the operators that use them
            if s.kind == "store":
                for u in list(s.obj.users):
                    at = pos.get(id(u))
                    if at is not None and k not in self.touch[at]:
                        self.touch[at].append(k)
        # id(reader) → positions of the operators whose calls may move it: an operator's and its
        # members' readers, and the readers of the stores it shares (a window store reads its queue)
        self.reader_owner: dict[int, set[int]] = {}
        for i, op in enumerate(ops):
            near_all: list[Operator | Synopsis] = [op, *op.shared_stores(), *op.shared_operators()]
            for o in near_all:
                for r in o.cursors():
                    self.reader_owner.setdefault(id(r), set()).add(i)
        self.models: list[QueueModel] = []
        self.reads: list[list[int]] = [[] for _ in ops]  # position → models whose cursors it moves
        self.writes: list[list[int]] = [[] for _ in ops]  # position → models it appends to
        model_of: dict[int, int] = {}
        for k, s in enumerate(self.slots):
            if s.kind != "queue":
                continue
            q = s.obj
            m = model_of.get(id(q))
            if m is None:
                m = model_of[id(q)] = len(self.models)
                self.models.append(
                    QueueModel(
                        q, q.base, [b.nbytes() for b in q.batches], {id(r): r.batch for r in q.readers}, bool(q.readers)
                    )
                )
                for r in q.readers:
                    for i in self.reader_owner.get(id(r), ()):
                        if m not in self.reads[i]:
                            self.reads[i].append(m)
            self.models[m].slots.append(k)
        for i, op in enumerate(ops):
            for q in op.output_queues():
                m = model_of.get(id(q))
                if m is not None:
                    self.writes[i].append(m)
        self.ops = list(ops)
        for s in self.slots:
            if s.kind == "operator":
                s.size = s.obj.state_bytes()
                s.cpu = s.obj.counters.cpu
            elif s.kind == "store":
                s.size = s.obj.nbytes()
        for qm in self.models:
            n = qm.nbytes()
            for k in qm.slots:
                self.slots[k].size = n
        self.limited = list(self.index)
        self.held: dict[int, float] = {qid: self._sum(qid) for qid in self.limited}
        self.cpu = {qid: self._cpu(qid) for qid in self.limited}
        self.run_start = {qid: guard._run_start.get(qid, 0.0) for qid in self.limited}
        self.dirty: set[int] = set(self.limited)  # the first check of a pass reads every query
        self.suspended: set[int] = set()
        self.gone_ops: set[int] = set()  # id of operators only suspended queries used
        self.checks = 0

    # ------------------------------------------------------------ reports (the call's thread)
    def measure(self, i: int) -> Report:
        """Sizes the call of position `i` left (on its thread, right after it)."""
        sizes, cpu = [], []
        for k in self.touch[i]:
            s = self.slots[k]
            if s.kind == "operator":
                sizes.append((k, s.obj.state_bytes()))
                cpu.append((k, s.obj.counters.cpu))
            else:
                sizes.append((k, s.obj.nbytes()))
        cursors = []
        for m in self.reads[i]:
            for r in self.models[m].q.readers:
                if i in self.reader_owner.get(id(r), ()):
                    cursors.append((m, id(r), r.batch))
        appended = []
        for m in self.writes[i]:
            qm = self.models[m]
            q = qm.q
            end = qm.base + len(qm.nb)  # (no reader trims the queue while its producer runs)
            appended.append((m, [b.nbytes() for b in q.batches[max(end - q.base, 0) :]]))
        return Report(sizes, cpu, cursors, appended)

    # ------------------------------------------------------------ commits (in plan order)
    def _add(self, k: int, size: int) -> None:
        self._set(k, "size", size, self.held)

    def _set(self, k: int, field: str, value: float, totals: dict[int, float]) -> None:
        """Slot `k`'s `field` (size or cpu) becomes `value`; each limited user's total in `totals`
        moves by its share of the change, and that user is checked again."""
        s = self.slots[k]
        old = getattr(s, field)
        if value != old:
            delta = (value - old) / self.share[k] if self.share[k] else 0.0
            setattr(s, field, value)
            for u in s.users:
                if u in totals:
                    totals[u] += delta
                    self.dirty.add(u)

    def commit(self, r: Report) -> None:
        for k, n in r.sizes:
            self._add(k, n)
        for k, c in r.cpu:
            self._set(k, "cpu", c, self.cpu)
        touched = set()
        for m, rid, b in r.cursors:
            cur = self.models[m].cursor
            if rid in cur:  # (not a reader its query's suspension detaches)
                cur[rid] = b
                touched.add(m)
        for m, nbs in r.appended:
            if nbs:
                self.models[m].nb.extend(nbs)
                touched.add(m)
        for m in touched:
            qm = self.models[m]
            n = qm.nbytes()
            for k in qm.slots:
                self._add(k, n)

    # ------------------------------------------------------------ a reservation
    def reserve(self, op: Operator, nbytes: int, mid: Report) -> list[Overrun]:
        """`LimitGuard.reserve` on the committed state plus what the reserving call has left so far
        (`mid`, measured on its thread): the overruns when `nbytes` more for `op` would put every
        query using it over its memory limit, else none."""
        k = next((k for k in self.by_obj.get(id(op), ()) if self.slots[k].kind == "operator"), None)
        if k is None or not self.share[k]:
            return []
        overlay = self._overlay(mid)
        share, users, g = self.share[k], self.slots[k].users, self.guard
        over = []
        for qid in self.limited:
            h = self.queries.get(qid)
            if qid not in users or qid in self.suspended or h is None or not h.active:
                continue
            limit = g.limit_of(h)
            if limit is None:
                continue
            held = int(sum(overlay.get(j, self.slots[j].size) / self.share[j] for j in self.index[qid]))
            if (after := held + nbytes / share) > limit:
                over.append(Overrun(qid, "memory", after, limit, nbytes))
        return over if len(over) == share else []

    def _overlay(self, r: Report) -> dict[int, int]:
        """Slot → size with the report `r` applied, the ledger left as it is."""
        out = dict(r.sizes)
        cursors: dict[int, dict[int, int]] = {}
        for m, rid, b in r.cursors:
            cur = cursors.setdefault(m, dict(self.models[m].cursor))
            if rid in cur:
                cur[rid] = b
        for m, cur in cursors.items():
            qm = self.models[m]
            tmp = QueueModel(qm.q, qm.base, qm.nb, cur, qm.had_readers)
            n = tmp.nbytes()
            for j in qm.slots:
                out[j] = n
        return out

    # ------------------------------------------------------------ the check
    def _sum(self, qid: int) -> int:
        """As `LimitGuard.held`: the same terms in the same order."""
        return int(sum(self.slots[k].size / self.share[k] for k in self.index.get(qid, ())))

    def _cpu(self, qid: int) -> float:
        return sum(
            self.slots[k].cpu / self.share[k] for k in self.index.get(qid, ()) if self.slots[k].kind == "operator"
        )

    def armed(self) -> bool:
        return any(q not in self.suspended for q in self.limited)

    def check(self) -> list[Overrun]:
        """Round robin's check (`LimitGuard.check`) on the committed state: the queries over a
        limit, in the check's order (those not changed since they were last read are within)."""
        self.checks += 1
        g = self.guard
        over: dict[int, Overrun] = {}
        for qid in self.dirty:
            h = self.queries.get(qid)
            if qid in self.suspended or h is None or not h.active:
                continue
            limit, cpu = g.limit_of(h), g.cpu_limit_of(h)
            if limit is not None:
                est = self.held[qid]
                if est >= limit - 1 - 1e-9 * abs(limit):  # near or over: the exact sum decides
                    held = self._sum(qid)
                    self.held[qid] = held
                    if held > limit:
                        over[qid] = Overrun(qid, "memory", held, limit)
                        continue
            if g.cpu and cpu is not None and (took := self.cpu[qid] - self.run_start.get(qid, 0.0)) > cpu:
                over[qid] = Overrun(qid, "cpu", took, cpu)
        self.dirty = set()
        return [over[q] for q in self.limited if q in over]

    def suspend(self, qids: set[int]) -> None:
        """Drop the queries `qids` as their suspension will: their entities' sharers, the entities
        only they used, the readers of the operators only they used, their subscriptions."""
        qids = qids - self.suspended
        if not qids:
            return
        self.suspended |= qids
        gone_ops: set[int] = set()
        for k, s in enumerate(self.slots):
            if s.users and s.users <= qids and s.kind == "operator":  # released with them
                gone_ops.add(id(s.obj))
            s.users = s.users - qids
            self.share[k] = len(s.users)
        self.gone_ops |= gone_ops
        gone_readers = {
            rid for rid, ps in self.reader_owner.items() if all(id(self.ops[i]) in self.gone_ops for i in ps)
        }
        for qid in qids:
            h = self.queries.get(qid)
            for sub in getattr(h, "subscriptions", ()) or ():
                r = getattr(sub, "reader", None)
                if r is not None:
                    gone_readers.add(id(r))
        for qm in self.models:
            for rid in gone_readers & set(qm.cursor):
                del qm.cursor[rid]
            n = qm.nbytes()
            for k in qm.slots:
                self.slots[k].size = n
        for qid in qids:
            self.held.pop(qid, None)
            self.cpu.pop(qid, None)
        # the check's index is built again after a suspension: each query's CPU time in the run
        # counts from there (LimitGuard._entries)
        for qid in self.held:
            self.held[qid] = self._sum(qid)
            self.cpu[qid] = self._cpu(qid)
            self.run_start[qid] = self.cpu[qid]
        self.dirty = set(self.held)

    def gone(self, op: Operator) -> bool:
        """Whether every query using `op` was found over a limit in this pass (its suspension
        releases it)."""
        return id(op) in self.gone_ops


__all__ = ["Ledger", "Report"]
