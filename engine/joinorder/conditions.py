"""Plan-time selectivities of a join's non-equality conditions (a band `r.a BETWEEN s.b − 5 AND
s.b + 5`, an inequality `r.x < s.y`): what the cost model multiplies a partial result by once
every input a condition reads is bound, before any tuple has been seen.

No index serves these conditions (the engine pairs every alive instance of the probed window
and keeps the pairs the condition passes), so they never make a probe cheaper; they make the
*rows passed on* fewer, which is what decides whether a window is worth probing early. The
defaults are PostgreSQL's for comparisons it knows nothing about (selfuncs.h): one inequality
keeps a third, a value bounded from below and from above (a band, a BETWEEN) keeps 0.5 %, and
`<>` keeps all but the equality's share. Other conditions (OR, LIKE, functions) keep a third.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from cqlstream.cql.logical import expr as X

DEFAULT_INEQ = 1.0 / 3.0  # one inequality (PostgreSQL's DEFAULT_INEQ_SEL)
DEFAULT_RANGE = 0.005  # a value bounded below and above: a band (PostgreSQL's DEFAULT_RANGE_INEQ_SEL)
DEFAULT_OTHER = 1.0 / 3.0  # a condition of no known kind

# comparison → (the side it bounds from below, the side it bounds from above), as arg positions
BOUNDS = {">": (0, 1), ">=": (0, 1), "<": (1, 0), "<=": (1, 0)}

Condition = tuple[frozenset[int], float]  # (the inputs a condition reads, the share of rows it keeps)


def _not_equal(distinct: float) -> float:
    return 1.0 - 1.0 / max(distinct, 1.0)


# op of a single condition → its selectivity given the default distinct count of a join value
SELECTIVITY: dict[str, Callable[[float], float]] = {
    ">": lambda d: DEFAULT_INEQ,
    ">=": lambda d: DEFAULT_INEQ,
    "<": lambda d: DEFAULT_INEQ,
    "<=": lambda d: DEFAULT_INEQ,
    "<>": _not_equal,
}


def _bounded(c: X.Expr) -> tuple[X.Expr, X.Expr] | None:
    """(the side bounded from below, the side bounded from above) of an inequality, else None."""
    if isinstance(c, X.Op) and c.op in BOUNDS and len(c.args) == 2:
        lo, hi = BOUNDS[c.op]
        return c.args[lo], c.args[hi]
    return None


def condition_estimates(theta: Sequence[tuple[X.Expr, frozenset[int]]], distinct: float) -> tuple[Condition, ...]:
    """Per non-equality condition (conjunct, inputs it reads): the inputs and the share kept. Two
    inequalities bounding the same expression from below and from above (BETWEEN becomes two)
    are one band, estimated together: DEFAULT_RANGE for the pair, not DEFAULT_INEQ squared."""
    bounds = [_bounded(c) for c, _own in theta]
    paired: set[int] = set()
    out: list[Condition] = []
    for k, bk in enumerate(bounds):
        if bk is None or k in paired:
            continue
        for m in range(k + 1, len(theta)):
            bm = bounds[m]
            if m in paired or bm is None:
                continue
            # k bounds x from below and m from above (or the reverse): a band on x
            if bk[0] == bm[1] or bk[1] == bm[0]:
                paired |= {k, m}
                out.append((theta[k][1] | theta[m][1], DEFAULT_RANGE))
                break
    for k, (c, own) in enumerate(theta):
        if k in paired:
            continue
        op = c.op if isinstance(c, X.Op) else ""
        sel = SELECTIVITY.get(op)
        out.append((own, sel(distinct) if sel is not None else DEFAULT_OTHER))
    return tuple(out)
