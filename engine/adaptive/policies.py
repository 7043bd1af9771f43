"""Re-optimizers of conjunct order (thesis ch. 4): each keeps an invariant over the matrix view
and says, after new profile tuples, whether the order must change and why. Ranks are
drop count / cost: a conjunct that drops much for little time should run early.

- A-Greedy (§4.3): the Greedy invariant over the whole view; a violation at position i is
  corrected greedily from i on (Fig 4.7). Within 4/α of the optimal order on stable data.
- Sweep (§4.4): one position j is examined per stage; a conjunct at j that out-ranks an earlier
  one (given what precedes that one) moves in front of it.
- Independent (§4.5): unconditional drop rates only (row 1 of the view); misses correlations.
- LocalSwaps (§4.6): adjacent pairs only; may stop in a local optimum.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from cqlstream.engine.adaptive import matrix
from cqlstream.engine.adaptive.config import AdaptiveConfig
from cqlstream.engine.adaptive.matrix import MatrixView


@dataclass(frozen=True)
class Decision:
    """A new order (conjunct indexes, first evaluated first) and why."""

    order: tuple[int, ...]
    reason: str


@dataclass(frozen=True)
class Situation:
    """What a policy looks at: the view for the current order, the profile window's rows, the
    cost per tuple of each conjunct, the conjuncts' texts (for reasons), α, and how many profile
    tuples just arrived."""

    view: MatrixView
    rows: np.ndarray
    costs: np.ndarray
    order: list[int]
    names: Sequence[str]
    alpha: float
    added: int


def _broken(s: Situation, i: int, j: int, what: str) -> str:
    r = s.view.ranks(s.costs, s.order)
    fi, fj = s.order[i], s.order[j]
    return (
        f"{what} broken at position {i + 1}: [{fi}] {s.names[fi]} ranks {_fmt(r[i, i])} < "
        f"{s.alpha:g} x {_fmt(r[i, j])} of [{fj}] {s.names[fj]} (profile window {len(s.rows)})"
    )


def _fmt(x: float) -> str:
    return f"{x * 1e-6:.3g}/us"  # drop counts per microsecond of cost per tuple


class AGreedy:
    name = "a-greedy"

    def __init__(self, n: int, config: AdaptiveConfig) -> None:
        self.n = n
        self.upper = np.triu(np.ones((n, n), dtype=bool), k=1)  # positions after the row's own

    def violation(self, s: Situation) -> tuple[int, int] | None:
        """The first position i whose rank is below α times the best rank after it in its row
        (and that later position j, the first best): every row at once, not a loop over rows."""
        r = s.view.ranks(s.costs, s.order)
        later = np.where(self.upper, r, -np.inf).max(axis=1)  # row i's best over positions > i
        broken = np.diagonal(r) < s.alpha * later
        if not broken.any():
            return None
        i = int(broken.argmax())
        return i, i + 1 + int(np.argmax(r[i, i + 1 :]))

    def check(self, s: Situation) -> Decision | None:
        v = self.violation(s)
        if v is None:
            return None
        reason = _broken(s, *v, "greedy invariant")
        return Decision(tuple(correct(s, v[0])), reason)


def correct(s: Situation, i: int) -> list[int]:
    """Fig 4.7: re-establish the Greedy invariant from position i, recomputing row r of the view
    from the window for each position r up to the furthest position a chosen conjunct came from."""
    order = list(s.order)
    maxr, r = i, i
    while r <= maxr and r < len(order) - 1:
        rank = matrix.row(s.rows, order, r) / s.costs[order]
        maxc = r
        for c in range(r + 1, len(order)):
            if rank[c] > rank[maxc]:
                maxc = c
                maxr = max(maxr, maxc)
        if maxc != r:
            order[r], order[maxc] = order[maxc], order[r]
        r += 1
    return order


class Independent:
    name = "independent"

    def __init__(self, n: int, config: AdaptiveConfig) -> None:
        self.n = n

    def check(self, s: Situation) -> Decision | None:
        rank = s.rows.sum(axis=0) / s.costs  # unconditional drop count per unit cost, by conjunct
        pos = rank[s.order]
        for i in range(self.n - 1):
            j = i + 1 + int(np.argmax(pos[i + 1 :]))
            if pos[i] < s.alpha * pos[j]:
                new = tuple(int(k) for k in np.argsort(-rank, kind="stable"))
                fi, fj = s.order[i], s.order[j]
                reason = (
                    f"independent invariant broken at position {i + 1}: [{fi}] {s.names[fi]} ranks {_fmt(pos[i])} < "
                    f"{s.alpha:g} x {_fmt(pos[j])} of [{fj}] {s.names[fj]} (profile window {len(s.rows)})"
                )
                return Decision(new, reason)
        return None


class LocalSwaps:
    name = "local-swaps"

    def __init__(self, n: int, config: AdaptiveConfig) -> None:
        self.n = n

    def check(self, s: Situation) -> Decision | None:
        r = s.view.ranks(s.costs, s.order)
        for i in range(self.n - 1):
            if r[i, i] < s.alpha * r[i, i + 1]:
                order = list(s.order)
                order[i], order[i + 1] = order[i + 1], order[i]
                return Decision(tuple(order), _broken(s, i, i + 1, "local-swaps invariant"))
        return None


class Sweep:
    name = "sweep"

    def __init__(self, n: int, config: AdaptiveConfig) -> None:
        self.n = n
        self.j = 1  # the position profiled in this stage
        self.stage_len = config.w
        self.in_stage = 0

    def check(self, s: Situation) -> Decision | None:
        if self.n < 2:
            return None
        self.in_stage += s.added
        r = s.view.ranks(s.costs, s.order)
        j = self.j
        for i in range(j):
            if r[i, i] < s.alpha * r[i, j]:
                order = list(s.order)
                order.insert(i, order.pop(j))
                self._next_stage()
                return Decision(tuple(order), _broken(s, i, j, f"sweep invariant (stage at position {j + 1})"))
        if self.in_stage >= self.stage_len:
            self._next_stage()
        return None

    def _next_stage(self) -> None:
        self.in_stage = 0
        self.j = self.j + 1 if self.j + 1 < self.n else 1


Policy = AGreedy | Independent | LocalSwaps | Sweep
POLICIES: dict[str, Callable[[int, AdaptiveConfig], Policy]] = {
    "a-greedy": AGreedy,
    "sweep": Sweep,
    "independent": Independent,
    "local-swaps": LocalSwaps,
}
