"""Where a plan may be thinned without its result growing: the monotonicity analysis.

Static approximation only removes tuples (a smaller window, a lower sampling rate), so it is safe
at a position when every operator from there to the root is monotone in that input: a sub-bag in
gives a sub-bag out, at every instant. `Ctx` is what the path from the root to a position says;
`child_ctx(node, i, ctx)` extends it by one edge, a table of cases per operator:

- Filter, Project, inner Join, UNION ALL, INTERSECT ALL, EXCEPT ALL's left side, a semijoin's
  left side and EXISTS/IN's subquery, Rstream: monotone (pass the context on).
- DISTINCT and the set versions of UNION/EXCEPT/INTERSECT: duplicate elimination, where a smaller
  window lets a tuple leave and come back, so its stream of changes grows (CIDR'03 §5.1.1): refuse.
- EXCEPT's right side, NOT EXISTS / NOT IN's subquery: fewer tuples there mean more results: refuse.
- Dstream: R(t−1) − R(t) grows when R(t) shrinks: refuse.
- Istream(R) = R(t) − R(t−1): safe only over a relation that only grows (then it is the tuples new
  at t, and sampling keeps that so); a smaller window makes tuples leave and come back, so window
  reduction is refused below an Istream, and so are the operators whose tuples' arrival instant a
  sample can postpone (a semijoin's subquery, INTERSECT).
- A time-based window passes the context to its stream (a sub-stream gives a sub-window); a Rows
  or Partition window does not: the last n tuples of a sample include older ones (refuse below).
- SAMPLE keeps elements by arrival position, so thinning its input shifts which ones it keeps
  (refuse below); lowering its own rate keeps a subset (its own position decides).
- An aggregate's value changes when its input is thinned: positions below it are allowed only by
  an explicit TOLERATE clause on that window or sample, never by a query-wide tolerance.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from cqlstream.cql.logical import nodes as L
from cqlstream.cql.logical.explain import node_label


@dataclass(frozen=True)
class Ctx:
    """The path from the root to a position: `hard` a reason that forbids any thinning here;
    `aggregate` the aggregate above (explicit tolerance only); `istream` the Istream above, up to
    the next window (no window reduction)."""

    hard: str | None = None
    aggregate: str | None = None
    istream: str | None = None
    below_sample: bool = False  # the position is a Sample's input (that Sample is the place to sample)

    def refusal(self, explicit: bool) -> str | None:
        """Why thinning the input here is not allowed (None: allowed)."""
        if self.hard:
            return self.hard
        if self.aggregate and not explicit:
            return (
                f"under {self.aggregate}: a thinner input changes aggregate values, not only which rows "
                "appear; only an explicit TOLERATE on this window or sample allows that"
            )
        return None

    def window_refusal(self, explicit: bool) -> str | None:
        """Why a window here may not shrink (None: it may)."""
        if self.istream:
            return (
                f"under {self.istream}: in a smaller window a tuple can leave and come back, and Istream emits it again"
            )
        return self.refusal(explicit)


def _hard(ctx: Ctx, node: L.Plan, why: str) -> Ctx:
    return ctx if ctx.hard else replace(ctx, hard=f"under {node_label(node)}: {why}")


def _same(node: L.Plan, i: int, ctx: Ctx) -> Ctx:
    return ctx


def _distinct(node: L.Plan, i: int, ctx: Ctx) -> Ctx:
    return _hard(ctx, node, "duplicate elimination; a tuple that leaves and comes back is output again")


def _setop(node: L.Plan, i: int, ctx: Ctx) -> Ctx:
    assert isinstance(node, L.SetOp)
    if not node.all:
        return _distinct(node, i, ctx)
    if node.op == "except" and i == 1:
        return _hard(ctx, node, "the right side of EXCEPT: fewer tuples there give more results")
    if node.op == "intersect" and ctx.istream:
        return _hard(ctx, node, f"below {ctx.istream}, a thinner input can make a tuple appear later than it did")
    return ctx


def _semijoin(node: L.Plan, i: int, ctx: Ctx) -> Ctx:
    assert isinstance(node, L.SemiJoin)
    if i == 0:
        return ctx
    if node.anti:
        return _hard(ctx, node, "the subquery of NOT EXISTS / NOT IN: fewer tuples there give more results")
    if ctx.istream:
        return _hard(ctx, node, f"below {ctx.istream}, a thinner subquery can make a row appear later than it did")
    return ctx


def _aggregate(node: L.Plan, i: int, ctx: Ctx) -> Ctx:
    return ctx if ctx.aggregate else replace(ctx, aggregate=node_label(node))


def _window(node: L.Plan, i: int, ctx: Ctx) -> Ctx:
    assert isinstance(node, L.Window)
    if not node.spec.time_based:
        return _hard(ctx, node, "the last tuples of a thinned stream include older ones the exact window has not")
    return replace(ctx, istream=None)  # a sub-stream gives a sub-window, whatever reads the window


def _sample(node: L.Plan, i: int, ctx: Ctx) -> Ctx:
    return _hard(ctx, node, "it keeps elements by arrival position, so thinning its input shifts which it keeps")


def _r2s(node: L.Plan, i: int, ctx: Ctx) -> Ctx:
    assert isinstance(node, L.RelToStream)
    if node.op == "rstream":
        return replace(ctx, istream=None)
    if node.op == "dstream":
        return _hard(ctx, node, "R(t−1) − R(t) grows when R(t) shrinks")
    if not node.input.monotonic:
        return _hard(ctx, node, "R(t) − R(t−1) over a relation that also shrinks grows when R(t−1) shrinks")
    return replace(ctx, istream=node_label(node))


def _stream_join(node: L.Plan, i: int, ctx: Ctx) -> Ctx:
    # Rstream(S [Now] ⋈ X): the Rstream and the [Now] window each reset what is below an Istream
    assert isinstance(node, L.StreamJoin)
    return replace(ctx, istream=None)


Transition = Callable[[L.Plan, int, Ctx], Ctx]
TRANSITIONS: dict[type, Transition] = {
    L.Filter: _same,
    L.Project: _same,
    L.Join: _same,
    L.StreamJoin: _stream_join,
    L.SetOp: _setop,
    L.SemiJoin: _semijoin,
    L.Distinct: _distinct,
    L.Aggregate: _aggregate,
    L.Window: _window,
    L.Sample: _sample,
    L.RelToStream: _r2s,
}


def child_ctx(node: L.Plan, i: int, ctx: Ctx) -> Ctx:
    """The context of input `i` of `node`, whose own context is `ctx`."""
    return replace(TRANSITIONS[type(node)](node, i, ctx), below_sample=isinstance(node, L.Sample))
