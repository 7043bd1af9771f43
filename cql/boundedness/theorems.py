"""The theorems that decide boundedness, one function per case, chosen from a table by the
query's shape (projection kind, one stream or several, aggregation).

- unsatisfiable P: the result is empty, so nothing is kept;
- π̃ (duplicate-preserving) over one stream: a filter, nothing kept;
- π̃ over several streams (Theorem 5.6): in every derived LTO query, C1 the projected attributes
  and C2 the equality-joined attributes are bounded, and C3 no nonredundant inequality join
  involves an unbounded attribute;
- π (duplicate-eliminating, Theorem 5.10): C1, C2, and C3' each stream has at most one class of
  unbounded attributes in nonredundant inequality joins;
- aggregation over one stream (Theorem 8.5): the grouping attributes are bounded and no
  COUNT DISTINCT / MEDIAN aggregates an unbounded attribute;
- aggregation over several streams (Theorem 8.6): the reduced characteristic query (the join
  projected on the grouping attributes; π when every aggregate ignores duplicates) is bounded,
  as above, and MAX/MIN of an unbounded attribute is allowed only when that attribute's class is
  the stream's only one in nonredundant inequality joins on that side, and the stream has none on
  the other side (which the printed theorem omits; docs/bounded-memory.md). C3 is checked by
  enumeration or by the §6 checker's witness search, like C3 of Theorems 5.6 and 5.10.

C1 and C2 are first checked on the query itself (an attribute unbounded there is unbounded in
some derived LTO query), so most "no" answers name the attribute without enumerating.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

import numpy as np

from cqlstream.cql.boundedness import checker, lto, synopsis
from cqlstream.cql.boundedness.closure import Closure, Elem
from cqlstream.cql.boundedness.normal_form import HOLISTIC, Aggregation, NormalForm, Outside, Spj
from cqlstream.cql.boundedness.verdict import Decision


def _unbounded(q: Spj, c: Closure, i: int) -> str:
    """Why attribute i is unbounded, e.g. `S.A has no upper bound (it is > 10)`."""
    lo, hi = c.lower(i), c.upper(i)
    if lo is None and hi is None:
        return f"{q.names[i]} is not bounded by any constant"
    if hi is None:
        return f"{q.names[i]} has no upper bound (only {q.names[i]} >= {lo})"
    return f"{q.names[i]} has no lower bound (only {q.names[i]} <= {hi})"


def _c1(q: Spj, c: Closure, what: str = "projected") -> str | None:
    for i in q.projected:
        if not c.bounded(i):
            return f"the {what} attribute {_unbounded(q, c, i)}: one result per value"
    return None


def _c2(q: Spj, c: Closure) -> str | None:
    refs = q.referenced()  # the first len(refs) of q.elements()
    _, eq, _ = c.relations(q.elements())
    for xi, yi in zip(*np.nonzero(np.triu(eq[: len(refs), : len(refs)], 1))):
        x, y = refs[xi], refs[yi]
        if q.owner(x) != q.owner(y):
            for i in (x, y):
                if not c.bounded(i):
                    return f"the equality join {q.names[x]} = {q.names[y]}: {_unbounded(q, c, i)}"
    return None


def _when(q: Spj, c: Closure) -> str:
    return f" (in the case {lto.describe(q, c)})"


def _c3_bag(q: Spj, c: Closure) -> str | None:
    for r in lto.refs(q, c):
        for i, text in (r.max_ref | r.min_ref).items():
            return f"the inequality join {text} is not implied by filters and {_unbounded(q, c, i)}"
    return None


def _c3_set(q: Spj, c: Closure) -> str | None:
    for o, r in zip(q.occurrences, lto.refs(q, c)):
        n = lto.classes(c, list(r.max_ref)) + lto.classes(c, list(r.min_ref))
        if n > 1:
            joins = ", ".join(dict.fromkeys((r.max_ref | r.min_ref).values()))
            return (
                f"stream {o.label} has {n} unbounded attributes in inequality joins not implied by filters "
                f"({joins}); at most one (class of equal attributes) can be summarized by an extreme value"
            )
    return None


Check = Callable[[Spj, Closure], str | None]

ENUMERATION, CHECKER = "enumeration", "checker"
# the checker takes over when the enumeration could visit more LTO queries than this
CHECKER_FROM = 729
_FORCED: list[str] = []  # set by `using` (tests and the benchmark compare the two)


@contextmanager
def using(method: str) -> Iterator[None]:
    """Decide with `method` (ENUMERATION or CHECKER) whatever the query's size, inside the block."""
    _FORCED.append(method)
    try:
        yield
    finally:
        _FORCED.pop()


