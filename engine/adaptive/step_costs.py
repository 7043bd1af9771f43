"""A-Caching's time model of a join's probe steps: what a step does, priced by its measured times.

A pipeline's step probes one input with the rows that reached it. Its work is not a fixed cost
per row: a hash (or stab-index) step does work per probing row and per candidate pair it meets
(its matches), a nested-loop step (a band or other condition no index serves) meets every live
row of the window for each probing row, so its pairs are probe rows × window rows, each then tested by the
condition (columns gathered, an expression evaluated): a nested-loop pair costs more than a
hash match. The join counts the candidate pairs anyway (`candidate_pairs`), so every step run
gives (probing rows, candidate pairs, seconds, its kind), and one least-squares fit over all
steps of the join,

    seconds = a + b_row · rows + b_match · hash pairs + b_scan · nested-loop pairs   (all ≥ 0),

prices both kinds of step with the same four coefficients: the steps differ in what they do,
not in the price of doing it. Pooling the steps gives the fit rows and pairs that vary by
orders of magnitude (a nested-loop step against a hash step), which a per-step fit over calls
of nearly equal size cannot separate from its intercept: that is what made the earlier per-step
fit charge a costly band step's time to its per-call constant, which a cache saves only when
every event of a call hits.

A step's rows and pairs per probing row of its pipeline (its fan-in and its meetings) are kept
per step from the same observations; a cache that serves a share h of a pipeline's probing rows
saves that share of its segment steps' row and pair work, and their per-call constant a only
in calls where every probing row hits (the step is then skipped)."""

from __future__ import annotations

from collections import deque

import numpy as np

STEP_OBS = 16  # recent runs kept per step, for its rows and pairs per probing row (the
# windows fill and the cache's first misses are its coldest: old runs would bias them)
POOLED_OBS = 512  # observations kept over all steps of the join, for the fit


class StepCosts:
    """Measured step runs of one join's pipelines and the fitted price of a step's work."""

    def __init__(self, n: int) -> None:
        # per pipeline and step: (probing rows of the pipeline, rows into the step, pairs, seconds)
        self.steps: list[list[deque[tuple[float, float, float, float]]]] = [
            [deque(maxlen=STEP_OBS) for _ in range(max(n - 1, 1))] for _ in range(n)
        ]
        # the same for runs on a used cache's misses only (inside its segment): the misses are
        # the keys the cache lacks, whose fan-out differs from the hits' (on the costly-probe
        # bench 0.3 against 2.1 matches per row), so they stand in only where nothing else is
        self.misses: list[list[deque[tuple[float, float, float, float]]]] = [
            [deque(maxlen=STEP_OBS) for _ in range(max(n - 1, 1))] for _ in range(n)
        ]
        # every run, clean or on misses: (rows into the step, pairs), for the pairs per row into
        # the step, which follow the probed window (a nested loop's pairs per row are its size,
        # whatever keys the rows carry) and must be recent while a used cache hides the clean runs
        self.recent: list[list[deque[tuple[float, float]]]] = [
            [deque(maxlen=STEP_OBS) for _ in range(max(n - 1, 1))] for _ in range(n)
        ]
        self.nested = [[False] * max(n - 1, 1) for _ in range(n)]  # the step's kind, last seen
        self.pooled: deque[tuple[float, float, float, float]] = deque(maxlen=POOLED_OBS)
        self.seen = 0
        self._memo: tuple[int, tuple[float, float, float, float] | None] = (-1, None)

    def observe(
        self, i: int, step: int, rows0: int, rows: int, pairs: int, seconds: float, misses: bool, nested: bool
    ) -> None:
        """One run of step `step` of pipeline i: the pipeline's probing rows in this call, the rows
        into the step, the candidate pairs it met and its time; `misses`: run on a used cache's
        misses only; `nested`: a nested-loop step (no equality links it to the inputs before)."""
        (self.misses if misses else self.steps)[i][step].append((float(rows0), float(rows), float(pairs), seconds))
        self.recent[i][step].append((float(rows), float(pairs)))
        self.nested[i][step] = nested
        p = float(pairs)
        self.pooled.append((float(rows), 0.0 if nested else p, p if nested else 0.0, seconds))
        self.seen += 1

    def fit(self) -> tuple[float, float, float, float] | None:
        """(a, b_row, b_match, b_scan): seconds per step run, per probing row, per hash pair and
        per nested-loop pair, by non-negative least squares over the pooled step runs (None:
        fewer than 8 runs)."""
        if self._memo[0] == self.seen:
            return self._memo[1]
        got = None
        if len(self.pooled) >= 8:
            a, b_row, b_match, b_scan = fit_nonneg(np.array(self.pooled))
            got = (a, b_row, b_match, b_scan)
        self._memo = (self.seen, got)
        return got

    def price(self, i: int, step: int) -> tuple[float, float, float] | None:
        """(a, seconds per row, seconds per pair) of step `step` of pipeline i: the fit's constant
        and row price, and its pair price for the step's kind (None: no fit yet)."""
        f = self.fit()
        if f is None:
            return None
        return f[0], f[1], f[3] if self.nested[i][step] else f[2]

    def per_row(self, i: int, step: int) -> tuple[float, float] | None:
        """Rows into step `step` of pipeline i and candidate pairs it meets, per probing row of
        the pipeline (None: never run with probing rows). The rows per probing row (the fan-out
        of the steps before) from runs on all probing rows, or from runs on a cache's misses only
        if there are none (a cache forced from the start); the pairs per row into the step from
        its most recent runs of either kind (the window it probes now)."""
        obs = self.steps[i][step] or self.misses[i][step]
        if not obs:
            return None
        rows0, rows, _pairs, _ = np.array(obs).sum(axis=0)
        if rows0 <= 0:
            return None
        into, met = np.array(self.recent[i][step]).sum(axis=0)
        fan = float(rows / rows0)
        return fan, fan * float(met / into) if into > 0 else 0.0

    def miss_per_row(self, i: int, step: int) -> tuple[float, float] | None:
        """Rows into step `step` of pipeline i and candidate pairs it met, per probing row, over
        its recent runs on a used cache's misses only (None: no such run with probing rows): what
        the segment does now for an event the cache lacks, which a hit skips."""
        obs = self.misses[i][step]
        if not obs:
            return None
        rows0, rows, pairs, _ = np.array(obs).sum(axis=0)
        if rows0 <= 0:
            return None
        return float(rows / rows0), float(pairs / rows0)

    def runs(self, i: int, step: int) -> int:
        return len(self.steps[i][step]) + len(self.misses[i][step])


def fit_nonneg(obs: np.ndarray) -> tuple[float, ...]:
    """Least squares y = c0 + c1·x1 + … (y the last column, x the others) with every coefficient
    ≥ 0 (an active-set loop: the most negative coefficient is fixed at 0 and the rest refitted).
    Columns that do not vary are left out (coefficient 0), except the constant, which stays."""
    y = obs[:, -1]
    cols = [np.ones(len(y))] + [obs[:, k] for k in range(obs.shape[1] - 1)]
    active = [0] + [k for k in range(1, len(cols)) if float(np.ptp(cols[k])) > 0]
    coef = np.zeros(len(cols))
    while active:
        x = np.stack([cols[k] for k in active], axis=1)
        sol = np.linalg.lstsq(x, y, rcond=None)[0]
        coef[:] = 0.0
        coef[active] = sol
        neg = [k for k, v in zip(active, sol) if v < 0]
        if not neg:
            break
        active.remove(min(neg, key=lambda k: coef[k]))
    else:
        coef[:] = 0.0
    return tuple(float(v) for v in coef)
