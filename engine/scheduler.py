"""Schedulers: which operator runs next and with how much work. Round robin and weighted visit
every operator in turn (parallel: round robin's passes on the engine's threads); FIFO, Greedy and Chain (thesis §2.3.2) always run the ready operator of
highest priority, to keep queues short under bursty input. None of them changes a result:
operators process whole instants whatever the order."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from cqlstream.engine import parallel_pass as PP
from cqlstream.engine.adaptive import chain as C

if TYPE_CHECKING:
    from cqlstream.engine.operators.base import Operator

Weights = Callable[[], dict[int, float]]  # → {id(operator): weight}
# called after each operator call that did work (Parallel: the guard's own check runs on its pass's
# ledger; another callable after each level of its pass that did work); True stops the run
Check = Callable[[], bool]


class RoundRobin:
    """Visit operators in plan order (producers before consumers), each with a work budget,
    until a full pass does nothing. `check` (per-query memory limits, engine/limits.py) is called
    after each operator call that did work; when it returns True the run stops there, so the
    caller can act (suspend a query) before any other operator runs."""

    name = "round-robin"

    def __init__(self, budget: int | None = None) -> None:
        self.budget = budget

    def run(self, operators: Sequence[Operator], max_passes: int | None = None, check: Check | None = None) -> int:
        total, passes = 0, 0
        while True:
            done = 0
            for op in operators:
                if op.active:
                    n = op.step(self.budget)
                    done += n
                    if n and check is not None and check():
                        return total + done
            total += done
            passes += 1
            if not done or (max_passes is not None and passes >= max_passes):
                return total


class Parallel(RoundRobin):
    """Round robin's passes with operators that do not feed each other run side by side on the
    engine's threads (engine/parallel.py; the pass and why it is safe: engine/parallel_pass.py). The
    same ids and results at every thread count, 1 included (then all on the calling thread). A
    run with the limit check (engine/limits.py) checks after each call that did work, as round
    robin, on a ledger of the sizes the calls before it in plan order left
    (engine/limits_ledger.py), and returns after the pass that found a query over a limit."""

    name = "parallel"
    _graph: tuple[tuple[tuple[int, ...], ...], PP.Graph] | None = None  # (plan key, its pass graph)

    def __getstate__(self) -> dict[str, object]:
        # the cached graph is keyed by object ids, which mean nothing in another process (and a
        # checkpoint's graph may be of an older shape): a restored scheduler builds its own
        state = self.__dict__.copy()
        state.pop("_graph", None)
        return state

    def run(self, operators: Sequence[Operator], max_passes: int | None = None, check: Check | None = None) -> int:
        if not operators:
            return 0
        key = tuple((id(op), *(id(r.q) for r in op.readers)) for op in operators)
        # ids compare as identities: the cached graph keeps its operators and queues alive
        cached = self._graph
        if cached is None or cached[0] != key:  # the plan changed
            cached = self._graph = (key, PP.graph(operators))
        g = cached[1]
        level = PP.priorities(g)
        ids = operators[0].ids
        total, passes = 0, 0
        while True:
            done, halted = PP.run_pass(g, self.budget, ids, level, check)
            total += done
            if halted:  # a query over a limit: the caller suspends it before anything else runs
                return total
            passes += 1
            if not done or (max_passes is not None and passes >= max_passes):
                return total


class Weighted(RoundRobin):
    """Round robin whose per-call budget for an operator scales with the largest weight of the
    queries using it (seed 004 §2.4): heavier queries get more work per pass. Results never
    depend on it (operators process whole instants)."""

    name = "weighted"

    def __init__(self, budget: int | None = None, weights: Weights | None = None) -> None:
        super().__init__(budget)
        self.weights: Weights = weights or (lambda: {})

    def run(self, operators: Sequence[Operator], max_passes: int | None = None, check: Check | None = None) -> int:
        total, passes = 0, 0
        w = self.weights() if self.budget is not None else {}
        while True:
            done = 0
            for op in operators:
                if op.active:
                    b = None if self.budget is None else max(1, int(self.budget * w.get(id(op), 1.0)))
                    n = op.step(b)
                    done += n
                    if n and check is not None and check():
                        return total + done
            total += done
            passes += 1
            if not done or (max_passes is not None and passes >= max_passes):
                return total


class Prioritized(RoundRobin):
    """Run the ready operator of highest priority, one call at a time (ties: the one furthest
    downstream, whose input is the oldest), until none can make progress. Priorities come from
    each operator's measured cost per tuple and selectivity along its path (`C.chart`), taken
    at the start of every run. `max_passes` here counts operator calls that did work."""

    name = "prioritized"
    rule: C.Priorities = staticmethod(C.greedy_priorities)

    def run(self, operators: Sequence[Operator], max_passes: int | None = None, check: Check | None = None) -> int:
        prio = priorities(operators, self.rule)
        rank = {id(op): (prio[id(op)], k) for k, op in enumerate(operators)}
        total, calls, idle = 0, 0, set()
        while max_passes is None or calls < max_passes:
            ready = [op for op in operators if op.active and id(op) not in idle and op.ready()]
            if not ready:
                return total
            op = self.pick(ready, rank)
            n = op.step(self.budget)
            if not n:
                idle.add(id(op))  # cannot run yet (an input not started, held): others may
                continue
            idle.clear()
            total += n
            calls += 1
            if check is not None and check():
                return total
        return total

    def pick(self, ready: list[Operator], rank: dict[int, tuple[float, int]]) -> Operator:
        return max(ready, key=lambda o: rank[id(o)])


class Fifo(Prioritized):
    """Each batch goes through its whole path before the next one starts (thesis §2.3.2)."""

    name = "fifo"
    rule = staticmethod(C.TOY_POLICIES["fifo"])


class Greedy(Prioritized):
    """The operator with the largest queue-size reduction per unit time runs first."""

    name = "greedy"
    rule = staticmethod(C.greedy_priorities)


class Chain(Prioritized):
    """Chain: operators are grouped into chains by the lower envelope of their path's progress
    chart; the chain with the steepest descent runs first, FIFO inside a chain. Close to the
    least queue memory any schedule can have (Babcock et al.)."""

    name = "chain"
    rule = staticmethod(C.chain_priorities)


class ChainLatency(Chain):
    """Chain under a latency bound: least queue memory subject to a maximum wait. An operator
    whose oldest pending input is more than `max_latency` time units behind the newest input
    any operator has runs first (the most overdue first), so no path starves however low its
    chain's priority; otherwise Chain's order."""

    name = "chain-latency"
    max_latency = 1000  # in the sources' time units

    def pick(self, ready: list[Operator], rank: dict[int, tuple[float, int]]) -> Operator:
        oldest = {id(o): _oldest(o) for o in ready}
        marks = [q.watermark for o in ready for q in o.inputs if q.watermark is not None]
        if marks:
            now = max(marks)
            late = [o for o in ready if (t := oldest[id(o)]) is not None and now - t > self.max_latency]
            if late:
                return min(late, key=lambda o: (oldest[id(o)], -rank[id(o)][1]))
        return super().pick(ready, rank)


def _oldest(op: Operator) -> int | None:
    ts = [t for r in op.readers if (t := r.oldest_ts()) is not None]
    return min(ts) if ts else None


def paths(operators: Sequence[Operator]) -> list[list[Operator]]:
    """The plan cut into paths: an operator continues the path of the one whose output is its
    only input, when it is that output's only reader; every other operator starts a path."""
    readers: dict[int, list[Operator]] = {}
    for op in operators:
        for q in op.inputs:
            readers.setdefault(id(q), []).append(op)
    nxt: dict[int, Operator] = {}
    for op in operators:
        r = readers.get(id(op.output), [])
        if len(r) == 1 and len(r[0].inputs) == 1:
            nxt[id(op)] = r[0]
    followers = {id(o) for o in nxt.values()}
    out = []
    for op in operators:
        if id(op) in followers:
            continue
        path = [op]
        while id(path[-1]) in nxt:
            path.append(nxt[id(path[-1])])
        out.append(path)
    return out


