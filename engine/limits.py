"""Per-query limits (docs/plan-manager.md): each query's attributed memory, and the engine CPU time it
took in the current run, are checked after every operator call that did work; a query over a limit
is suspended (its operators released, its state `suspended` with the reason) instead of growing
until the process dies or holding every other query back.

A query's memory and time are attributed as in its control table (engine/control.py
`attribution`): every operator's state, queue and store it uses, and every operator's seconds,
split equally among the queries sharing them. The check reads only cheap sizes (`state_bytes()`,
`nbytes()`) and counters of the entities of queries that have a limit, through an index rebuilt
only when the plan changes.

Within one operator call memory can grow past a limit before any check sees it (a cross product's
output). An operator about to allocate a large result calls `reserve` first (a join, once it knows
its output's row count and before it gathers the columns): when every query using it would pass
its limit with those bytes, the call is abandoned (`Overdraft`) and the run suspends the queries
before the allocation happens. An operator shared with a query that would stay within its limit
goes on (the check after the call then suspends the others).

On the `parallel` scheduler (engine/parallel_pass.py) a pass runs as a graph and checks where round
robin checks, after each call, on a ledger of the sizes the calls before it in plan order left
(engine/limits_ledger.py); a reservation on a worker waits for those calls to be checked and weighs
against the ledger (`reserve_hook`). A pass given another check runs by levels, and `reserve` then
weighs against what each query held when the level began (`freeze`).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from cqlstream.engine.batch import Batch
    from cqlstream.engine.dsms import Dsms, QueryHandle

RESERVE_MIN = 1 << 20  # allocations below this are left to the check after the call


class _ThreadGuard(threading.local):
    """The guard of the run under way on this thread (`reserve` reads it at every join call);
    a class default, so reading it raises nothing when no run set it."""

    guard: LimitGuard | None = None


_running = _ThreadGuard()


@dataclass(frozen=True)
class Entry:
    """One entity a limited query uses: its bytes, its seconds (operators), how many queries share it."""

    size: Callable[[], int]
    obj: Any
    operator: bool
    users: int

    def seconds(self) -> float:
        return self.obj.counters.cpu / self.users if self.operator else 0.0


@dataclass(frozen=True)
class Overrun:
    """A query found over a limit: `what` (memory in bytes, or cpu in seconds of one run) it took
    and its limit."""

    query_id: int
    what: str
    held: float
    limit: float
    allocating: int = 0  # > 0: found before an operator allocated this many bytes (`reserve`)

    @property
    def reason(self) -> str:
        q = self.query_id
        if self.what == "cpu":
            return (
                f"cpu: query {q} took {self.held:.2f} s of engine CPU time in one run, over its cpu_limit of "
                f"{self.limit:g} s; raise the limit (knob cpu_limit of query:{q}) and activate it again"
            )
        held = (
            f"would hold {mib(self.held)} of state (an operator call was about to allocate {mib(self.allocating)})"
            if self.allocating
            else f"held {mib(self.held)} of state"
        )
        return (
            f"memory: query {q} {held}, over its memory_limit of "
            f"{mib(self.limit)}; raise the limit (knob memory_limit of query:{q}) and activate it again"
        )


class Overdraft(Exception):
    """An operator call abandoned before an allocation that would put every query using the
    operator over its memory limit (`overruns`); the run suspends them (Dsms.run)."""

    def __init__(self, overruns: list[Overrun]) -> None:
        super().__init__(overruns[0].reason)
        self.overruns = overruns


def reserve(op: object, rows: int, like: Sequence[Batch]) -> None:
    """Before `op` materializes `rows` result rows with a row of each of `like`'s batches: raise
    Overdraft when the bytes would put every query using `op` over its memory limit."""
    guard = current()
    if guard is None or rows <= 0:
        return
    width = 17 + sum(sum(c.itemsize for c in b.cols) + sum(m is not None for m in b.nulls) for b in like)
    if rows * width >= RESERVE_MIN:  # ts, sign and id: 17 bytes; object columns count their pointers
        guard.reserve(op, rows * width)


def current() -> LimitGuard | None:
    """The guard of the run under way on this thread (None: no run checks limits)."""
    return _running.guard


@contextmanager
def running(guard: LimitGuard | None) -> Iterator[None]:
    """Operator calls on this thread (an engine worker) reserve with `guard`, the run's."""
    before = current()
    _running.guard = guard
    try:
        yield
    finally:
        _running.guard = before


def mib(n: float) -> str:
    return f"{n / (1 << 20):.1f} MiB"


