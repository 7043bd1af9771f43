"""The checking procedure (the paper's §6) beside the enumeration of derived LTO queries: the
same answer without visiting every LTO query.

Steps 1–3 are the enumeration's: an unsatisfiable predicate or one duplicate-preserving stream is
bounded; a projected or equality-joined attribute unbounded in Q fails C1 / C2 (some derived LTO
query keeps it unbounded). Step 4 looks for a witness of a C3 violation, which involves at most two
inequality joins and so at most four attributes: for π̃ one nonredundant inequality join between
streams with an unbounded side; for π two unbounded attribute classes of one stream, each on one
side of a nonredundant inequality join. The search builds LTO queries one filter at a time as the
enumeration does, but drops every partial query in which no witness can survive. Each fact that
kills a candidate only ever becomes more true as filters are added, so a dropped branch holds no
violation and the answer is exact:

- a join `y < x` is dead once `x <= y` is implied, or it is redundant (an element or an equal
  constant sits between its sides: more filters never remove one), or both sides are bounded;
- for π a stream can violate only while its live attributes (unbounded, with a live join)
  form at least two classes on the greater side plus the smaller side, and further
  equalities only merge classes.

The paper's Fig. 2, which spells out how its O(1)-size sub-query Q' is built from four
attributes, is not in the text we have; this search restricts the LTO queries it visits instead.
A property test checks that it agrees with the enumeration on random queries.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from cqlstream.cql.boundedness.closure import Closure
from cqlstream.cql.boundedness.normal_form import Spj

Prune = Callable[[Closure], bool]


def _live_joins(q: Spj, c: Closure) -> tuple[np.ndarray, list[int], np.ndarray, np.ndarray]:
    """(live[y, x]: the inequality join y < x between different streams can still be a
    nonredundant one with an unbounded side in some completion, the attributes indexed,
    their owners, whether each is bounded)."""
    elements = q.elements()
    attrs = [e.attr for e in elements if not e.is_const]
    n = len(attrs)
    lt, eq, redundant = c.relations(elements)
    # redundant[y, x] needs y < x; the "through" test alone: an element strictly between, or an
    # equal constant on one side (transitivity then implies y < x, so the two agree)
    owner = np.array([q.owner(i) for i in attrs])
    bounded = np.array([c.bounded(i) for i in attrs], dtype=bool)
    le = lt[:n, :n] | eq[:n, :n]
    live = (owner[:, None] != owner[None, :]) & ~le.T & ~redundant[:n, :n]
    live &= ~(bounded[:, None] & bounded[None, :])
    return live, attrs, owner, bounded


def no_bag_witness(q: Spj, c: Closure) -> bool:
    """π̃: no completion of c has a nonredundant inequality join with an unbounded side."""
    live, _, _, _ = _live_joins(q, c)
    return not live.any()


def no_set_witness(q: Spj, c: Closure) -> bool:
    """π: in no completion of c does a stream have two classes in MaxRef plus MinRef."""
    live, _, owner, bounded = _live_joins(q, c)
    _, eq, _ = c.relations(q.elements())
    greater = live.any(axis=0) & ~bounded  # x with a live y < x: may enter MaxRef
    smaller = live.any(axis=1) & ~bounded  # y with a live y < x: may enter MinRef
    for k in range(len(q.occurrences)):
        mine = owner == k
        count = 0
        for side in (greater, smaller):
            idx = np.flatnonzero(side & mine)
            seen: list[int] = []
            for i in idx:
                if not any(eq[i, j] for j in seen):
                    seen.append(int(i))
            count += len(seen)
        if count > 1:
            return False
    return True


def prune_for(q: Spj) -> Prune:
    """The pruning test of q's shape (π or π̃)."""
    if q.distinct:
        return lambda c: no_set_witness(q, c)
    return lambda c: no_bag_witness(q, c)


def estimate(q: Spj, c: Closure) -> int:
    """An upper bound on the number of derived LTO queries: 3 per pair of one stream's linked
    attributes and constants that P⁺ leaves unordered (what the enumeration branches on)."""
    from cqlstream.cql.boundedness.closure import Elem
    from cqlstream.cql.boundedness.lto import linked

    refs = linked(q)
    consts = [Elem(0, k) for k in q.constants()]
    open_pairs = 0
    for o in q.occurrences:
        group = [Elem(i) for i in o.attrs if i in refs] + consts
        for i, a in enumerate(group):
            for b in group[i + 1 :]:
                if not (a.is_const and b.is_const) and not c.ordered(a, b):
                    open_pairs += 1
    return 3**open_pairs
