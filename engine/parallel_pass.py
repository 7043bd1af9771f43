"""One pass of the `parallel` scheduler: every operator called once, as in round robin, operators
that do not feed each other side by side on the engine's threads (engine/parallel.py).

numpy releases the GIL in its kernels, so two operators each working on 10^4–10^5 rows run on two
cores at once. The pass is a DAG: an operator may start once its *producers* (the operators
writing a queue it reads, directly or through a shared store) and the operators of lower plan
position it shares state with (a synopsis, a window store, another operator object) have had
their call in this pass. Each of the engine's threads loops taking the ready operator with the
longest estimated path to the end of the plan (its own mean seconds per call plus its
consumers', from the counters), so the long chains start first; a second thread takes only calls
with enough input waiting (`MIN_ROWS`). On one thread the pass runs in plan order, as round robin.

Why nothing depends on which thread ran what (the invariants this module keeps):

1. Queues. A queue is written only by its producer (batches, watermark, start, ended), and every
   reader starts after the producer's call ended, so no element is appended under a reader.
   Readers of one queue running at once look at its batches and move their cursors (dropping the
   batches every reader has passed) holding the queue's lock (engine/queues.py `lock_of`).
2. Shared state. Operators holding the same synopsis, window store or operator object never run at
   once: the one of higher plan position waits for the other (an extra edge of the DAG). Each
   operator declares what it holds (`Operator.shared_stores`, `shared_operators`); a join reading
   a window's relation through a view declares the window store the view slices, which the
   store's other windows change (tests/test_shared_declarations.py checks the declarations).
3. Tuple ids. Each operator draws ids from a block of its own (`Lease`), refilled between passes
   on the calling thread in plan order, sized twice its recent use; a call needing more takes them
   from an overflow range fixed by its plan position (high ids, [2^62, 2^63)). So ids, and what
   hashes them (load shedding, sampled summaries), are the same at every thread count and in any
   interleaving; `pick`, a test hook, runs the ready operators in another order.
4. Limits. A pass with the run's limit check (engine/limits.py) still runs as a graph, and checks
   where round robin checks: after every call that did work, on the state the calls before it in
   plan order left. Each call reports, on its thread right after it, the sizes it changed (the
   pass graph keeps every other operator sharing them from running then), and the pass commits
   the reports in plan order into a ledger (engine/limits_ledger.py); the check after call c
   reads the ledger when c is committed, whatever ran meanwhile. Queries found over a limit are
   dropped from the ledger as their suspension drops them and the pass goes on, as round robin's
   run goes on after suspending them; the run suspends them when the pass ends. A call of a
   query found over that ran ahead of the check changed only what the suspension releases: its
   rows are never delivered (the suspension closes the query's subscriptions before anything is
   polled). A call reserving memory (`reserve`) waits until every call before it is committed and
   weighs the bytes against the ledger plus what it has left so far, as round robin's reservation
   weighs them against the live state; so that those calls can all end, at most threads − 1 calls
   that may reserve run while an operator before them has not started. Other checks (a test's
   callable, `by_levels`) run the pass by levels of the DAG as before session 19: the check after
   each level, when no operator runs.
5. Errors. After an operator's call raises, operators of higher plan position are not started;
   those of lower position still run (a sequential pass would have run them), so the error raised
   at the end of the pass, the first in plan order, is the one a sequential pass raises. Operators
   of higher position that had already run made calls the next run makes anyway: an operator's
   output never depends on when it runs (whole instants up to its inputs' watermarks). One of them
   that failed too keeps its error and raises it at its next call (`held_error`), where the
   sequential pass would have raised it.
6. The rest of a call is the operator's own: its counters, readers, state and random generators
   (profilers are per operator and seeded); module caches are lru_caches or memos that compute the
   same value whichever thread fills them. Code called from a step must take tuple ids on the
   step's own thread (a nested parallel.run_all task has no lease: its ids would depend on timing).
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from cqlstream.engine import limits, parallel
from cqlstream.engine.limits_ledger import Ledger, Report
from cqlstream.engine.operators.base import IdSource, Lease, Operator, leased
from cqlstream.engine.queues import Queue, lock_of

MIN_ROWS = 2048  # input rows from which an operator call is worth handing to another thread
MIN_BLOCK = 1024  # ids an operator's block holds at least
OVERFLOW = 1 << 32  # ids one call may take beyond its block (4G rows: far beyond one call's memory)
HIGH = 1 << 62  # overflow ids start here (below seeding's OWN_IDS bit, 2^63)


def outputs(op: Operator) -> list[Queue]:
    """The queues `op` writes: its output, and its members' outputs for a fan-out operator."""
    return op.output_queues()


