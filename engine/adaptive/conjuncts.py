"""The adaptive order of a selection's conjuncts: executor, profiler and re-optimizer of
A-Greedy (thesis Fig 4.10) in one object that the select operator calls once per batch.

The executor evaluates the conjuncts in the current order, each on the survivors of the ones
before it (vectorized), timing each under the `measured` cost model. The profiler takes tuples at
rate p, in passes (profile.Passes) that ride on the executor's calls: the sampled tuples are
appended to each later conjunct's survivors, so every conjunct's call gives their drop bits too;
the sampled tuples some conjunct drops become profile tuples. Every `profile_batch` profile
tuples, the re-optimizer (a policy) checks its invariant over the matrix view and may change the
order. Order never changes a result.

Back-off (`backoff` > 1, engine/adaptive/backoff.py): once the window holds only profile tuples
gathered since the last change and the invariant still holds, each further check that holds
doubles the stretch (one due pass in `stretch` is taken); a re-ordering, or the shares of tuples
that the first conjunct and the whole conjunction keep (the executor's own counts) drifting,
resets it, and a drifting call that took no pass is profiled at once (`_profile_apart`).
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from cqlstream.cql.logical import expr as X
from cqlstream.engine.adaptive.backoff import Backoff, RateDrift
from cqlstream.engine.adaptive.config import OFF, AdaptiveConfig
from cqlstream.engine.adaptive.matrix import MatrixView
from cqlstream.engine.adaptive.policies import POLICIES, Policy, Situation
from cqlstream.engine.adaptive.profile import CostMeter, Passes, ProfileWindow, strata
from cqlstream.engine.batch import Batch

if TYPE_CHECKING:
    import logging

    from cqlstream.engine.exprs import Evaluator


def _log() -> logging.Logger:
    """The adaptive machinery's logger (logging is imported when a change is logged, not at start)."""
    import logging

    return logging.getLogger("cqlstream.adaptive")


def static_cost(e: X.Expr) -> int:
    """Vectorized operations a conjunct runs per tuple: one per operator or function node, plus
    one for keeping the survivors."""
    return 1 + sum(1 for _ in _inner(e))


def _inner(e: X.Expr) -> Iterator[X.Expr]:
    if e.children():
        yield e
        for c in e.children():
            yield from _inner(c)


@dataclass(frozen=True)
class Reorder:
    """One change of order: its number, after how many input tuples, from what to what, why."""

    seq: int
    at: int
    old: tuple[int, ...]
    new: tuple[int, ...]
    reason: str

    def as_dict(self) -> dict[str, Any]:
        return {"seq": self.seq, "at": self.at, "old": list(self.old), "new": list(self.new), "reason": self.reason}


