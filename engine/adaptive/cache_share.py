"""Shared and globally consistent subresult caches (thesis §5.5.4, §5.7): which candidates are one
cache, and how a set of caches is chosen when some are shared.

Sharing (Def 5.5.1). Two candidates in different pipelines are one cache when their segments join
the same windows (in any order) and have the same key: here, the same segment-side expressions of
the equi conjuncts that link the probing side to the segment (`share_key`). The probing sides may
differ (pipeline 3 probes with r3.a, pipeline 6 with r6.a): a stored key is the segment side's
value, so a probe of either pipeline with an equal value finds the same combos. Such a cache is
one store, filled and maintained once (its segment inputs supply the new combos once), probed by
every pipeline using it: its benefits add up, its maintenance cost is paid once.

Selection. Without sharing the chosen caches of different pipelines are independent and each
pipeline takes its best cache (thesis Theorem 5.5.1: nested prefixes form a chain). With sharing
the problem is NP-hard (Theorem 5.5.2); the thesis uses a greedy O(log n) approximation
(Theorem 5.5.3): repeatedly take the cache, with the subset of its pipelines still free to use it,
whose summed benefit less its one cost is largest, while that value is positive (`greedy`).

Globally consistent caches (Def 5.7.1). A cache over windows X keyed as usual may hold the
X-combos that have a partner in Y, when X ∪ Y satisfies the prefix invariant even if X does not:
updates of every window of X ∪ Y then produce, in their own pipelines, the new (X ∪ Y)-combos
whose X parts are what the cache must gain. `consistent_candidates` lists them with the thesis's
cap m: the prefix-invariant window sets first, then X ∪ Y with X all but one of the pipeline's
windows, all but two, ..., until m candidates (§5.7, m = 6 in its experiments); `exhaustive` picks
the best compatible subset of a capped list.

The functions over orders (`prefix_sets`, `segment_candidates`, `shared_groups`,
`consistent_candidates`) work on the thesis's abstract pipelines (any contiguous segment, keyed on
one shared attribute); the engine's caches (engine/adaptive/caching.py) are the prefix segments
among them, and share through `share_key`."""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from itertools import combinations
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from cqlstream.engine.operators.join import Equi


# ------------------------------------------------------------------ the engine's sharing key


def seg_side(e: Equi, seg: Sequence[int]) -> tuple[int, str]:
    """The segment side of equi conjunct e (its input and expression, the expression as text so
    that keys sort and compare across pipelines)."""
    who = e.a if e.a in seg else e.b
    return who, repr(e.ea if who == e.a else e.eb)


def key_order(keys: list[Equi], seg: Sequence[int]) -> list[Equi]:
    """A candidate's key conjuncts in the order of their segment sides: the key columns of two
    pipelines' candidates over the same segment then line up."""
    return sorted(keys, key=lambda e: (seg_side(e, seg), e.cid))


def share_key(
    keys: list[Equi], seg: Sequence[int], partners: Sequence[int] = ()
) -> tuple[frozenset[int], tuple[tuple[int, str], ...], frozenset[int]]:
    """What makes two candidates one cache: the segment's windows, its sides of the key and,
    for a globally consistent cache, the windows Y its combos have partners in."""
    return frozenset(seg), tuple(seg_side(e, seg) for e in key_order(keys, seg)), frozenset(partners)


# ------------------------------------------------------------------ abstract pipelines


def prefix_ok(orders: dict[int, Sequence[int]], windows: frozenset[int]) -> bool:
    """The prefix invariant: each window's own pipeline starts with the other windows."""
    return all(set(orders[w][: len(windows) - 1]) == windows - {w} for w in windows)


def prefix_sets(orders: dict[int, Sequence[int]], min_size: int = 2) -> list[frozenset[int]]:
    """Window sets of at least `min_size` windows (joins) satisfying the prefix invariant, smallest
    first, that some pipeline can cache (all n windows satisfy it trivially but lie in no pipeline).
    Each is a prefix of its members' pipelines, so these are found among the prefixes."""
    out: set[frozenset[int]] = set()
    for w, order in orders.items():
        for s in range(max(min_size - 1, 1), len(order) + 1):
            cand = frozenset(order[:s]) | {w}
            if min_size <= len(cand) < len(orders) and prefix_ok(orders, cand):
                out.add(cand)
    return sorted(out, key=lambda s: (len(s), sorted(s)))


@dataclass(frozen=True)
class Segment:
    """A candidate of a pipeline: the probing input, the positions [j, k) of its order it
    covers, and the windows there."""

    pipeline: int
    j: int
    k: int
    windows: frozenset[int]

    def overlaps(self, other: Segment) -> bool:
        return self.pipeline == other.pipeline and self.j < other.k and other.j < self.k


def segment_candidates(orders: dict[int, Sequence[int]], min_size: int = 2) -> list[Segment]:
    """Every contiguous segment of every pipeline whose windows satisfy the prefix invariant
    (thesis §5.5.2: a cache anywhere in a pipeline, its key the join attribute)."""
    sets = set(prefix_sets(orders, min_size))
    out = []
    for i, order in orders.items():
        for j in range(len(order)):
            for k in range(j + min_size, len(order) + 1):
                w = frozenset(order[j:k])
                if w in sets:
                    out.append(Segment(i, j, k, w))
    return out


def shared_groups(segments: Sequence[Segment]) -> dict[frozenset[int], list[int]]:
    """Window set → the pipelines whose candidates over it are one cache (one key: the thesis's
    equi-join on one attribute), for the sets used by two or more pipelines."""
    by: dict[frozenset[int], list[int]] = {}
    for s in segments:
        by.setdefault(s.windows, []).append(s.pipeline)
    return {w: sorted(p) for w, p in by.items() if len(p) > 1}


