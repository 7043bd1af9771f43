"""The k-constraint kinds as plain data, and their construction from the DDL's `with constraints`.

A constraint describes the arrivals of one stream (CA, OA), a key of one stream (ManyOne), or the
arrival distance between a stream and the one it references (RIDS). `k` is the adherence
parameter: 0 is the strict form, larger values tolerate more disorder.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from cqlstream.cql.ast import ConstraintDef


@dataclass(frozen=True)
class ManyOne:
    """`stream.column` is a key: a tuple of another stream joins at most one tuple of `stream` on it.
    `derived` names the plan shape that makes a derived relation's column a key (DISTINCT, a
    single group key, a join that keeps a key); empty when the stream declares it."""

    stream: str
    column: str
    k: int = 0
    derived: str = ""
    name = "many-one"


@dataclass(frozen=True)
class RIDS:
    """RIDS(k): the `ref_stream` tuple joining a `stream` tuple on `column = ref_column` arrives at most
    `k` `ref_stream` arrivals after it (k = 0: always before it). `assumed` names the derived
    relations it joins (their shapes, `join → group by`) when nobody declared it: between two
    relations computed by the plan, where no DDL can say it, the join assumes the strict form and
    the monitor withdraws it at the first row that breaks it."""

    stream: str
    column: str
    ref_stream: str
    ref_column: str
    k: int = 0
    assumed: str = ""
    name = "RIDS"


@dataclass(frozen=True)
class CA:
    """CA(k): tuples of `stream` with equal `column` arrive with at most `k` other tuples between them."""

    stream: str
    column: str
    k: int = 0
    name = "CA"


@dataclass(frozen=True)
class OA:
    """OA(k): every tuple arriving k + 1 or more tuples after s has `column` ≥ s.column."""

    stream: str
    column: str
    k: int = 0
    name = "OA"


Constraint = ManyOne | RIDS | CA | OA
UNDECLARED = -1  # the k of a candidate the monitors look for (not declared): they start from ∞

# DDL word → constructor from (stream, definition)
FROM_DEF: dict[str, Callable[[str, ConstraintDef], Constraint]] = {
    "unique": lambda s, d: ManyOne(s, d.column),
    "clustered": lambda s, d: CA(s, d.column, d.k),
    "ordered": lambda s, d: OA(s, d.column, d.k),
    "references": lambda s, d: RIDS(s, d.column, d.ref[0], d.ref[1], d.k) if d.ref else ManyOne(s, d.column),
}


def from_defs(stream: str, defs: Iterable[ConstraintDef]) -> list[Constraint]:
    """The constraints a stream declares (its `with constraints (...)` clause)."""
    return [FROM_DEF[d.kind](stream, d) for d in defs]


def label(c: Constraint, k: float | None = None, role: str | None = None) -> str:
    """`RIDS(k=10) on S.id` — `k` overrides the declared value (∞ once withdrawn), `role` renames OA
    (OAP / OAC, by the side of a many-one join it sits on)."""
    kk = c.k if k is None else k
    ks = "∞" if kk == float("inf") else str(int(kk))
    name = role or c.name
    if isinstance(c, ManyOne):
        return f"many-one on {c.stream}.{c.column}" + (f" ({c.derived})" if c.derived else "")
    if isinstance(c, RIDS):
        tail = f" (assumed: {c.assumed})" if c.assumed else ""
        return f"{name}(k={ks}) on {c.stream}.{c.column} → {c.ref_stream}.{c.ref_column}{tail}"
    return f"{name}(k={ks}) on {c.stream}.{c.column}"
