"""Chain operator scheduling (thesis §2.3.2, Babcock et al.): the progress chart of a path of
operators and its lower envelope, which cuts the path into chains, each with a priority (the
queue-size reduction per unit time of its envelope segment); and the discrete model of the
thesis' toy schedules (FIFO, Greedy, Chain), used to check the engine's policies.

The chart of a path O_1..O_n has points (x_k, y_k): y_k is what is left of one input tuple after
O_1..O_k (the product of selectivities), x_k the time spent on it so far. From point i, the
envelope's next point is the later point j with the steepest descent (y_i − y_j)/(x_j − x_i);
operators i+1..j form a chain, and the chart continues from j.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

TINY = 1e-12  # an operator measured as taking no time still takes some


@dataclass(frozen=True)
class Stage:
    """One operator on a path: seconds per tuple of its own input, and output per input tuple
    (0 for an operator whose results leave the system)."""

    cost: float
    selectivity: float


def chart(stages: Sequence[Stage]) -> list[tuple[float, float]]:
    """Progress-chart points, from (0, 1): per operator, time spent on what is left of a tuple."""
    pts = [(0.0, 1.0)]
    for s in stages:
        x, y = pts[-1]
        pts.append((x + max(s.cost, TINY) * y, y * s.selectivity))
    return pts


def envelope(points: Sequence[tuple[float, float]]) -> list[tuple[int, int, float]]:
    """The lower envelope as chains (first operator, one past the last operator, priority)."""
    out, i, n = [], 0, len(points) - 1
    while i < n:
        best, best_j = -float("inf"), i + 1
        for j in range(i + 1, n + 1):
            slope = (points[i][1] - points[j][1]) / max(points[j][0] - points[i][0], TINY)
            if slope >= best:  # ties: the longer chain (the envelope skips collinear points)
                best, best_j = slope, j
        out.append((i, best_j, best))
        i = best_j
    return out


def chain_priorities(points: Sequence[tuple[float, float]]) -> list[float]:
    """Per operator of the path, the priority of the chain it belongs to."""
    prio = [0.0] * (len(points) - 1)
    for i, j, slope in envelope(points):
        for k in range(i, j):
            prio[k] = slope
    return prio


def greedy_priorities(points: Sequence[tuple[float, float]]) -> list[float]:
    """Per operator, its own queue-size reduction per unit time (the Greedy baseline)."""
    return [
        (points[k][1] - points[k + 1][1]) / max(points[k + 1][0] - points[k][0], TINY) for k in range(len(points) - 1)
    ]


# ---------------------------------------------------------------- the thesis' toy model
Priorities = Callable[[Sequence[tuple[float, float]]], list[float]]


def _fifo(points: Sequence[tuple[float, float]]) -> list[float]:
    return [0.0] * (len(points) - 1)


TOY_POLICIES: dict[str, Priorities] = {"fifo": _fifo, "greedy": greedy_priorities, "chain": chain_priorities}


def simulate(
    policy: str, times: Sequence[int], selectivities: Sequence[float], arrivals: Sequence[float]
) -> list[float]:
    """Queue size (in units of one arrival) at t = 0, 1, … while input arrives: `arrivals[t]`
    arrives at time t; operator k takes `times[k]` units per arriving batch (whatever is left of
    it). Each unit, the batch whose next operator has the highest priority moves on (ties: the
    oldest batch), as in the thesis' two toy schedules."""
    pts: list[tuple[float, float]] = [(0.0, 1.0)]
    for t, s in zip(times, selectivities):
        pts.append((pts[-1][0] + t, pts[-1][1] * s))
    prio = TOY_POLICIES[policy](pts)
    items: list[list[float]] = []  # [arrival, next operator, size]
    busy, out = 0, []
    for t in range(len(arrivals)):
        if arrivals[t]:
            items.append([t, 0, arrivals[t]])
        out.append(round(sum(it[2] for it in items), 9))
        if busy > t:
            continue
        if items:
            it = max(items, key=lambda it: (prio[int(it[1])], -it[0]))
            k = int(it[1])
            it[2] *= selectivities[k]
            it[1] += 1
            busy = t + times[k]
            if it[1] == len(times) or it[2] == 0:
                items.remove(it)
    return out
