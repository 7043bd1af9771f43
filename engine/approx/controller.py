"""The overload controller: when queue memory or engine CPU passes its limit, queries lose precision
(sampling) one step at a time, the query whose step costs least precision per unit of load saved
first (weights decide: engine/approx/shedding.py); when the load falls well below the limits for a
while, precision comes back one step at a time.

The controller only changes sampling knobs between engine calls (on `Dsms.tick`, or when a host
calls `tick`); it never touches an operator mid-call. Results therefore depend only on the history
of those knobs: replaying the same changes at the same points gives the same results, whatever the
timing that led to them. Clock and measure are injectable so tests drive it by hand.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from cqlstream.engine.approx import shedding
from cqlstream.engine.approx.config import OverloadConfig
from cqlstream.engine.errors import KnobError

if TYPE_CHECKING:
    from cqlstream.engine.dsms import Dsms

SYS_STREAM = "SysStream"  # as engine/sysstream.py NAME (not imported: it imports the parser)


@dataclass(frozen=True)
class Load:
    """What the controller watches: bytes in queues, and engine seconds per clock second since the
    last tick (None: not measured)."""

    queue_bytes: int
    cpu: float | None = None


@dataclass(frozen=True)
class Approximation:
    """The approximation in force for one query: its input sampling rate, since when (clock
    seconds) and why."""

    sampling_rate: float
    since: float
    reason: str

    def to_dict(self) -> dict[str, Any]:
        return {"sampling_rate": self.sampling_rate, "since": self.since, "reason": self.reason}


@dataclass(frozen=True)
class Change:
    """One change of a query's sampling rate (the controller's history)."""

    at: float
    query_id: int
    sampling_rate: float
    reason: str


def queue_bytes(d: Dsms) -> int:
    """Bytes held by every queue of the plan (source queues hold the input not processed yet) and
    pending in operators (`Operator.pending_bytes`: input taken but not processed yet, such as the
    elements a window holds until its next slide): everything the engine holds that it has not
    worked off."""
    return sum(pn.queue.nbytes() for pn in d.plan.nodes.values()) + sum(op.pending_bytes() for op in d.plan.operators)


def engine_seconds(d: Dsms) -> float:
    return sum(op.counters.seconds for op in d.plan.operators)


def _size(n: float) -> str:
    """Bytes for a reason sentence: B, KiB or MiB."""
    if n < 1024:
        return f"{int(n)} B"
    if n < 1 << 20:
        return f"{n / 1024:.1f} KiB"
    return f"{n / (1 << 20):.1f} MiB"


class Controller:
    """Watches the load on each `tick()` (at most every `config.interval` clock seconds) and moves
    query sampling rates along `config.ladder`."""

    def __init__(
        self,
        d: Dsms,
        config: OverloadConfig,
        clock: Callable[[], float] | None = None,
        measure: Callable[[], Load] | None = None,
    ) -> None:
        if config.policy not in shedding.policy_names():
            raise KnobError(f"overload policy must be one of {shedding.policy_names()}, got {config.policy!r}")
        self.d = d
        self.config = config
        self.clock = clock  # None: the engine's clock (kept None so a checkpoint can pickle the controller)
        self.measure = measure  # None: `_measure`
        self.frozen = False
        self.reason = (
            ""  # why the last change was made  # True while a log is replayed: the changes come from its records
        )
        self.levels: dict[int, int] = {}  # query id → its step on the ladder (absent: exact)
        self.state: dict[int, Approximation] = {}  # query id → the approximation in force
        self.history: deque[Change] = deque(maxlen=10_000)
        self.events: deque[tuple[str, str, float]] = deque(maxlen=1_000)  # for SysStream
        self.ticks = 0
        self.last: float | None = None
        self.quiet = config.settle  # ticks since the last change
        self.calm = 0  # calm ticks in a row
        self.prev = 0.0  # the pressure at the last tick
        self.load = Load(0)
        self._cpu_mark: tuple[float, float] | None = None
        self._touched: dict[tuple[str, int], tuple[Any, float]] = {}  # entity → (object, rate before)
        self._policy: tuple[str, shedding.Policy] | None = None  # (name, the policy) in use

    # ------------------------------------------------------------ measuring
    def now(self) -> float:
        return (self.clock or self.d.clock)()

    def _measure(self) -> Load:
        now, secs = self.now(), engine_seconds(self.d)
        cpu = None
        if self._cpu_mark is not None and now > self._cpu_mark[0]:
            cpu = max(secs - self._cpu_mark[1], 0.0) / (now - self._cpu_mark[0])
        self._cpu_mark = (now, secs)
        return Load(queue_bytes(self.d), cpu)

    def pressure(self, load: Load) -> tuple[float, str]:
        """The load as a fraction of its limit (the most pressed resource) and a sentence saying so."""
        c = self.config
        out: list[tuple[float, str]] = []
        if c.queue_memory_limit is not None:
            p = load.queue_bytes / c.queue_memory_limit
            rel = ">" if p > 1 else "<="
            out.append((p, f"queue memory {_size(load.queue_bytes)} {rel} {_size(c.queue_memory_limit)}"))
        if c.cpu_limit is not None and load.cpu is not None:
            p = load.cpu / c.cpu_limit
            rel = ">" if p > 1 else "<="
            out.append((p, f"engine cpu {load.cpu:.2f} s/s {rel} {c.cpu_limit:g} s/s"))
        return max(out, key=lambda x: x[0]) if out else (0.0, "no limit watched")

    # ------------------------------------------------------------ deciding
    def tick(self, force: bool = False) -> bool:
        """Measure and, when due, move one query one step; True when some query's rate changed."""
        now = self.now()
        if self.frozen or (not force and self.last is not None and now - self.last < self.config.interval):
            return False
        self.last = now
        self.ticks += 1
        self.load = (self.measure or self._measure)()
        p, why = self.pressure(self.load)
        self.quiet += 1
        moved = None
        falling, self.prev = p < self.prev, p
        if p > 1:
            self.calm = 0
            # over the limit but already falling (a backlog being worked off): wait and see
            if self.quiet >= self.config.settle and not falling:
                moved = self._step("degrade", p)
        elif p < self.config.recover_below:
            self.calm += 1
            if self.calm >= self.config.calm:
                moved = self._step("restore")
                self.calm = 0
        else:
            self.calm = 0
        if moved is not None:
            self.quiet = 0
        return self.apply(now, why if p > 1 else f"load fell: {why}")

    def policy(self) -> shedding.Policy:
        """The configured policy (a stateful one is made once per controller and kept)."""
        cur = getattr(self, "_policy", None)
        if cur is None or cur[0] != self.config.policy:
            cur = self._policy = (self.config.policy, shedding.make_policy(self.config.policy))
        return cur[1]

    def _candidates(self) -> list[shedding.Candidate]:
        lad = self.config.ladder
        out = []
        for h in sorted(self.d.queries.values(), key=lambda h: h.id):
            if h.pnode is None or SYS_STREAM.lower() in h.reads:  # monitoring stays exact
                continue
            k = self.levels.get(h.id, 0)
            out.append(
                shedding.Candidate(
                    h.id,
                    h.weight,
                    lad[k],
                    lad[k + 1] if k + 1 < len(lad) else None,
                    lad[k - 1] if k > 0 else None,
                )
            )
        return out

    def _step(self, move: str, pressure: float = 1.0) -> int | None:
        """Move queries one step each, as the policy picks them. Restoring: until some query's
        effective rate changes (a query sharing its operators down to the source moves only when
        every query reading that source has moved). Shedding: until the kept input (the sum of the
        effective rates) has fallen by `config.decrease` at least, and to 1/`pressure` of itself
        when the load is further over its limit, so a heavy overload is met in a few ticks
        (precision then comes back one step at a time). The last query moved, or None."""
        before = shedding.place(self.d, self.rates()).effective
        target = min(1.0 - self.config.decrease, 1.0 / max(pressure, 1.0)) * sum(before.values())
        moved = None
        for _ in range(len(self.config.ladder) * max(len(self.d.queries), 1)):
            qid = self.policy()(self._candidates(), move)
            if qid is None:
                break
            moved = qid
            k = self.levels.get(qid, 0) + (1 if move == "degrade" else -1)
            if k:
                self.levels[qid] = k
            else:
                self.levels.pop(qid, None)
            now = shedding.place(self.d, self.rates()).effective
            if now != before and (move == "restore" or sum(now.values()) <= target):
                break
        return moved

    # ------------------------------------------------------------ applying
    def rates(self) -> dict[int, float]:
        """Each degraded query's rate on the ladder."""
        return {q: self.config.ladder[k] for q, k in self.levels.items()}

    def apply(self, now: float, reason: str) -> bool:
        """Set the sampling knobs for the current levels (also after a plan change); record and
        publish every query whose effective rate changed. True when one did."""
        self.levels = {q: k for q, k in self.levels.items() if q in self.d.queries and self.d.queries[q].pnode}
        pl = shedding.place(self.d, self.rates())
        want: dict[tuple[str, int], tuple[Any, float]] = {}
        for name, r in pl.sources.items():
            if r < 1.0:
                inp = self.d.inputs[name]
                want[("src:" + name, id(inp))] = (inp, r)
        for oid, (op, r) in pl.operators.items():
            if r < 1.0:
                want[("op", oid)] = (op, r)
        for ekey, (obj, before) in list(self._touched.items()):
            if ekey not in want:
                obj.sampling_rate = before
                del self._touched[ekey]
        for ekey, (obj, r) in want.items():
            if ekey not in self._touched:
                self._touched[ekey] = (obj, obj.sampling_rate)
            obj.sampling_rate = min(self._touched[ekey][1], r)
        changed = False
        self.reason = reason
        for qid in sorted(set(self.state) | {q for q, r in pl.effective.items() if r < 1.0}):
            r = pl.effective.get(qid, 1.0)
            old = self.state.get(qid)
            if (old.sampling_rate if old else 1.0) == r:
                continue
            changed = True
            if r < 1.0:
                self.state[qid] = Approximation(r, now, reason)
            else:
                self.state.pop(qid, None)
            self.history.append(Change(now, qid, r, reason))
            self.events.append((f"query:{qid}", "approximation", r))
        return changed

    def release(self) -> None:
        """Give every knob back its value from before the controller (the controller is off)."""
        self.levels.clear()
        self.apply(self.now(), "approximation turned off")

    def set_levels(self, levels: dict[int, int], reason: str) -> None:
        """Put queries at these ladder steps (a replayed log record of a live decision)."""
        self.levels = {q: k for q, k in levels.items() if k}
        self.apply(self.now(), reason)

    def of(self, qid: int) -> dict[str, Any] | None:
        """The approximation in force for query `qid` and the rows admission refused it so far
        (None: exact, nothing refused)."""
        a = self.state.get(qid)
        refused = self.d.admission.by_query.get(qid, 0)
        if a is None and not refused:
            return None
        out = a.to_dict() if a is not None else {"sampling_rate": 1.0, "since": None, "reason": "exact again"}
        return {**out, "refused_rows": refused}

    def take_events(self) -> list[tuple[str, str, float]]:
        """Changes of approximation since the last call, then admission's refusals (SysStream)."""
        out = list(self.events) + self.d.admission.take_events()
        self.events.clear()
        return out

    def table(self) -> dict[str, Any]:
        """Counters for the engine's control table."""
        return {
            "approx_queries": len(self.state),
            "approx_queue_bytes": self.load.queue_bytes,
            "approx_changes": len(self.history),
            "approx_refused_rows": self.d.admission.refused,
        }
