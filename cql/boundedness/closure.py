"""The transitive closure P⁺ of a conjunction of `<` / `=` comparisons over the integers.

Elements are attributes (numbered from 1) and integer constants. P is kept as a closed system of
difference constraints `x_u − x_v ≤ d[u][v]` over the attributes plus a zero node 0 that stands
for the constants, so P⁺'s membership tests, satisfiability and each attribute's bounds are
lookups; adding one predicate re-closes in O(n²) (derived-LTO enumeration adds many).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

INF = np.inf


@dataclass(frozen=True)
class Elem:
    """An attribute (`attr` ≥ 1, value 0 unused) or a constant (`attr` 0, `value` the integer)."""

    attr: int
    value: int = 0

    @property
    def is_const(self) -> bool:
        return self.attr == 0


def attr(i: int) -> Elem:
    return Elem(i)


def const(k: int) -> Elem:
    return Elem(0, k)


@dataclass(frozen=True)
class Atom:
    """`left op right`, op `<` or `=` (`>` is stored flipped)."""

    op: str
    left: Elem
    right: Elem


class Closure:
    """P⁺ for attributes 1..n: `lt`, `eq`, `bounds`; `add` returns a new closure (None: P ∧ atom
    is unsatisfiable over the integers)."""

    def __init__(self, n: int, d: np.ndarray | None = None) -> None:
        self.n = n
        if d is None:
            d = np.full((n + 1, n + 1), INF)
            np.fill_diagonal(d, 0.0)
        self.d = d
        self._relations: dict[tuple[Elem, ...], tuple[np.ndarray, np.ndarray, np.ndarray]] = {}

    @classmethod
    def of(cls, n: int, atoms: list[Atom]) -> Closure | None:
        c: Closure | None = cls(n)
        for a in atoms:
            if c is None:
                return None
            c = c.add(a)
        return c

    def _tighten(self, d: np.ndarray, u: int, v: int, w: float) -> np.ndarray:
        """d closed under shortest paths, plus the edge x_u − x_v ≤ w, closed again."""
        if d[u, v] <= w:
            return d
        return np.minimum(d, d[:, u : u + 1] + w + d[v : v + 1, :])

    def add(self, a: Atom) -> Closure | None:
        """P ∧ a, or None when that is unsatisfiable (a negative cycle)."""
        (u, ou), (v, ov) = (a.left.attr, a.left.value), (a.right.attr, a.right.value)
        # left − right ≤ c  ⇔  x_u − x_v ≤ c − ou + ov (a constant is the zero node plus its value)
        d = self._tighten(self.d, u, v, (-1 if a.op == "<" else 0) - ou + ov)
        if a.op == "=":
            d = self._tighten(d, v, u, ou - ov)
        if (np.diag(d) < 0).any():
            return None
        return Closure(self.n, d)

    def lt(self, a: Elem, b: Elem) -> bool:
        """(a < b) ∈ P⁺."""
        return bool(self.d[a.attr, b.attr] <= -1 - a.value + b.value)

    def eq(self, a: Elem, b: Elem) -> bool:
        """(a = b) ∈ P⁺."""
        return bool(self.d[a.attr, b.attr] <= b.value - a.value and self.d[b.attr, a.attr] <= a.value - b.value)

    def ordered(self, a: Elem, b: Elem) -> bool:
        """P⁺ fixes how a and b compare."""
        return self.lt(a, b) or self.lt(b, a) or self.eq(a, b)

    def upper(self, i: int) -> int | None:
        """The largest value attribute i may take (None: no upper bound)."""
        v = self.d[i, 0]
        return None if v == INF else int(v)

    def lower(self, i: int) -> int | None:
        v = self.d[0, i]
        return None if v == INF else int(-v)

    def bounded(self, i: int) -> bool:
        """Bounded in the paper's sense: bounded above and below by constants."""
        return self.upper(i) is not None and self.lower(i) is not None

    def values(self, i: int) -> int | None:
        """How many values a bounded attribute may take (None: unbounded)."""
        hi, lo = self.upper(i), self.lower(i)
        return None if hi is None or lo is None else hi - lo + 1

    def relations(self, elements: list[Elem]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(lt, eq, redundant) as boolean matrices over `elements`: lt[i, j] ⇔ (e_i < e_j) ∈ P⁺,
        eq likewise, redundant[i, j] ⇔ that inequality is redundant (`redundant`, all at once)."""
        key = tuple(elements)
        if key not in self._relations:
            self._relations[key] = self._compute_relations(elements)
        return self._relations[key]

    def _compute_relations(self, elements: list[Elem]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        nodes = np.array([e.attr for e in elements], dtype=np.int64)
        off = np.array([e.value for e in elements], dtype=float)
        d = self.d[np.ix_(nodes, nodes)]
        lt = d <= -1 - off[:, None] + off[None, :]
        le = d <= off[None, :] - off[:, None]
        eq = le & le.T
        k = nodes == 0
        lti, eqi = lt.astype(np.int64), eq.astype(np.int64)
        through = (lti @ lti) + (eqi[:, k] @ lti[k, :]) + (lti[:, k] @ eqi[k, :])
        return lt, eq, lt & (through > 0)

    def redundant(self, a: Elem, b: Elem, elements: list[Elem]) -> bool:
        """(a < b) ∈ P⁺ is redundant: implied through another element e (a < e < b), or through
        a constant equal to one side and below / above the other. Filters cost no memory, so an
        inequality implied only through an equal attribute is *not* redundant."""
        els = list(dict.fromkeys([a, b, *elements]))
        return bool(self.relations(els)[2][0, 1])