def shared(op: Operator) -> list[object]:
    """The objects `op` may share with other operators, as it declares them: its shared stores
    (`Operator.shared_stores`) and the other operator objects it uses (`shared_operators`)."""
    return [*op.shared_stores(), *op.shared_operators()]


def reads(op: Operator) -> list[Queue]:
    """The queues whose contents `op`'s call depends on: its inputs and its stores' queues."""
    return [*op.inputs, *(st.queue for st in op.shared_stores())]


@dataclass
class Graph:
    """The plan as a DAG over plan positions: `deps[i]` must have run before `i` in a pass."""

    ops: list[Operator]
    deps: list[set[int]]
    succ: list[list[int]]
    reads: list[list[Queue]]
    readers: dict[int, list[int]]  # id(queue) → positions of the operators reading it
    queues: list[Queue]
    depth: list[int]  # level of each operator: 0 without dependencies, else 1 + its dependencies' highest


def graph(operators: Sequence[Operator]) -> Graph:
    ops = list(operators)
    producer: dict[int, int] = {}
    for i, op in enumerate(ops):
        for q in outputs(op):
            producer[id(q)] = i
    objs = [shared(op) for op in ops]
    rd = [reads(op) for op in ops]
    deps: list[set[int]] = [set() for _ in ops]
    for i in range(len(ops)):
        for q in rd[i]:
            p = producer.get(id(q))
            if p is not None and p != i:
                deps[i].add(p)
    index = {id(op): i for i, op in enumerate(ops)}
    holder: dict[int, int] = {}  # id(shared object) → the last position holding it
    for i in range(len(ops)):
        for x in objs[i]:
            j = index.get(id(x))
            if j is not None and j != i:  # refers to another operator of the plan
                deps[i].add(j)
            k = holder.get(id(x))
            if k is not None and k != i:  # an object declared twice (a self-join's one view) is no edge
                deps[i].add(k)
            holder[id(x)] = i
    # every edge from the lower plan position to the higher: acyclic whatever the plan, and a
    # producer placed after its consumer runs after it, as in round robin
    flipped: list[set[int]] = [set() for _ in ops]
    for i, ds in enumerate(deps):
        for d in ds:
            flipped[max(i, d)].add(min(i, d))
    deps = flipped
    succ: list[list[int]] = [[] for _ in ops]
    for i, ds in enumerate(deps):
        for d in ds:
            succ[d].append(i)
    readers: dict[int, list[int]] = {}
    queues: dict[int, Queue] = {}
    for i in range(len(ops)):
        for q in rd[i]:
            readers.setdefault(id(q), []).append(i)
            queues[id(q)] = q
    depth = [0] * len(ops)
    for i, ds in enumerate(deps):  # dependencies have lower positions: their depth is known
        depth[i] = 1 + max((depth[d] for d in ds), default=-1)
    return Graph(ops, deps, succ, rd, readers, list(queues.values()), depth)


def priorities(g: Graph) -> list[float]:
    """Estimated seconds from each operator's start to the end of the plan along its consumers."""
    est = [op.counters.seconds / op.counters.calls if op.counters.calls else 0.0 for op in g.ops]
    level = [0.0] * len(g.ops)
    for i in reversed(range(len(g.ops))):  # consumers have higher positions (`graph`)
        level[i] = est[i] + max((level[s] for s in g.succ[i]), default=0.0)
    return level


# ---------------------------------------------------------------- ids