class AdaptiveOrder:
    LOG = 50  # re-orderings kept for the control table
    EVENTS = 100  # re-orderings kept until SysStream publishes them

    def __init__(self, conjuncts: Sequence[X.Expr], config: AdaptiveConfig) -> None:
        self.conjuncts = list(conjuncts)  # original numbering; the order is a permutation of it
        self.n = len(self.conjuncts)
        self.order = list(range(self.n))
        self.names = [c.sql() for c in self.conjuncts]
        self.reads = [sorted(X.columns(c)) for c in self.conjuncts]  # input columns each conjunct reads
        self.static = np.array([static_cost(c) for c in self.conjuncts], dtype=float)
        self.static_costs = self.static * 1e-9  # operations scaled to nanoseconds (the `static` cost model)
        self.log: deque[Reorder] = deque(maxlen=self.LOG)
        self.events: deque[Reorder] = deque(maxlen=self.EVENTS)
        self.reorders = 0
        self.seen = 0
        self.configure(config)

    def configure(self, config: AdaptiveConfig) -> None:
        """(Re)start profiling with `config`; the current order stays."""
        n = self.n
        self.config = config
        self.policy: Policy | None = None if config.policy == OFF or n < 2 else POLICIES[config.policy](n, config)
        self.passes = Passes(config.p, config.profile_pass, seed=0x5EED, cap=config.w)
        self.window = ProfileWindow(n, config.w)
        self.view = MatrixView(n)
        self.meter = CostMeter(n, config.w / config.p)
        self.pending: list[np.ndarray] = []  # drop bits of profile tuples not yet in the window
        self.pending_rows = 0
        self.profiled = 0  # tuples sampled (dropped or not)
        self.untimed = 0  # input tuples since the meter last had a timed batch
        self.backoff = Backoff(config.backoff)
        self.drift = RateDrift()
        self.calm_from = 0  # window.total at the last change: later profile tuples saw this order
        self.kept1 = 0  # tuples the first conjunct kept in the last call (set by the executor)

    @property
    def ordered(self) -> list[X.Expr]:
        return [self.conjuncts[i] for i in self.order]

    # ------------------------------------------------------------ executor
    def run(self, b: Batch, ev: Evaluator) -> Batch:
        if self.policy is None:
            return self._survivors(b, self.order, ev)
        n_in = len(b)
        self.seen += n_in
        bo = self.backoff
        picked = self.passes.take(n_in)
        if bo.on and len(picked) and bo.skip():
            picked = picked[:0]
        # `static` costs need no clock: then only the calls that profile are timed (for the
        # control table's cost_ns), not every call
        timed = self.config.cost_model == "measured" or len(picked) > 0
        secs, tuples = np.zeros(self.n), np.zeros(self.n)
        if len(picked):
            out = self._profiled_survivors(b, ev, picked, secs, tuples)
        else:
            out = self._survivors(b, self.order, ev, secs, tuples) if timed else self._survivors(b, self.order, ev)
        if bo.on and self.drift.moved(n_in, (self.kept1, len(out))):
            bo.reset(self.seen, "selectivity drifted")
            self.calm_from = self.window.total
            if not len(picked):  # the shift is in this call: profile it now, not a pass later
                self._profile_apart(b, ev, n_in)
        self.untimed += n_in
        if timed:
            self.meter.add(secs, tuples, self.untimed)
            self.untimed = 0
        if self.pending_rows >= self.config.profile_batch:
            if self.config.cost_model == "measured" and n_in:
                self._time_one_tuple(b.slice(0, 1), ev)
            self._profile()
        return out

    def _survivors(
        self,
        b: Batch,
        order: Sequence[int],
        ev: Evaluator,
        secs: np.ndarray | None = None,
        tuples: np.ndarray | None = None,
    ) -> Batch:
        """The rows of `b` every conjunct keeps, in batch order, evaluating the conjuncts in
        `order`, each on the survivors of the ones before it (timed into `secs` / `tuples` when
        given). The survivors are carried as positions and each conjunct sees only the columns it
        reads, gathered at them: one copy of the whole row at the end, not one per conjunct (a
        15-column stream filtered by two conjuncts copied every column twice)."""
        first: np.ndarray | None = None  # the first conjunct's mask over b
        idx: np.ndarray | None = None  # positions of the survivors, once a second conjunct runs
        cur = b
        for i in order:
            if first is not None:
                if idx is None:
                    idx = np.flatnonzero(first)
                    self.kept1 = len(idx)
                if not len(idx):
                    break
                cur = _at(b, idx, self.reads[i])
            elif not len(b):
                break
            t = time.perf_counter() if secs is not None else 0.0
            mask = ev.predicate(self.conjuncts[i], cur)
            if secs is not None and tuples is not None:
                secs[i] = time.perf_counter() - t
                tuples[i] = len(cur)
            if first is None:
                first = mask
            else:
                assert idx is not None
                idx = idx[mask]
        if first is None:
            self.kept1 = len(b)
            return b
        if idx is None:  # one conjunct: its mask, taken by one index array (not a mask per column)
            idx = np.flatnonzero(first)
            self.kept1 = len(idx)
        return b if len(idx) == len(b) else b.take(idx)

    def _profiled_survivors(
        self, b: Batch, ev: Evaluator, picked: np.ndarray, secs: np.ndarray, tuples: np.ndarray
    ) -> Batch:
        """`_survivors` in the current order with a profiling pass riding on its calls (the
        thesis merges profiler and executor, §3): the first conjunct's mask over the whole batch
        gives the sampled tuples' (`picked`, sorted) first bits, and the sampled tuples are
        appended to every later conjunct's survivors, so that conjunct's call gives their bits
        too (§4.3.1 evaluates the conjuncts after the dropping one on a profiled tuple; here a
        sampled tuple still surviving is evaluated twice, once as a survivor). A pass thus costs
        no call and no batch of its own; the survivors' part of each mask is the executor's own
        (conjuncts are evaluated row by row)."""
        bits = np.empty((self.n, len(picked)), dtype=bool)  # bits[i]: conjunct i drops the sampled tuple
        idx: np.ndarray | None = None  # positions of the survivors, after the first conjunct
        for i in self.order:
            cur = b if idx is None else _at(b, np.concatenate([idx, picked]), self.reads[i])
            t = time.perf_counter()
            mask = ev.predicate(self.conjuncts[i], cur)
            secs[i] = time.perf_counter() - t
            tuples[i] = len(cur)
            if idx is None:
                np.logical_not(mask[picked], out=bits[i])
                idx = np.flatnonzero(mask)
                self.kept1 = len(idx)
            else:
                head = len(idx)
                np.logical_not(mask[head:], out=bits[i])
                idx = idx[mask[:head]]
        assert idx is not None
        self._record(bits)
        return b if len(idx) == len(b) else b.take(idx)

    def _profile_apart(self, b: Batch, ev: Evaluator, n_in: int) -> None:
        """A pass over this call's tuples after the executor has run (the back-off's drift
        signal fired in a call that took no pass): the sample, as many as a pass of this call
        would take, evaluated by every conjunct on its own. Rare (once per shift), so its extra
        calls do not matter."""
        k = min(n_in, max(self.passes.size, min(int(self.config.p * n_in), self.config.w)))
        sample = b.take(strata(n_in, k, self.passes.rng))
        bits = np.empty((self.n, k), dtype=bool)
        for i, c in enumerate(self.conjuncts):
            np.logical_not(ev.predicate(c, sample), out=bits[i])
        self._record(bits)

    def _record(self, bits: np.ndarray) -> None:
        """Keep a pass's profile tuples (`bits`, conjunct by sampled tuple): the sampled tuples
        some conjunct drops (only those carry information, thesis §4.3.1), one row each, until
        the policy next looks."""
        self.profiled += bits.shape[1]
        rows = bits[:, np.logical_or.reduce(bits, axis=0)].T
        if len(rows):
            self.pending.append(rows)
            self.pending_rows += len(rows)

    def _time_one_tuple(self, one: Batch, ev: Evaluator) -> None:
        """Time a one-tuple call of each conjunct: its fixed overhead (the `measured` cost model)."""
        secs = np.zeros(self.n)
        for i, c in enumerate(self.conjuncts):
            t = time.perf_counter()
            ev.predicate(c, one)
            secs[i] = time.perf_counter() - t
        self.meter.intercept(secs)

    # ------------------------------------------------------------ profiler and re-optimizer
    def _profile(self) -> None:
        """Add the waiting profile tuples to the window and the view; let the policy check."""
        dropped = self.pending[0] if len(self.pending) == 1 else np.concatenate(self.pending)
        self.pending, self.pending_rows = [], 0
        expired = self.window.add(dropped)
        self.view.update(dropped, expired, self.order, self.window.rows)
        assert self.policy is not None
        s = Situation(
            self.view, self.window.rows, self.costs(), self.order, self.names, self.config.alpha, len(dropped)
        )
        d = self.policy.check(s)
        major = False
        if d is not None and list(d.order) != self.order:
            new = list(d.order)
            # a re-ordering saving less than 1 − α of the work on the window (near-equal ranks
            # swapping on noise: Table 4.2's n = 8 re-orders at every pass) changes nothing
            # that matters to the back-off
            major = not self.backoff.on or self._window_cost(new) < self.config.alpha * self._window_cost(self.order)
            self.set_order(new, d.reason, major)
        if not major and self.window.total - self.calm_from >= self.config.w:
            self.backoff.quiet(self.seen)  # the invariant holds on a window gathered under this order

    def set_order(self, order: list[int], reason: str, major: bool = True) -> None:
        """Switch to `order` (switching carries no state, thesis §3.2), logged with its reason.
        A `major` change resets the back-off; a minor one (the new order saves less than 1 − α
        of the old one's work on the window: near-equal ranks swapping on noise) does not, and
        counts as quiet."""
        old = tuple(self.order)
        self.order = list(order)
        self.view.rebuild(self.window.rows, self.order)
        if major:
            self.backoff.reset(self.seen, "re-ordered")
            self.calm_from = self.window.total
        self.reorders += 1
        r = Reorder(self.reorders, self.seen, old, tuple(order), reason)
        self.log.append(r)
        self.events.append(r)
        _log().info("conjunct order %s -> %s after %d tuples: %s", list(old), order, self.seen, reason)

    def _window_cost(self, order: list[int]) -> float:
        """The work `order` does on the profile window's tuples: each costs the conjuncts up to
        the first that drops it (every profile tuple is dropped by some conjunct; the sampled
        tuples that pass them all cost every order the same and are left out)."""
        rows = self.window.rows
        if not len(rows):
            return 0.0
        first = np.argmax(rows[:, order], axis=1)
        return float(np.cumsum(self.costs()[order])[first].sum())

    def costs(self) -> np.ndarray:
        """Cost per tuple of each conjunct under the configured cost model (seconds, or
        operations scaled to nanoseconds)."""
        return self.meter.costs() if self.config.cost_model == "measured" else self.static_costs

    # ------------------------------------------------------------ what it shows
    def drain_events(self) -> list[tuple[str, float]]:
        """SysStream rows (metric, value) of the re-orderings since the last call: `reorder`, its
        number, and `reorder_first`, the conjunct now evaluated first."""
        out = []
        while self.events:
            r = self.events.popleft()
            out += [("reorder", float(r.seq)), ("reorder_first", float(r.new[0]))]
        return out

    def statistics(self) -> dict[str, Any]:
        """Per conjunct: position, drop rate among profile tuples, cost per tuple, rank."""
        costs = self.costs()
        measured = self.meter.costs()
        drop = self.window.drop_rates()
        uncond = self.window.rows.sum(axis=0)
        pos = {c: k for k, c in enumerate(self.order)}
        return {
            "policy": self.config.policy if self.n > 1 else OFF,
            "order": list(self.order),
            "profile_probability": self.config.p,
            "profile_window": self.config.w,
            "alpha": self.config.alpha,
            "cost_model": self.config.cost_model,
            "profile_tuples": len(self.window),
            "passes": self.passes.passes - self.backoff.skipped,
            "backoff": self.backoff.statistics(),
            "conjuncts": [
                {
                    "index": i,
                    "position": pos[i],
                    "text": self.names[i],
                    "drop_rate": round(float(drop[i]), 6),
                    "cost_ops": int(self.static[i]),
                    "cost_ns": round(float(measured[i]) * 1e9, 3) if self.meter.tuples[i] > 0 else None,
                    "rank": round(float(uncond[i] / costs[i]) * 1e-6, 6),
                }
                for i in range(self.n)
            ],
            "matrix_view": self.view.v.tolist(),
            "log": [r.as_dict() for r in list(self.log)[-10:]],
        }

    def explain(self) -> str:
        order = ", ".join(f"[{i}] {self.names[i]}" for i in self.order)
        pol = self.config.policy if self.policy is not None else OFF
        bo = self.backoff
        back = f", back-off x{bo.stretch} of {bo.cap}" if bo.on and self.policy is not None else ""
        return f"conjunct order ({pol}, {self.reorders} re-orderings{back}): {order}"


def _at(b: Batch, idx: np.ndarray, cols: Sequence[int]) -> Batch:
    """The rows of `b` at positions `idx` with only columns `cols` gathered; the others are
    empty placeholders (a conjunct reads only its own columns: `X.columns`). Expressions read
    no timestamp, sign or id (only the batch's length), so those are zero-stride stand-ins of
    the right length, not three gathers per conjunct."""
    keep = set(cols)
    n = len(idx)
    return Batch(
        [c[idx] if k in keep else c[:0] for k, c in enumerate(b.cols)],
        [None if m is None or k not in keep else m[idx] for k, m in enumerate(b.nulls)],
        _TS[:n],
        _SIGN[:n],
        _ID[:n],
    )


# read-only zero-stride stand-ins for `_at`'s timestamps, signs and ids (a slice costs ~0.2 µs)
_TS = np.broadcast_to(np.zeros(1, np.int64), (1 << 40,))
_SIGN = np.broadcast_to(np.ones(1, np.int8), (1 << 40,))
_ID = np.broadcast_to(np.zeros(1, np.uint64), (1 << 40,))