class LimitGuard:
    """Checks every active query that has a limit: memory (its `memory_limit` knob, else the
    engine's `query_memory_limit`) and engine seconds per run (its `cpu_limit`, else the engine's
    `query_cpu_limit`); `over` lists the queries the last check found over one."""

    # query id → bytes held when the parallel pass's current level began (`freeze`): what `reserve`
    # weighs while operators of the level run on other threads; None: live sizes (a class default:
    # guards of older checkpoints have it too)
    _frozen: dict[int, int] | None = None
    # a parallel pass checking per call (engine/parallel_pass.py) weighs a reservation against the
    # sizes round robin's would read (engine/limits_ledger.py): True when it decided (it raises
    # Overdraft itself), False when the calling thread runs no call of it (a class default)
    reserve_hook: Callable[[object, int], bool] | None = None

    def __init__(self, d: Dsms) -> None:
        self.d = d
        self.over: list[Overrun] = []
        self.checks = 0
        self._index: dict[int, list[Entry]] | None = None
        self._shape: tuple[int, ...] = ()
        self._run_start: dict[int, float] = {}  # query id → its attributed seconds when the run began
        self.cpu = True  # off while a log is replayed: time limits depend on timing, memory limits do not

    def limit_of(self, h: QueryHandle) -> int | None:
        return h.memory_limit if h.memory_limit is not None else self.d.query_memory_limit

    def cpu_limit_of(self, h: QueryHandle) -> float | None:
        return h.cpu_limit if h.cpu_limit is not None else self.d.query_cpu_limit

    def _limited(self, h: QueryHandle) -> bool:
        return h.active and (self.limit_of(h) is not None or self.cpu_limit_of(h) is not None)

    def invalidate(self) -> None:
        """The plan or a limit changed: rebuild the index at the next check."""
        self._index = None

    def armed(self) -> bool:
        """Whether any active query has a limit (otherwise runs pay nothing for the check)."""
        return any(self._limited(h) for h in self.d.queries.values())

    def _plan_shape(self) -> tuple[int, ...]:
        p = self.d.plan
        return (len(p.nodes), len(p.operators), len(p.stores), len(p.window_stores), len(p.late_stores))

    def _entries(self) -> dict[int, list[Entry]]:
        shape = self._plan_shape()
        if self._index is None or shape != self._shape:
            from cqlstream.engine.control import plan_entities

            index: dict[int, list[Entry]] = {qid: [] for qid, h in self.d.queries.items() if self._limited(h)}
            for kind, obj, _pn, users in plan_entities(self.d).values():
                users = [u for u in users if u in self.d.queries]
                op = kind == "operator"
                for u in users:
                    if u in index:
                        index[u].append(Entry(obj.state_bytes if op else obj.nbytes, obj, op, len(users)))
            self._index, self._shape = index, shape
            self._run_start = {qid: self.seconds(qid) for qid in index}
        return self._index

    def held(self, qid: int) -> int:
        """Bytes attributed to query `qid` (0 when it has no limit: only limited queries are indexed)."""
        return int(sum(e.size() / e.users for e in self._entries().get(qid, ())))

    def seconds(self, qid: int) -> float:
        """CPU seconds attributed to query `qid` since its operators were built (`Counters.cpu`)."""
        return sum(e.seconds() for e in (self._index or {}).get(qid, ()))

    def start_run(self) -> None:
        """A run begins: the per-run time of every limited query counts from here; operators of this
        thread reserve large allocations with this guard (`reserve`)."""
        self._run_start = {qid: self.seconds(qid) for qid in self._entries()}
        _running.guard = self

    def freeze(self) -> None:
        """A level of the parallel pass begins (no operator runs): `reserve` weighs against the
        bytes each query holds now until `thaw` (`check` updates them after each level)."""
        qs = self.d.queries
        self._frozen = {
            qid: self.held(qid) for qid in self._entries() if qid in qs and self.limit_of(qs[qid]) is not None
        }

    def thaw(self) -> None:
        """The pass is over: `reserve` reads live sizes again."""
        self._frozen = None

    def reserve(self, op: object, nbytes: int) -> None:
        """Raise Overdraft when `nbytes` more for `op` would put every query using it over its
        memory limit (a query sharing `op` gets its share of the bytes)."""
        hook = self.reserve_hook
        if hook is not None and hook(op, nbytes):
            return
        frozen = self._frozen
        users, over = 0, []
        for qid, entries in self._entries().items():
            e = next((e for e in entries if e.obj is op), None)
            h = self.d.queries.get(qid)
            if e is None or h is None or not h.active:
                continue
            users = e.users
            limit = self.limit_of(h)
            if limit is None:
                continue
            held = frozen[qid] if frozen is not None and qid in frozen else self.held(qid)
            if (after := held + nbytes / e.users) > limit:
                over.append(Overrun(qid, "memory", after, limit, nbytes))
        if over and len(over) == users:
            raise Overdraft(over)

    def check(self) -> bool:
        """Measure every limited query; True when one is over a limit (listed in `over`)."""
        self.checks += 1
        over = []
        frozen = self._frozen
        for qid in self._entries():
            h = self.d.queries.get(qid)
            if h is None or not h.active:
                continue
            limit, cpu = self.limit_of(h), self.cpu_limit_of(h)
            held = self.held(qid) if limit is not None else 0
            if frozen is not None and limit is not None:
                frozen[qid] = held
            if limit is not None and held > limit:
                over.append(Overrun(qid, "memory", held, limit))
            elif self.cpu and cpu is not None and (took := self.seconds(qid) - self._run_start.get(qid, 0.0)) > cpu:
                over.append(Overrun(qid, "cpu", took, cpu))
        self.over = over
        return bool(over)


__all__ = ["LimitGuard", "Overdraft", "Overrun", "current", "reserve", "running"]