def refill(g: Graph, ids: IdSource) -> list[Lease]:
    """Each operator's lease for the pass (calling thread, plan order): its block topped up to
    twice its recent use, and its overflow range from its plan position."""
    high = max(ids.high, HIGH)
    out = []
    for i, op in enumerate(g.ops):
        le = op.id_lease
        if le is None or le.source is not ids:
            le = op.id_lease = Lease(ids, 0, 0)
        le.recent = max(le.used, le.recent / 2)
        want = max(MIN_BLOCK, int(2 * le.recent))
        if le.end - le.next < want:
            le.start = le.next = ids.reserve(want)
            le.end = le.next + want
        le.used = 0
        le.over_next = le.over_start = high + i * OVERFLOW
        le.over_end = le.over_start + OVERFLOW
        out.append(le)
    return out


def settle(leases: list[Lease], ids: IdSource) -> None:
    """After the pass: the overflow ids drawn are never handed out again."""
    used = [le.over_next for le in leases if le.over_next > le.over_start]
    if used:
        ids.high = max(max(ids.high, HIGH), *used)


# ---------------------------------------------------------------- the pass


@dataclass
class Outcome:
    """What one parallel pass did: operator calls finished, and the errors raised, by plan
    position."""

    done: int = 0
    errors: dict[int, BaseException] = field(default_factory=dict)  # plan position → its call's error


def first_ready(ready: list[int], level: list[float]) -> int:
    """The ready operator to run next: on one thread the first in plan order (round robin's
    order: a consumer right after its producer, whose output is still in the cache); on more,
    the longest estimated path to the end first (then plan order), so long chains start early."""
    if parallel.threads() == 1:
        return min(ready)
    return max(ready, key=lambda i: (level[i], -i))


_at = threading.local()  # .pos: (the pass, the position) of the call this thread runs


def reserving(op: Operator) -> bool:
    """Whether `op`'s calls may reserve memory (`limits.reserve`: its class's module uses it)."""
    return getattr(sys.modules.get(type(op).__module__), "reserve", None) is limits.reserve


pick: Callable[[list[int], list[float]], int] = first_ready
"""Test hook: which ready operator a free thread runs (results must not care)."""

passes: list[Pass] = []
"""The passes under way (tests look at what runs)."""


Check = Callable[[], bool]  # the run's limit check: True stops it (engine/scheduler.py)