def method_for(q: Spj, c: Closure) -> str:
    """Enumerate the derived LTO queries when they are few, else run the checker."""
    if _FORCED:
        return _FORCED[-1]
    return CHECKER if checker.estimate(q, c) > CHECKER_FROM else ENUMERATION


def _conditions(q: Spj, c: Closure, theorem: str, c3: Check) -> tuple[Decision | None, str]:
    """C1, C2 on Q, then C1–C3 on every derived LTO query (the checker: on those its witness
    search cannot rule out); the first failure, or None, and the method that looked."""
    first: tuple[tuple[str, Check], ...] = (("C1", _c1), ("C2", _c2))
    for name, check in first:
        why = check(q, c)
        if why:
            return Decision(False, f"{theorem}, {name}", why), ""
    method = method_for(q, c)
    for lq in checker.leaves(q, c) if method == CHECKER else lto.derived(q, c):
        for name, check in (*first, ("C3", c3)):
            why = check(q, lq)
            if why:
                return Decision(False, f"{theorem}, {name}", why + _when(q, lq), method=method), method
    return None, method


def single_stream_bag(q: Spj, c: Closure) -> Decision:
    lines, units = synopsis.spj(q, c)
    why = "a duplicate-preserving select-project over one stream filters each tuple as it arrives"
    return Decision(True, "Section 5.1 (one stream, duplicates kept)", why, lines, units)


def theorem_5_6(q: Spj, c: Closure) -> Decision:
    failed, method = _conditions(q, c, "Theorem 5.6", _c3_bag)
    if failed:
        return failed
    lines, units = synopsis.spj(q, c)
    why = "projected and equality-joined attributes are bounded; every inequality join between unbounded "
    why += "attributes is implied by filters, in every derived LTO query"
    return Decision(True, "Theorem 5.6", why, lines, units, method)


def theorem_5_10(q: Spj, c: Closure) -> Decision:
    failed, method = _conditions(q, c, "Theorem 5.10", _c3_set)
    if failed:
        return failed
    lines, units = synopsis.spj(q, c)
    why = "projected and equality-joined attributes are bounded; each stream has at most one unbounded "
    why += "attribute class in inequality joins not implied by filters, in every derived LTO query"
    return Decision(True, "Theorem 5.10", why, lines, units, method)


def _holistic(a: Aggregation, c: Closure) -> str | None:
    for t in a.aggs:
        if t.func in HOLISTIC and t.arg is not None and not c.bounded(t.arg):
            return f"{t.func.upper()}({a.spj.names[t.arg]}) keeps every distinct value: {_unbounded(a.spj, c, t.arg)}"
    return None


def theorem_8_5(a: Aggregation, c: Closure) -> Decision:
    q = a.spj
    why = _c1(q, c, "grouping")
    if why:
        return Decision(False, "Theorem 8.5, (1)", why.replace("one result per value", "one group per value"))
    why = _holistic(a, c)
    if why:
        return Decision(False, "Theorem 8.5, (2)", why)
    lines, units = synopsis.aggregation(a, c)
    return Decision(
        True, "Theorem 8.5", "grouping attributes are bounded; no holistic aggregate of an unbounded one", lines, units
    )


