"""The query shapes the characterization covers, in its own terms: select-project-join queries
over whole streams, with duplicate-preserving or duplicate-eliminating projection, optionally
under grouping and aggregation; predicates a conjunction of `<` / `=` comparisons."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

from cqlstream.cql.boundedness.closure import Atom, Elem

# Aggregates by the paper's classes: holistic ones need every distinct value; duplicate-insensitive
# ones give the same answer over a bag and over its set.
HOLISTIC = frozenset({"count distinct", "sum distinct", "avg distinct", "median"})
DUP_INSENSITIVE = frozenset({"min", "max", "min distinct", "max distinct"}) | HOLISTIC - {"median"}
STANDARD = frozenset({"count", "sum", "avg", "min", "max"}) | HOLISTIC | DUP_INSENSITIVE


@dataclass(frozen=True)
class Occurrence:
    """One stream in the FROM clause (a self-join reads a stream twice)."""

    label: str  # the stream's name; `S#2` for its second occurrence
    stream: str
    attrs: tuple[int, ...]  # attribute numbers, in the stream's column order


@dataclass(frozen=True)
class Spj:
    """Π_L(σ_P(S1 × … × Sn)): `distinct` = duplicate-eliminating π, else duplicate-preserving π̃."""

    occurrences: tuple[Occurrence, ...]
    names: tuple[str, ...]  # display name of attribute i at index i (index 0 unused)
    atoms: tuple[Atom, ...]
    projected: tuple[int, ...]  # L
    distinct: bool

    @property
    def n_attrs(self) -> int:
        return len(self.names) - 1

    @cached_property
    def _owners(self) -> dict[int, int]:
        return {i: k for k, o in enumerate(self.occurrences) for i in o.attrs}

    def owner(self, i: int) -> int:
        """Index of the occurrence attribute i belongs to."""
        return self._owners[i]

    @cached_property
    def _referenced(self) -> list[int]:
        seen = {e.attr for a in self.atoms for e in (a.left, a.right) if not e.is_const} | set(self.projected)
        return sorted(seen)

    def referenced(self) -> list[int]:
        """Attributes that appear in P or L (the others never affect the verdict)."""
        return self._referenced

    @cached_property
    def _constants(self) -> list[int]:
        return sorted({e.value for a in self.atoms for e in (a.left, a.right) if e.is_const})

    def constants(self) -> list[int]:
        return self._constants

    @cached_property
    def _elements(self) -> list[Elem]:
        return [Elem(i) for i in self.referenced()] + [Elem(0, k) for k in self.constants()]

    def elements(self) -> list[Elem]:
        """ℰ(Q) restricted to what P and L mention: referenced attributes first, then constants."""
        return self._elements

    def joined(self) -> set[int]:
        """Attributes in a predicate between two different occurrences."""
        out: set[int] = set()
        for a in self.atoms:
            if not (a.left.is_const or a.right.is_const) and self.owner(a.left.attr) != self.owner(a.right.attr):
                out |= {a.left.attr, a.right.attr}
        return out

    def show(self, e: Elem) -> str:
        return str(e.value) if e.is_const else self.names[e.attr]


@dataclass(frozen=True)
class AggTerm:
    """One aggregate of the normal form: the function and the attribute it reads."""

    func: str  # lower case; `count distinct` etc. for DISTINCT aggregates
    arg: int | None  # attribute number (None: count(*))


@dataclass(frozen=True)
class Aggregation:
    """_G𝒢_F(σ_P(S1 × … × Sn)): `spj` carries P and the streams; its L is G and its projection
    kind follows the paper's characteristic query (π when every aggregate ignores duplicates)."""

    spj: Spj
    keys: tuple[int, ...]
    aggs: tuple[AggTerm, ...]


@dataclass(frozen=True)
class Outside:
    """The query is not in the characterized class; `reason` names the construct."""

    reason: str


NormalForm = Spj | Aggregation
