"""The checking procedure (the paper's §6) beside the enumeration of derived LTO queries: the
same answer without visiting every LTO query.

Steps 1–3 are the enumeration's: an unsatisfiable predicate or one duplicate-preserving stream is
bounded; a projected or equality-joined attribute unbounded in Q fails C1 / C2 (some derived LTO
query keeps it unbounded). Step 4 looks for a witness of a C3 violation, which involves at most two
inequality joins and so at most four attributes: for π̃ one inequality join `y < x` between
streams, nonredundant, with an unbounded side; for π two entries of one stream's MaxRef / MinRef
from different classes (or one attribute in both), each with a nonredundant inequality join. For
each candidate witness (a join, or a pair of a stream's attributes with their sides) the search
builds LTO queries one filter at a time as the enumeration does, ordering the candidate's
attributes first, and drops every partial query in which that witness can no longer occur. Each
fact that kills a candidate only ever becomes more true as filters are added, so a dropped branch
holds no leaf where the witness holds, and the answer is exact:

- a join `y < x` is dead once `x <= y` is implied, or it is redundant (an element or an equal
  constant sits between its sides: more filters never remove one), or a side is bounded (in an
  LTO query a bounded attribute lies within the query's constants and an unbounded one outside
  them, so a constant then sits between the two);
- an attribute is out of MaxRef (MinRef) once it is bounded or every join with it on the greater
  (smaller) side is dead; two attributes are one class once they are implied equal.

Theorem 8.6's C3 (MAX / MIN of an unbounded attribute A over several streams) is checked the same
way: for MAX it fails in an LTO query iff A is unbounded there and its stream's MaxRef holds an
attribute x not equal to A (two classes in MaxRef, or one that is not A's, both contain such an
x), or its MinRef holds any attribute (MIN: the mirror). A candidate is such a pair (A, x), dead
once A is bounded, x is out of that side's Ref, or (same side) x = A is implied, each of which
only becomes more true with more filters.

A candidate whose attributes P⁺ already settles dies at once, and most die after a few filters
on its own attributes: the candidates are polynomially many (O(n²) for π̃, O(k²) per stream of k
attributes for π), and the search per candidate is small unless the candidate survives.

The paper's Fig. 2, which spells out how its O(1)-size sub-query Q' is built from four
attributes, is not in the text we have; this search restricts the LTO queries it visits instead.
A property test checks that it agrees with the enumeration on random queries.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import numpy as np

from cqlstream.cql.boundedness import lto
from cqlstream.cql.boundedness.closure import Closure, Elem
from cqlstream.cql.boundedness.normal_form import Aggregation, Spj


def _state(q: Spj, c: Closure) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[int]]:
    """(live[y, x]: the inequality join y < x between different streams may still be
    nonredundant with an unbounded side in a completion of c; eq over the attributes; bounded;
    the attributes indexed, in q.elements() order)."""
    elements = q.elements()
    attrs = [e.attr for e in elements if not e.is_const]
    n = len(attrs)
    lt, eq, redundant = c.relations(elements)
    owner = np.array([q.owner(i) for i in attrs])
    bounded = np.array([c.bounded(i) for i in attrs], dtype=bool)
    le = lt[:n, :n] | eq[:n, :n]
    # redundant[y, x] is the "through" test (an element, or an equal constant, between the sides),
    # which implies y < x by transitivity
    live = (owner[:, None] != owner[None, :]) & ~le.T & ~redundant[:n, :n]
    # in an LTO query a bounded attribute lies within the constants and an unbounded one outside
    # them, so a join with a bounded side is redundant there (through a constant) or unsatisfiable
    live &= ~(bounded[:, None] | bounded[None, :])
    return live, eq[:n, :n], bounded, attrs


def _bag_candidates(q: Spj, c: Closure) -> list[tuple[int, int]]:
    live, _, _, _ = _state(q, c)
    return [(int(y), int(x)) for y, x in zip(*np.nonzero(live))]


def _bag_prune(q: Spj, y: int, x: int) -> Callable[[Closure], bool]:
    def dead(c: Closure) -> bool:
        return not _state(q, c)[0][y, x]

    return dead


# a side: 0 = MaxRef (the attribute on the greater side of a join), 1 = MinRef
def _in_ref(live: np.ndarray, bounded: np.ndarray, i: int, side: int) -> bool:
    return not bounded[i] and bool(live[:, i].any() if side == 0 else live[i, :].any())


def _set_candidates(q: Spj, c: Closure) -> list[tuple[int, int, int, int]]:
    """(a, side of a, b, side of b), indexes into the attributes, both of one stream."""
    live, eq, bounded, attrs = _state(q, c)
    owner = [q.owner(i) for i in attrs]
    refs = [(i, s) for i in range(len(attrs)) for s in (0, 1) if _in_ref(live, bounded, i, s)]
    out = []
    for k, (a, sa) in enumerate(refs):
        for b, sb in refs[k + 1 :]:
            if owner[a] == owner[b] and not (sa == sb and eq[a, b]):
                out.append((a, sa, b, sb))
    return out


def _set_prune(q: Spj, a: int, sa: int, b: int, sb: int) -> Callable[[Closure], bool]:
    def dead(c: Closure) -> bool:
        live, eq, bounded, _ = _state(q, c)
        if sa == sb and eq[a, b]:
            return True
        return not (_in_ref(live, bounded, a, sa) and _in_ref(live, bounded, b, sb))

    return dead


def _extreme_candidates(a: Aggregation, c: Closure) -> list[tuple[int | None, int, int, bool]]:
    """(index of the aggregated attribute A, or None when P and the grouping never mention it;
    side of x's Ref: 0 MaxRef, 1 MinRef; index of x; whether x must differ from A): x of A's
    stream may sit in MAX's MaxRef apart from A's class, or in its MinRef at all (MIN: mirrored)."""
    q = a.spj
    live, eq, bounded, attrs = _state(q, c)
    out: list[tuple[int | None, int, int, bool]] = []
    for t in a.aggs:
        which = extreme_side(t.func)
        if which is None or t.arg is None or c.bounded(t.arg):
            continue
        ai = attrs.index(t.arg) if t.arg in attrs else None
        for xi, x in enumerate(attrs):
            if q.owner(x) != q.owner(t.arg):
                continue
            for side in (0, 1):
                same = side == which
                if _in_ref(live, bounded, xi, side) and not (same and ai is not None and eq[ai, xi]):
                    out.append((ai, side, xi, same))
    return list(dict.fromkeys(out))


def _extreme_prune(q: Spj, ai: int | None, side: int, xi: int, same: bool) -> Callable[[Closure], bool]:
    def dead(c: Closure) -> bool:
        live, eq, bounded, _ = _state(q, c)
        if ai is not None and (bounded[ai] or (same and eq[ai, xi])):
            return True
        return not _in_ref(live, bounded, xi, side)

    return dead


def extreme_side(func: str) -> int | None:
    """0 for MAX, 1 for MIN (with or without DISTINCT, which they ignore), None for the others."""
    return {"max": 0, "min": 1}.get(func.split()[0])


def extreme_leaves(a: Aggregation, c: Closure, limit: int = 20 * lto.LIMIT) -> Iterator[Closure]:
    """Derived LTO queries of a's join in which a candidate violation of Theorem 8.6's C3 survived
    to the end (none: C3 holds in every derived LTO query). TooMany past `limit` partial queries."""
    budget = lto.Budget(limit)
    attrs = [e.attr for e in a.spj.elements() if not e.is_const]
    for ai, side, xi, same in _extreme_candidates(a, c):
        first = {attrs[xi]} | (set() if ai is None else {attrs[ai]})
        prune = _extreme_prune(a.spj, ai, side, xi, same)
        yield from lto.derived(a.spj, c, prune=prune, first=first, budget=budget)


def leaves(q: Spj, c: Closure, limit: int = 20 * lto.LIMIT) -> Iterator[Closure]:
    """Derived LTO queries of q in which some candidate witness survived to the end: the only
    ones that can fail C3 (an empty iteration: none does). TooMany past `limit` partial queries."""
    budget = lto.Budget(limit)
    attrs = [e.attr for e in q.elements() if not e.is_const]
    if q.distinct:
        for a, sa, b, sb in _set_candidates(q, c):
            first = {attrs[a], attrs[b]}
            yield from lto.derived(q, c, prune=_set_prune(q, a, sa, b, sb), first=first, budget=budget)
    else:
        for y, x in _bag_candidates(q, c):
            first = {attrs[y], attrs[x]}
            yield from lto.derived(q, c, prune=_bag_prune(q, y, x), first=first, budget=budget)


def estimate(q: Spj, c: Closure) -> int:
    """An upper bound on the number of derived LTO queries: 3 per pair of one stream's linked
    attributes and constants that P⁺ leaves unordered (what the enumeration branches on)."""
    refs = lto.linked(q)
    consts = [Elem(0, k) for k in q.constants()]
    open_pairs = 0
    for o in q.occurrences:
        group = [Elem(i) for i in o.attrs if i in refs] + consts
        for i, a in enumerate(group):
            for b in group[i + 1 :]:
                if not (a.is_const and b.is_const) and not c.ordered(a, b):
                    open_pairs += 1
    return 3**open_pairs