class Pass:
    """The state of one pass, shared by the threads running it (all under `cv`). With a `ledger`
    the calls are committed in plan order and checked per call (`_commit`); with a `check` the
    pass goes level by level (`gate`: the level running; operators of the next wait in `parked`)
    and checks between levels; `halted` when the check stopped it."""

    def __init__(
        self,
        g: Graph,
        budget: int | None,
        level: list[float],
        leases: list[Lease],
        check: Check | None = None,
        guard: limits.LimitGuard | None = None,
        ledger: Ledger | None = None,
    ) -> None:
        self.g, self.budget, self.level, self.leases = g, budget, level, leases
        self.check, self.guard = check, guard
        n = len(g.ops)
        # the limits as a graph (`ledger`): calls committed in plan order, checked at each commit
        self.ledger = ledger
        self.reports: list[Report | None] = [None] * n
        self.results: list[tuple[int, BaseException | None] | None] = [None] * n
        self.cp = 0  # calls committed: positions < cp
        self.gated = [False] * n  # (test hook) an operator that starts only once cp reaches it
        self.gated_wait: list[int] = []
        # a call that may reserve memory waits there for the calls before it to be committed; so
        # that they all can end, at most threads - 1 such calls run while an operator before them
        # has not started ("unsafe": one thread at least stays free to start it)
        self.reserves = [ledger is not None and reserving(op) for op in g.ops]
        self.begun = [False] * n
        self.low = 0  # the lowest position not started yet
        self.unsafe: set[int] = set()
        self.room = parallel.threads() - 1
        self.reserving = 0  # calls waiting in `reserve`: helper threads take any call meanwhile
        self.over: list[limits.Overrun] = []  # queries found over a limit, in the order found
        self.commit_stop = False  # a call raised: nothing after it is committed (round robin raised there)
        self.cv = threading.Condition()
        self.waiting = [len(d) for d in g.deps]
        self.ready = [i for i, k in enumerate(self.waiting) if k == 0 and not self._gated(i)]
        self.gated_wait = [i for i, k in enumerate(self.waiting) if k == 0 and self._gated(i)]
        self.left = len(g.ops)
        self.gate = 0 if check is not None else len(g.ops)  # operators above this level wait
        self.parked: list[int] = []
        self.level_left: dict[int, int] = {}  # level → its operators not finished yet
        for d in g.depth:
            self.level_left[d] = self.level_left.get(d, 0) + 1
        self.level_done = 0  # elements the current level's calls consumed
        self.halted = False
        self.overdrawn = False  # a call of the current level was abandoned over a limit (Overdraft)
        self.out = Outcome()
        self.stop = len(g.ops)  # no operator after this position starts (an error)
        self.running: set[int] = set()  # positions of the operators running now
        self.broken = False  # a thread's loop failed outside an operator call
        self.sizes: dict[int, bool] = {}  # position → whether its waiting input is big (`big`)

    def loop(self, helper: bool = False) -> None:
        """One thread's share: run ready operators until the pass is over. A `helper` (not the
        calling thread) takes only operators with `MIN_ROWS` input rows waiting: handing a tiny
        call to another thread costs more than the call."""
        try:
            self._loop(helper)
        except BaseException:  # a bug of the pass itself: wake the other threads, then raise
            with self.cv:
                self.broken = True
                self.cv.notify_all()
            raise

    def _loop(self, helper: bool) -> None:
        cv = self.cv
        while True:
            with cv:
                while True:
                    if self.left == 0 or self.broken or self.halted:
                        return
                    ready = [i for i in self.ready if self.big(i)] if helper and not self.reserving else self.ready
                    if self.ledger is not None and len(self.unsafe) >= self.room:
                        ready = [i for i in ready if not self.reserves[i] or self.low >= i]
                    if ready:
                        i = pick(ready, self.level)
                        self.ready.remove(i)
                        self.running.add(i)
                        if self.reserves[i] and self.low < i:
                            self.unsafe.add(i)
                        self.begun[i] = True
                        while self.low < len(self.begun) and self.begun[self.low]:
                            self.low += 1
                        break
                    cv.wait()
            n, err = self.call(i)
            with cv:
                self.running.discard(i)
                self.unsafe.discard(i)
                self.out.done += n
                self.level_done += n
                self.results[i] = (n, err)
                if err is not None:
                    self._failed(i, err)
                self._finished(i)
                if self.ledger is not None:
                    self._commit()
                cv.notify_all()

    def in_order(self) -> None:
        """The pass on the calling thread alone: every operator in plan order (what `loop` does
        on one thread: an operator's dependencies all have lower positions), stopping at the
        first error. With a check: level by level (plan order within a level), as `loop`."""
        order: Sequence[int] = range(len(self.g.ops))
        if self.ledger is not None:
            for i in order:
                n, err = self.call(i)
                self.out.done += n
                self.results[i] = (n, err)
                if err is not None:
                    self._failed(i, err)
                self._commit()
                if self.commit_stop:
                    return
            return
        if self.check is not None:
            order = sorted(order, key=lambda i: (self.g.depth[i], i))
        for i in order:
            n, err = self.call(i)
            self.out.done += n
            if err is not None:
                self._failed(i, err)
                if self.check is None:
                    return
            if self.check is not None:
                self.level_done += n
                self._level_end(i)
                if self.halted:
                    return

    def big(self, i: int) -> bool:
        """Whether operator `i` has at least MIN_ROWS input rows waiting (cached for the pass:
        its inputs are complete once it is ready)."""
        b = self.sizes.get(i)
        if b is None:
            n = 0
            for r in self.g.ops[i].readers:
                with lock_of(r.q):  # another reader of the queue may be trimming it
                    n += r.pending_count()
            b = self.sizes[i] = n >= MIN_ROWS
        return b

    def call(self, i: int) -> tuple[int, BaseException | None]:
        op = self.g.ops[i]
        if not op.active or i > self.stop:
            return 0, None
        led = self.ledger
        held = op.held_error
        if held is not None:  # its call in an earlier pass failed after the one raised then
            op.held_error = None
            return 0, held
        at = getattr(_at, "pos", None)
        _at.pos = (self, i)
        try:
            with leased(self.leases[i]):
                if self.guard is None:
                    return op.step(self.budget), None
                with limits.running(self.guard):
                    return op.step(self.budget), None
        except BaseException as e:  # raised by the scheduler after the pass, first in plan order
            return 0, e
        finally:
            _at.pos = at
            if led is not None:  # what the call left, before any operator sharing it starts
                self.reports[i] = led.measure(i)

    def reserve(self, op: object, nbytes: int) -> bool:
        """`LimitGuard.reserve` from a call of this pass: once every call before it is committed,
        weigh `nbytes` against the ledger plus what the call left so far, as round robin's
        reservation weighs them against the live state (False: not a call of this pass)."""
        at = getattr(_at, "pos", None)
        if at is None or at[0] is not self or self.ledger is None:
            return False
        i = at[1]
        with self.cv:
            self.reserving += 1
            self.cv.notify_all()
            try:
                while self.cp < i and not self.broken and not self.commit_stop:
                    self.cv.wait()
            finally:
                self.reserving -= 1
            over = self.ledger.reserve(self.g.ops[i], nbytes, self.ledger.measure(i)) if self.cp >= i else []
        if over:
            raise limits.Overdraft(over)
        return True

    def _gated(self, i: int) -> bool:
        return self.gated[i] and self.cp < i

    def _commit(self) -> None:
        """Commit the calls ended, in plan order (under `cv`, or on the one thread): each one's
        report into the ledger, then round robin's check after a call that did work. Queries
        found over a limit are dropped from the ledger and the pass goes on for the others, as
        round robin's run goes on after suspending them (the scheduler returns at the pass's
        end, and the run suspends them before anything else runs)."""
        led = self.ledger
        assert led is not None
        ops, results = self.g.ops, self.results
        while self.cp < len(ops) and not self.commit_stop and (res := results[self.cp]) is not None:
            i = self.cp
            n, err = res
            gone = led.gone(ops[i])
            if err is not None and not gone and not isinstance(err, limits.Overdraft):
                self.commit_stop = True  # round robin raises here: no check, nothing after
                self.ready.extend(self.gated_wait)  # (they start nothing: after the error)
                self.gated_wait = []
                break
            self.cp = i + 1
            if gone:  # round robin never calls it again (its queries were suspended): what it did
                continue  # to shared state the next sharer's report brings in
            rep = self.reports[i]
            if rep is not None:
                led.commit(rep)
            if isinstance(err, limits.Overdraft):  # the call was abandoned: its queries stop here
                self._over([o for o in err.overruns if o.query_id not in led.suspended])
            elif n and led.armed():
                self._over(led.check())
        if self.gated_wait:
            opened = [j for j in self.gated_wait if j <= self.cp]
            if opened:
                self.gated_wait = [j for j in self.gated_wait if j > self.cp]
                self.ready.extend(opened)

    def _over(self, found: list[limits.Overrun]) -> None:
        if found:
            self.over.extend(found)
            assert self.ledger is not None
            self.ledger.suspend({o.query_id for o in found})

    def _failed(self, i: int, err: BaseException) -> None:
        """Operator `i`'s call raised `err`. No operator after it in plan order starts, except after
        an Overdraft in a pass checking limits: its level ends (every call abandoned over a limit
        in the level is found whatever the threads) and the pass halts there."""
        self.out.errors[i] = err
        if self.ledger is not None and isinstance(err, limits.Overdraft):
            return  # committed in plan order as a check that found its queries over
        if self.check is not None and isinstance(err, limits.Overdraft):
            self.overdrawn = True
        else:
            self.stop = min(self.stop, i)

    def _finished(self, i: int) -> None:
        self.left -= 1
        gate = self.gate
        for s in self.g.succ[i]:
            self.waiting[s] -= 1
            if self.waiting[s] == 0:
                if self._gated(s):
                    self.gated_wait.append(s)
                else:
                    (self.ready if self.g.depth[s] <= gate else self.parked).append(s)
        if self.check is not None:
            self._level_end(i)

    def _level_end(self, i: int) -> None:
        """Operator `i` finished (under `cv`): when it was the last of its level, check (if the
        level did work) while no operator runs, then open the next level or halt the pass."""
        d = self.g.depth[i]
        self.level_left[d] -= 1
        if self.level_left[d] or self.halted:
            return
        assert self.check is not None
        over = bool(self.level_done) and self.check()  # also after an Overdraft: others may be over
        if over or self.overdrawn:
            self.halted = True
            return
        self.level_done = 0
        self.gate = d + 1
        self.ready.extend(self.parked)
        self.parked = []


