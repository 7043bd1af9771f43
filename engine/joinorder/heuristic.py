"""The join-order heuristic of Golab & Özsu (§5.1): windows in ascending order of their binary
join sizes (the most selective join first, leaving the least work to the inner loops), then the
orders where "fast" streams are moved up the plan (but not to the top), the cheapest by the cost
model. Also an exhaustive search, for checking the heuristic and for small joins."""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence

from cqlstream.engine.joinorder.cost import JoinShape, binary_join_size, global_cost, origin_cost

FAST_FACTOR = 5.0  # a stream is "fast" when its rate is at least this many times the slowest one's


def selectivity_order(shape: JoinShape) -> list[int]:
    """The initial heuristic: start with the pair of windows whose join is smallest, then append
    the window whose smallest join with a placed window is smallest (ties: lower input index)."""
    n = shape.n
    if n < 2:
        return list(range(n))
    size = {(m, k): binary_join_size(shape, m, k) for m in range(n) for k in range(n) if m != k}
    first = min(((m, k) for m in range(n) for k in range(m + 1, n)), key=lambda p: (size[p], p))
    order = list(first)
    while len(order) < n:
        rest = [j for j in range(n) if j not in order]
        order.append(min(rest, key=lambda j: (min(size[(p, j)] for p in order), j)))
    return order


def fast_streams(shape: JoinShape, factor: float = FAST_FACTOR) -> list[int]:
    """Inputs arriving at least `factor` times faster than the slowest one (the paper leaves
    "fast" unquantified), fastest first."""
    rates = [w.rate for w in shape.windows]
    slow = min(rates)
    fast = [i for i, r in enumerate(rates) if r >= factor * slow and r > slow]
    return sorted(fast, key=lambda i: (-rates[i], i))


def moved_up(order: Sequence[int], fast: Sequence[int]) -> Iterable[list[int]]:
    """Every order made from `order` by moving each fast stream up to some position from the
    second to its own (one stays put; a stream already on top stays there): about n^f orders."""
    pos = {j: order.index(j) for j in fast}
    ranges = [range(1, pos[j] + 1) if pos[j] > 0 else range(0, 1) for j in fast]
    seen: set[tuple[int, ...]] = set()
    for targets in itertools.product(*ranges):
        rest = [j for j in order if j not in pos]
        for j, t in sorted(zip(fast, targets), key=lambda x: x[1]):
            rest.insert(min(t, len(rest)), j)
        key = tuple(rest)
        if key not in seen:
            seen.add(key)
            yield rest


def candidates(shape: JoinShape, factor: float = FAST_FACTOR) -> list[list[int]]:
    """The global orders the augmented heuristic considers, the initial heuristic's first."""
    base = selectivity_order(shape)
    out = [base]
    for o in moved_up(base, fast_streams(shape, factor)):
        if o != base:
            out.append(o)
    return out


def heuristic_order(shape: JoinShape, tau: float = 0.0, factor: float = FAST_FACTOR) -> tuple[list[int], float]:
    """The augmented heuristic's global order and its cost (the first of equally cheap candidates)."""
    best, best_cost = None, float("inf")
    for o in candidates(shape, factor):
        c = global_cost(shape, o, tau)
        if c < best_cost:
            best, best_cost = o, c
    assert best is not None
    return best, best_cost


def all_global_costs(shape: JoinShape, tau: float = 0.0) -> dict[tuple[int, ...], float]:
    """The cost of every global order (n! of them: for checks and small joins)."""
    return {o: global_cost(shape, o, tau) for o in itertools.permutations(range(shape.n))}


def best_origin_order(
    shape: JoinShape, origin: int, candidates: Iterable[Sequence[int]], tau: float = 0.0, lookup: float = 0.0
) -> tuple[list[int], float]:
    """The cheapest of `candidates` probe orders for new tuples of `origin` (the first of equally
    cheap ones, up to a relative 1e-9, so a preferred order listed first wins ties)."""
    best: list[int] | None = None
    best_cost = float("inf")
    for o in candidates:
        c = origin_cost(shape, origin, o, tau, lookup)
        if best is None or c < best_cost * (1 - 1e-9):
            best, best_cost = list(o), c
    assert best is not None
    return best, best_cost
