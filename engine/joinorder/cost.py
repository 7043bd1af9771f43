"""Per-unit-time cost of a sliding-window multi-join plan (Golab & Özsu, VLDB 2003, §4.2/§5).

A multi-way join runs as one operator of nested loops: a new tuple of window i is the outermost
loop and the other windows follow in i's probe order. Each loop scans the window (nested loops)
or one hash bucket of it (hash join) once per partial result passed down from the loop above, and
the cost counts those attribute comparisons per unit time. Insertion and expiration are left out
(they do not depend on the order), except in `maintenance_cost`, which the bucket allocation
needs. Estimates assume containment of value sets and uniform values: the join of windows sharing
one attribute has Π(tuples) · v_min / Π(v) tuples (for two windows the paper's
λ_m T_m λ_n T_n / max(v_m, v_n)). This reproduces every plan cost the paper quotes in §5.1.

Generalized to the engine's joins: inputs are linked by equality conjuncts; `classes` are the
attribute classes those equalities form, the estimate multiplies one v_min/Π(v) factor per class,
and a window that no equality links to the inputs bound so far is scanned whole (a cross product).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

EXACT = math.inf  # `buckets` of an exact index (a sorted or value-keyed one): a probe visits only its matches


@dataclass(frozen=True)
class WindowStats:
    """One join input: arrival rate λ (tuples per time unit), time size T, distinct join values v,
    and hash buckets b of its index (1: no index, each probe scans the whole window; EXACT: an index
    whose probe finds exactly the matching tuples, as the engine's)."""

    rate: float
    size: float
    distinct: float
    buckets: float = 1.0
    rows: float | None = None  # a count-based window of this many tuples (then `size` is unused)

    @property
    def tuples(self) -> float:
        """Tuples in the window: λ·T (or its row count)."""
        return self.rows if self.rows is not None else self.rate * self.size

    def scanned(self, tau: float) -> float:
        """Tuples a scan visits when expiration runs every τ: the window plus λτ not yet expired."""
        return self.tuples + self.rate * tau


@dataclass(frozen=True)
class JoinShape:
    """The join's inputs, its equality classes (sets of inputs equated on one attribute) and its
    other conditions: (the inputs a condition reads, the share of rows it keeps), applied to a
    partial result once all those inputs are bound (engine/joinorder/conditions.py)."""

    windows: tuple[WindowStats, ...]
    classes: tuple[frozenset[int], ...]
    conditions: tuple[tuple[frozenset[int], float], ...] = ()

    @classmethod
    def common(cls, windows: Sequence[WindowStats]) -> JoinShape:
        """Every window joined on one common attribute (the paper's setting)."""
        return cls(tuple(windows), (frozenset(range(len(windows))),))

    @property
    def n(self) -> int:
        return len(self.windows)

    def linked(self, j: int, bound: Sequence[int] | frozenset[int]) -> bool:
        """Whether an equality links input j to one of the inputs in `bound`."""
        return any(j in c and any(k in c for k in bound if k != j) for c in self.classes)

    def with_rates(self, rates: Sequence[float]) -> JoinShape:
        """The same join with other arrival rates (window time sizes kept)."""
        ws = tuple(replace(w, rate=float(r)) for r, w in zip(rates, self.windows, strict=True))
        return replace(self, windows=ws)

    def with_buckets(self, buckets: Sequence[float]) -> JoinShape:
        ws = tuple(replace(w, buckets=float(b)) for b, w in zip(buckets, self.windows, strict=True))
        return replace(self, windows=ws)


def result_size(
    shape: JoinShape, members: Sequence[int], origin: int | None = None, unfiltered: int | None = None
) -> float:
    """Expected size of the join of `members` (the `origin` input counts as the single new tuple):
    one factor per equality class and per other condition among them, except the conditions
    reading input `unfiltered` (what an index lookup into that input visits before they run)."""
    size = 1.0
    for j in members:
        if j != origin:
            size *= shape.windows[j].tuples
    for c in shape.classes:
        vs = [shape.windows[j].distinct for j in members if j in c]
        if len(vs) >= 2:
            size *= min(vs) / math.prod(vs)
    inside = frozenset(members)
    for own, keep in shape.conditions:
        if own <= inside and unfiltered not in own:
            size *= keep
    return size


def binary_join_size(shape: JoinShape, m: int, n: int) -> float:
    """|S_m ⋈ S_n| = λ_m T_m λ_n T_n / max(v_m, v_n) for linked windows (their product if not)."""
    return result_size(shape, (m, n))


def origin_cost(shape: JoinShape, origin: int, order: Sequence[int], tau: float = 0.0, lookup: float = 0.0) -> float:
    """Comparisons for one new tuple of `origin` probing the other windows in `order`.

    `tau`: lazy re-evaluation and expiration every τ time units — a loop then scans λ(T + τ) tuples
    (the window holds those not yet expired relative to the oldest tuple of the batch), of which the
    timestamp checks pass on λT; τ = 0 is the eager algorithm. `lookup`: a fixed cost per probe of
    a loop (0 in the paper; an index lookup in the engine)."""
    bound = [origin]
    passed = 1.0  # partial results entering the next loop
    total = 0.0
    for j in order:
        w = shape.windows[j]
        linked = shape.linked(j, bound)
        bound.append(j)
        matches = result_size(shape, bound, origin)
        if linked and w.buckets == EXACT:
            # an exact index visits only the equality's matches; other conditions then filter them
            total += passed * lookup + (result_size(shape, bound, origin, j) if shape.conditions else matches)
        else:
            total += passed * (lookup + w.scanned(tau) / (w.buckets if linked else 1.0))
        passed = matches
    return total


def plan_cost(shape: JoinShape, orders: Sequence[Sequence[int]], tau: float = 0.0, lookup: float = 0.0) -> float:
    """Σ_i λ_i · origin_cost(i, orders[i]): comparisons per unit time of a plan given each
    input's probe order (additive over the inputs, so each order can be chosen on its own)."""
    return sum(shape.windows[i].rate * origin_cost(shape, i, orders[i], tau, lookup) for i in range(shape.n))


def global_orders(order: Sequence[int]) -> list[list[int]]:
    """The eager algorithm's probe orders for a global order: new tuples first, then the others
    in the global order (Table 4 of the paper)."""
    return [[j for j in order if j != i] for i in range(len(order))]


def global_cost(shape: JoinShape, order: Sequence[int], tau: float = 0.0, lookup: float = 0.0) -> float:
    """The cost of the plan following global order `order`."""
    return plan_cost(shape, global_orders(order), tau, lookup)


def maintenance_cost(shape: JoinShape, tau: float, insert: float = 1.0, visit: float = 1.0) -> float:
    """Insertion and expiration per unit time: each tuple is inserted and expired once (Σλ), and
    every expiration pass (every τ) visits each bucket of each window once (§4.1, §6.1)."""
    if tau <= 0:
        raise ValueError("expiration interval τ must be positive")
    return sum(insert * 2 * w.rate + visit * w.buckets / tau for w in shape.windows)


def allocate_buckets(
    shape: JoinShape,
    orders: Sequence[Sequence[int]],
    budget: int,
    tau: float,
    visit: float = 1.0,
) -> tuple[int, ...]:
    """Spread `budget` hash buckets over the windows (at least one each, at most v each): greedily
    give the next bucket where it saves the most join plus maintenance cost, and stop when no
    bucket saves anything. Large windows probed often get many buckets; a bucket that is visited at
    every expiration but rarely saves a scan is not given (the trade-off of §6.5)."""
    b = [1] * shape.n
    if budget < shape.n:
        raise ValueError(f"a budget of {budget} buckets cannot give each of {shape.n} windows one")

    def total(bs: Sequence[int]) -> float:
        s = shape.with_buckets(bs)
        return plan_cost(s, orders, tau) + maintenance_cost(s, tau, visit=visit)

    current = total(b)
    for _ in range(budget - shape.n):
        best, best_cost = None, current
        for j in range(shape.n):
            if b[j] >= shape.windows[j].distinct:
                continue
            b[j] += 1
            c = total(b)
            b[j] -= 1
            if c < best_cost - 1e-9:
                best, best_cost = j, c
        if best is None:
            break
        b[best] += 1
        current = best_cost
    return tuple(b)