def run_pass(
    g: Graph, budget: int | None, ids: IdSource, level: list[float], check: Check | None = None
) -> tuple[int, bool]:
    """Call every operator once (producers first), on up to `parallel.threads()` threads: the
    elements consumed, and whether the limit check found a query over a limit (the run's own
    check, `LimitGuard.check`: per call on a ledger, the queries found in `guard.over`; another
    callable: after each level that did work, stopping the pass). The error of the first failing
    operator in plan order is raised."""
    leases = refill(g, ids)
    guard = limits.current() if check is not None else None
    ledger = None
    own = guard is not None and getattr(check, "__self__", None) is guard
    if guard is not None and own and not by_levels:
        ledger = Ledger(guard, g.ops)  # the run's own check: as a graph, checked per call
        p = Pass(g, budget, level, leases, None, guard, ledger)
        guard.reserve_hook = p.reserve
    else:
        p = Pass(g, budget, level, leases, check, guard)
        if guard is not None:
            guard.freeze()
    passes.append(p)
    try:
        helpers = min(parallel.threads(), max(len(g.ops), 1)) - 1
        if helpers == 0 and pick is first_ready:  # one thread: plan order, no hand-over machinery
            p.in_order()
        else:
            tasks = [p.loop, *(lambda: p.loop(helper=True) for _ in range(helpers))]
            parallel.run_all(tasks, count_help=False)
    finally:
        passes.remove(p)
        settle(leases, ids)
        if guard is not None:
            guard.thaw()
            guard.reserve_hook = None
    if ledger is not None:
        return _ledger_outcome(p, ledger, g)
    if p.out.errors:
        first = min(p.out.errors)
        err = p.out.errors[first]
        if isinstance(err, limits.Overdraft):  # every call abandoned over a limit: one suspension
            over: dict[int, limits.Overrun] = {}
            for _, e in sorted(p.out.errors.items()):  # plan order, not the order calls ended
                if isinstance(e, limits.Overdraft):
                    for o in e.overruns:
                        over.setdefault(o.query_id, o)
            err = limits.Overdraft(list(over.values()))
        for i, e in p.out.errors.items():  # raised at the operator's next call, as sequentially
            if i != first and not (isinstance(e, limits.Overdraft) and isinstance(err, limits.Overdraft)):
                g.ops[i].held_error = e
        raise err
    return p.out.done, p.halted


def _ledger_outcome(p: Pass, ledger: Ledger, g: Graph) -> tuple[int, bool]:
    """The end of a pass checked per call: the queries found over a limit go to the guard (the
    run suspends them, `Dsms.run`); an error is raised as round robin raises it, first in plan
    order, unless a query was found over before it (round robin suspended it and met the error in
    the run after: the operator raises it at its next call). Errors and overdrafts of operators
    only suspended queries used vanish with them."""
    assert p.guard is not None
    p.guard.checks += ledger.checks
    errors = {
        i: e for i, e in p.out.errors.items() if not isinstance(e, limits.Overdraft) and not ledger.gone(g.ops[i])
    }
    if p.over:
        p.guard.over = p.over
        for i, e in errors.items():
            g.ops[i].held_error = e
        return p.out.done, True
    if errors:
        first = min(errors)
        for i, e in errors.items():
            if i != first:
                g.ops[i].held_error = e
        raise errors[first]
    return p.out.done, False


by_levels = False
"""Test hook and fallback: a pass with the run's limit check runs by levels (sessions 16-18)."""


__all__ = ["Graph", "graph", "priorities", "run_pass"]
