"""Back-off of an adaptive profiler on stable data: adaptivity must pay for itself.

The thesis' profilers run at a fixed pace (A-Greedy: profile tuples at rate p, the invariant
checked every `profile_batch` of them; A-Caching: candidates profiled again every
re-optimization interval). On data that does not change, every pass after the first few finds
nothing to change, and on this vectorized engine a pass costs a fixed ~0.5–1 ms
(bench/README.md), so the profiler's overhead is paid for nothing. `Backoff` stretches the
interval between passes: each re-optimization that finds nothing to change (A-Greedy: the
invariant held over a whole window of profile tuples gathered since the last change; A-Caching:
a selection that keeps the same caches) doubles the stretch, up to `cap`; a re-optimization that
changes something, or a cheap drift signal computed from what the executor counts anyway
(`RateDrift`, `FlowDrift`), resets it to 1 at once. The thesis' settings (p, window, α, the
interval) stay the base; with cap = 1 nothing is stretched (exactly the thesis' pace).

Drift signals cost a few Python float operations per call (no numpy call: its fixed cost per
call would dominate) and read only counts the executor has already made."""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Sequence
from typing import Any

from cqlstream.engine.errors import KnobError


class Backoff:
    """The stretch of a profiler's interval: 1 (the base interval) while re-optimizations change
    things, doubled by each `quiet` one up to `cap`, back to 1 at once on `reset`. `skip` spaces
    due passes out: of `stretch` due passes, one is taken."""

    LOG = 20  # changes of the stretch kept for the control table

    def __init__(self, cap: int) -> None:
        self.cap = max(int(cap), 1)
        self.stretch = 1
        self.grows = 0  # times the stretch doubled
        self.resets = 0  # times a stretched interval went back to 1
        self.skipped = 0  # due passes skipped
        self._count = 0  # due passes since the last one taken
        self.log: deque[dict[str, Any]] = deque(maxlen=self.LOG)

    @property
    def on(self) -> bool:
        return self.cap > 1

    def quiet(self, at: int) -> None:
        """A re-optimization found nothing to change (after `at` input tuples): stretch."""
        if self.stretch < self.cap:
            self.stretch = min(2 * self.stretch, self.cap)
            self.grows += 1
            self.log.append({"at": at, "stretch": self.stretch, "reason": "nothing to change"})

    def reset(self, at: int, reason: str) -> None:
        """Something changed or drifted: back to the base interval, and the next due pass is taken."""
        self._count = 0
        if self.stretch > 1:
            self.stretch = 1
            self.resets += 1
            self.log.append({"at": at, "stretch": 1, "reason": reason})

    def skip(self) -> bool:
        """A pass fell due: whether to skip it (all but one in `stretch`)."""
        self._count += 1
        if self._count >= self.stretch:
            self._count = 0
            return False
        self.skipped += 1
        return True

    def statistics(self) -> dict[str, Any]:
        return {
            "cap": self.cap,
            "stretch": self.stretch,
            "grows": self.grows,
            "resets": self.resets,
            "skipped_passes": self.skipped,
            "log": list(self.log)[-10:],
        }


class RateDrift:
    """A selection's drift signal: the shares of a call's tuples that the first conjunct keeps
    and that the whole conjunction keeps (both computed by the executor anyway) against their
    smoothed values. A share moving by more than `tolerance` plus four binomial standard
    deviations of the call's size is a drift. Calls of fewer than MIN tuples are not judged."""

    MIN = 64
    EWMA = 0.5  # weight of a call's share in the reference

    def __init__(self, tolerance: float = 0.1) -> None:
        self.tolerance = tolerance
        self.ref: list[float] | None = None

    def moved(self, n: int, kept: Sequence[int]) -> bool:
        if n < self.MIN:
            return False
        shares = [k / n for k in kept]
        ref = self.ref
        if ref is None or len(ref) != len(shares):
            self.ref = shares
            return False
        out = False
        for j, x in enumerate(shares):
            r = ref[j]
            if abs(x - r) > self.tolerance + 4.0 * math.sqrt(max(r * (1.0 - r), 1e-4) / n):
                out = True
            ref[j] = r + self.EWMA * (x - r)
        return out


class FlowDrift:
    """A join pipeline's drift signal: each probe step's flow, log(1 + rows out per row in),
    counted by the join's own probing (`flow` = rows into step 0, out of step 0, out of step 1,
    ...), against its smoothed value. A flow moving by more than `shift` (log 4: 0.03 → 3 rows
    out per row in, 2 → 11) on at least MIN rows in is a drift. The reference restarts when the
    probe order changes (its steps are other steps)."""

    MIN = 64
    SHIFT = math.log(4.0)
    EWMA = 0.5

    def __init__(self) -> None:
        self.ref: list[float | None] | None = None
        self.order: list[int] | None = None

    def moved(self, flow: Sequence[int] | None, order: list[int]) -> bool:
        if flow is None or len(flow) < 2:
            return False
        if order != self.order:
            self.order, self.ref = list(order), [None] * len(order)
        ref = self.ref
        assert ref is not None
        out = False
        for s in range(min(len(flow) - 1, len(ref))):
            rin = flow[s]
            if rin < self.MIN:
                continue
            x = math.log1p(flow[s + 1] / rin)
            r = ref[s]
            if r is None:
                ref[s] = x
                continue
            out = out or abs(x - r) > self.SHIFT
            ref[s] = r + self.EWMA * (x - r)
        return out


def cap(v: object) -> int:
    """The `profile_backoff` / `cache_backoff` knob: the largest stretch (1: no back-off), a
    power of two up to 1024."""
    if isinstance(v, bool) or not isinstance(v, int) or v < 1 or v > 1024 or v & (v - 1):
        raise KnobError(f"back-off must be a power of two in [1, 1024] (1: off), got {v!r}")
    return v