# ------------------------------------------------------------------ selection


@dataclass
class Option:
    """One cache to choose: its members (candidates in different pipelines, each with its
    benefit) and its cost, paid once whatever the number of members using it."""

    name: Hashable
    cost: float
    members: list[tuple[Any, float]] = field(default_factory=list)  # (candidate, benefit)


def greedy(
    options: Sequence[Option], compatible: Callable[[Any, list[Any]], bool]
) -> tuple[list[tuple[Option, list[Any]]], float]:
    """Theorem 5.5.3's greedy: while some cache has a positive value, take the one of largest
    value, used by those of its members compatible with everything chosen so far (and with each
    other, taken in order of benefit) whose benefit is positive; value = their summed benefit
    less the cache's cost. Returns [(option, members used)] and the total value."""
    chosen: list[tuple[Option, list[Any]]] = []
    taken: list[Any] = []
    left = list(options)
    total = 0.0
    while left:
        best: tuple[float, int, list[Any]] | None = None
        for n, o in enumerate(left):
            use: list[Any] = []
            value = -o.cost
            for m, b in sorted(o.members, key=lambda mb: -mb[1]):
                if b > 0 and compatible(m, taken + use):
                    use.append(m)
                    value += b
            if use and value > 0 and (best is None or value > best[0]):
                best = (value, n, use)
        if best is None:
            break
        value, n, use = best
        chosen.append((left.pop(n), use))
        taken += use
        total += value
    return chosen, total


def exhaustive(
    options: Sequence[Option], compatible: Callable[[Any, list[Any]], bool]
) -> tuple[list[tuple[Option, list[Any]]], float]:
    """The best compatible choice over all subsets of the options' members (2^m: for the capped
    candidate lists of §5.7), a member's option paying its cost once if any of its members is
    used."""
    flat = [(o, m, b) for o in options for m, b in o.members]
    best: tuple[float, list[int]] = (0.0, [])

    def walk(at: int, picked: list[int], value: float, paid: set[int]) -> None:
        nonlocal best
        if value > best[0]:
            best = (value, list(picked))
        for x in range(at, len(flat)):
            o, m, b = flat[x]
            if not compatible(m, [flat[p][1] for p in picked]):
                continue
            new = id(o) not in paid
            walk(x + 1, [*picked, x], value + b - (o.cost if new else 0.0), paid | {id(o)})

    walk(0, [], 0.0, set())
    out: dict[int, tuple[Option, list[Any]]] = {}
    for p in best[1]:
        o, m, _b = flat[p]
        out.setdefault(id(o), (o, []))[1].append(m)
    return list(out.values()), best[0]


# ------------------------------------------------------------------ globally consistent caches


@dataclass(frozen=True)
class Consistent:
    """A candidate of a pipeline holding the combos of the windows X (the segment at positions
    [j, k) of its order) that have a partner in the windows Y (Def 5.7.1; Y may hold any window
    but X's, the probing input's own included); X ∪ Y satisfies the prefix invariant. Y empty:
    a plain (prefix-invariant) cache."""

    pipeline: int
    j: int
    k: int
    x: frozenset[int]
    y: frozenset[int]

    def overlaps(self, other: Consistent) -> bool:
        return self.pipeline == other.pipeline and self.j < other.k and other.j < self.k


def smallest_consistent_union(
    orders: dict[int, Sequence[int]], x: frozenset[int], among: Sequence[int] | None = None
) -> frozenset[int] | None:
    """The smallest window set U ⊇ x satisfying the prefix invariant, adding windows of `among`
    (default: every other window, in input order; the first qualifying set in that order among
    those of its size), None if none does: Y = U − x is the least filtering a globally consistent
    cache over x needs. With every window allowed, all n windows always qualify."""
    rest = sorted(frozenset(orders) - x) if among is None else list(among)
    for extra in range(len(rest) + 1):
        for more in combinations(rest, extra):
            u = x | frozenset(more)
            if prefix_ok(orders, u):
                return u
    return None


def consistent_candidates(orders: dict[int, Sequence[int]], cap: int = 6, min_size: int = 2) -> list[Consistent]:
    """The capped candidate list of §5.7: if the p prefix-invariant candidates reach the cap m,
    those alone; else all p, then globally consistent ones whose X is all but one of the
    n windows (one per pipeline: its whole order), then all but two, and so on, while X has at
    least `min_size` windows, until m are listed (the last group cut in order of pipeline and
    position: the thesis picks arbitrarily there). A globally consistent X is a segment whose
    windows fail the prefix invariant; its Y completes it to the smallest set that satisfies it."""
    plain = [Consistent(s.pipeline, s.j, s.k, s.windows, frozenset()) for s in segment_candidates(orders, min_size)]
    if len(plain) >= cap:  # p ≥ m: the prefix-invariant caches only (all of them)
        return plain
    out = list(plain)
    n = len(orders)
    for size in range(n - 1, min_size - 1, -1):
        group = []
        for i, order in sorted(orders.items()):
            for j in range(len(order) - size + 1):
                x = frozenset(order[j : j + size])
                if prefix_ok(orders, x):
                    continue
                u = smallest_consistent_union(orders, x)
                assert u is not None  # all windows qualify
                group.append(Consistent(i, j, j + size, x, u - x))
        out += group[: cap - len(out)]
        if len(out) >= cap:
            break
    return out