def _extreme(a: Aggregation, c: Closure) -> str | None:
    """C3 of Theorem 8.6 on one LTO query: MAX(A) (MIN(A)) of an unbounded A needs A's class to be
    the stream's only one on the greater (smaller) side of nonredundant inequality joins, and, which
    the printed theorem leaves out, nothing of the stream on the other side (docs/bounded-memory.md:
    MAX(A) over S.B < T.D must answer "the largest A among the S tuples with B below the largest
    D", a predecessor search over every S tuple kept)."""
    q = a.spj
    per = lto.refs(q, c)
    for t in a.aggs:
        which = checker.extreme_side(t.func)
        if which is None or t.arg is None or c.bounded(t.arg):
            continue
        r = per[q.owner(t.arg)]
        side, other = (r.max_ref, r.min_ref) if which == 0 else (r.min_ref, r.max_ref)
        f = t.func.split()[0].upper()
        if side and (lto.classes(c, list(side)) > 1 or not any(c.eq(Elem(t.arg), Elem(m)) for m in side)):
            joins = ", ".join(dict.fromkeys(side.values()))
            return (
                f"{f}({q.names[t.arg]}) of an unbounded attribute, but the stream must also keep extremes for {joins}"
            )
        if other:
            joins = ", ".join(dict.fromkeys(other.values()))
            word = "smallest" if which == 0 else "largest"
            return (
                f"{f}({q.names[t.arg]}) of an unbounded attribute over the tuples that satisfy {joins}: the "
                f"answer depends on which tuples pass, not only on the {word} one"
            )
    return None


def theorem_8_6(a: Aggregation, c: Closure) -> Decision:
    q = a.spj
    reduced = theorem_5_10(q, c) if q.distinct else theorem_5_6(q, c)
    if not reduced.bounded:
        sub = "π" if q.distinct else "π̃"
        why = f"the join projected on the grouping attributes ({sub}) is unbounded by {reduced.rule}: {reduced.reason}"
        why = why.replace("one result per value", "one group per value")
        return Decision(False, "Theorem 8.6, C1", why, method=reduced.method)
    holistic = _holistic(a, c)
    if holistic:
        return Decision(False, "Theorem 8.6, C2", holistic)
    method = reduced.method
    if any(checker.extreme_side(t.func) is not None for t in a.aggs):
        method = method_for(q, c)
        for lq in checker.extreme_leaves(a, c) if method == CHECKER else lto.derived(q, c):
            extreme = _extreme(a, lq)
            if extreme:
                return Decision(False, "Theorem 8.6, C3", extreme + _when(q, lq), method=method)
    lines, units = synopsis.aggregation(a, c)
    why = "the join projected on the grouping attributes is bounded (" + reduced.rule + "), and so are the aggregates"
    return Decision(True, "Theorem 8.6", why, lines, units, method)


# (shape, one stream?) → the theorem that decides; shape: "bag" (π̃), "set" (π) or "aggregate".
THEOREMS: dict[tuple[str, bool], Callable[..., Decision]] = {
    ("bag", True): single_stream_bag,
    ("bag", False): theorem_5_6,
    ("set", True): theorem_5_10,
    ("set", False): theorem_5_10,
    ("aggregate", True): theorem_8_5,
    ("aggregate", False): theorem_8_6,
}


def decide(nf: NormalForm) -> Decision | Outside:
    """The verdict of the theorem for nf's shape, or Outside when the characterization does not
    settle it (a self-join under duplicate elimination, or too many LTO queries to check)."""
    q = nf.spj if isinstance(nf, Aggregation) else nf
    c = Closure.of(q.n_attrs, list(q.atoms))
    if c is None:
        why = "the WHERE clause can never hold, so the result is empty"
        return Decision(True, "Section 4 (unsatisfiable predicate)", why, ("nothing",), 0)
    shape = "aggregate" if isinstance(nf, Aggregation) else ("set" if q.distinct else "bag")
    try:
        d = THEOREMS[shape, len(q.occurrences) == 1](nf, c)
    except lto.TooMany:
        return Outside(f"more than {lto.LIMIT} derived LTO queries (or partial ones, for the checker) to check")
    self_join = len({o.stream for o in q.occurrences}) < len(q.occurrences)
    if not d.bounded and self_join and q.distinct:
        return Outside(f"a self-join under duplicate elimination, where {d.rule} is only sufficient ({d.reason})")
    return d
