"""What the characterization decides about one query: bounded or not, the rule that decided,
why, and for a bounded query the constant-size synopsis that answers it."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Decision:
    """`bounded`: the query can be answered in memory bounded by a constant whatever the input
    (False: any algorithm needs memory linear in the input on some inputs)."""

    bounded: bool
    rule: str  # e.g. "Theorem 5.10, C3"
    reason: str  # names the attribute / predicate that decided
    synopsis: tuple[str, ...] = ()  # what is kept, one line per part (bounded queries)
    memory_units: int | None = None  # bound on the synopsis, one unit = one value or one count
    # how C3 was checked over the derived LTO queries: "enumeration" (every one), "checker" (the
    # §6 witness search, cql/boundedness/checker.py), or "" (no LTO query needed checking)
    method: str = ""
