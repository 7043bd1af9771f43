"""Derived LTO (locally totally ordered) queries and the facts the theorems read from each.

A query is LTO when, for every stream, its attributes and the query's constants are totally
ordered by P⁺. The LTO queries derived from Q add filters (predicates within one stream) until
that holds; Q is bounded iff each of them is. They are enumerated by branching `<`, `=`, `>` on
the first pair of one stream's elements P⁺ leaves unordered, pruning unsatisfiable branches, so
every leaf is a distinct P⁺. Only attributes compared with another attribute take part (`linked`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from itertools import pairwise

import numpy as np

from cqlstream.cql.boundedness.closure import Atom, Closure, Elem
from cqlstream.cql.boundedness.normal_form import Spj

LIMIT = 2_000  # derived LTO queries examined before giving up (the count is exponential)


class TooMany(Exception):
    """More derived LTO queries than LIMIT."""


class Budget:
    """A shared count of the nodes a search may still visit (TooMany when spent)."""

    def __init__(self, n: int) -> None:
        self.left = n

    def spend(self) -> None:
        self.left -= 1
        if self.left < 0:
            raise TooMany


def derived(
    q: Spj,
    c: Closure,
    limit: int = LIMIT,
    prune: Callable[[Closure], bool] | None = None,
    first: set[int] | None = None,
    budget: Budget | None = None,
) -> Iterator[Closure]:
    """The P⁺ of every LTO query derived from q (c = q's P⁺). `prune(partial)`: True skips every
    LTO query completing that partial one (the checker's test that none of them can fail), and
    the partial queries visited are then counted (against `budget` if given, else `limit`)
    rather than the leaves; `first`: attributes whose pairs are branched on first, pairs of two
    attributes before pairs of an attribute and a constant (the checker's order)."""
    refs = linked(q)
    consts = [Elem(0, k) for k in q.constants()]
    pairs: list[tuple[Elem, Elem]] = []
    for o in q.occurrences:
        group = [Elem(i) for i in o.attrs if i in refs] + consts
        pairs += [(a, b) for i, a in enumerate(group) for b in group[i + 1 :] if not (a.is_const and b.is_const)]
    if first is not None:
        pairs.sort(key=lambda p: (not ({p[0].attr, p[1].attr} & first), p[0].is_const or p[1].is_const))
    count = 0
    if prune is not None and budget is None:
        budget = Budget(limit)

    def branch(c: Closure, i: int) -> Iterator[Closure]:
        nonlocal count
        while i < len(pairs) and c.ordered(*pairs[i]):
            i += 1
        if prune is not None and budget is not None:
            budget.spend()
            if prune(c):
                return
        if i == len(pairs):
            if prune is None:
                count += 1
                if count > limit:
                    raise TooMany
            yield c
            return
        a, b = pairs[i]
        for atom in (Atom("<", a, b), Atom("=", a, b), Atom("<", b, a)):
            nxt = c.add(atom)
            if nxt is not None:
                yield from branch(nxt, i + 1)

    yield from branch(c, 0)


def linked(q: Spj) -> set[int]:
    """Attributes compared with another attribute somewhere in P. The others are compared with
    constants only: ordering them cannot bound another attribute, make an inequality join
    redundant (a constant would sit between its sides already) or join streams, so the LTO
    queries that differ only in where they sit decide alike, and one of them stands for all."""
    return {e.attr for a in q.atoms if not (a.left.is_const or a.right.is_const) for e in (a.left, a.right)}


@dataclass(frozen=True)
class Refs:
    """MaxRef / MinRef of one stream in one LTO query: its unbounded attributes on the greater /
    smaller side of a nonredundant inequality join, with the joins that put them there."""

    max_ref: dict[int, str]  # attribute → the join predicate, as text
    min_ref: dict[int, str]


def refs(q: Spj, c: Closure) -> list[Refs]:
    """Refs per occurrence of q, under P⁺ = c."""
    out = [Refs({}, {}) for _ in q.occurrences]
    elements = q.elements()
    lt, _, redundant = c.relations(elements)
    attrs = [e.attr for e in elements if not e.is_const]  # the first len(attrs) elements
    owner = np.array([q.owner(i) for i in attrs])
    n = len(attrs)
    # an inequality join in P⁺ (y < x, different streams) that is nonredundant; an implied one
    # counts too, e.g. through S.A = S.B < T.D
    joins = lt[:n, :n] & ~redundant[:n, :n] & (owner[:, None] != owner[None, :])
    bounded = [c.bounded(i) for i in attrs]
    for yi, xi in zip(*np.nonzero(joins)):
        x, y = attrs[xi], attrs[yi]
        text = f"{q.names[y]} < {q.names[x]}"
        if not bounded[xi]:
            out[owner[xi]].max_ref.setdefault(x, text)
        if not bounded[yi]:
            out[owner[yi]].min_ref.setdefault(y, text)
    return out


def classes(c: Closure, attrs: list[int]) -> int:
    """|attrs|_eq: how many classes P⁺'s equalities split attrs into."""
    reps: list[int] = []
    for a in attrs:
        if not any(c.eq(Elem(a), Elem(r)) for r in reps):
            reps.append(a)
    return len(reps)


def describe(q: Spj, c: Closure) -> str:
    """The LTO query's order of each stream's referenced attributes among the constants, e.g.
    `S: 10 = S.A < S.B; T: 10 < T.D`."""
    refs_ = set(q.referenced())
    parts = []
    for o in q.occurrences:
        group = [Elem(i) for i in o.attrs if i in refs_]
        if not group:
            continue
        group += [Elem(0, k) for k in q.constants()]
        chain = sorted(group, key=lambda e: sum(c.lt(f, e) for f in group))
        text = q.show(chain[0])
        for a, b in pairwise(chain):
            text += (" = " if c.eq(a, b) else " < ") + q.show(b)
        parts.append(f"{o.label}: {text}")
    return "; ".join(parts)