def stages(path: Sequence[Operator], operators: Sequence[Operator]) -> list[C.Stage]:
    """Measured cost per input tuple and selectivity of each operator of a path; one that feeds
    no operator sends its results out of the system (selectivity 0). Unmeasured: 1 µs, 1."""
    fed = {id(q) for op in operators for q in op.inputs}
    out = []
    for op in path:
        c = op.counters
        cost = c.seconds / c.tuples_in if c.tuples_in else 1e-6
        sel = c.tuples_out / c.tuples_in if c.tuples_in else 1.0
        out.append(C.Stage(cost, sel if id(op.output) in fed else 0.0))
    return out


def priorities(operators: Sequence[Operator], rule: C.Priorities) -> dict[int, float]:
    """id(operator) → its priority under `rule` along its path."""
    out: dict[int, float] = {}
    for path in paths(operators):
        for op, p in zip(path, rule(C.chart(stages(path, operators)))):
            out[id(op)] = p
    return out


SCHEDULERS: dict[str, type[RoundRobin]] = {
    "round-robin": RoundRobin,
    "parallel": Parallel,
    "weighted": Weighted,
    "fifo": Fifo,
    "greedy": Greedy,
    "chain": Chain,
    "chain-latency": ChainLatency,
}


def for_threads(threads: int, budget: int | None = None) -> RoundRobin:
    """The scheduler of an engine given `threads` threads (`cqlstream run --engine-threads`,
    `serve --engine-threads`): `parallel` on 2 or more, round robin on one (the same order,
    without the pass's bookkeeping)."""
    return SCHEDULERS["parallel" if threads > 1 else "round-robin"](budget)
