"""Column elimination for k-Mon's private join state (seed 000 §3.3.2).

The paper's synopsis of a stream "need[s] only store those attributes of S that are involved in
joins with other streams, or that are projected in the result of the query". Here: a join with
k-Mon keeps private state (its Yes/Unknown rows in memory, the rows it spills to the retraction
tier and the disk store), and every tier keeps, per input, only
- the columns the join's conjuncts read across inputs (its equalities, so k-Mon's join key too,
  and residual conjuncts such as `S.b < T.b`): the input's own selections run on the whole row
  before it enters the state, so their columns are not kept for them;
- the columns of the join's output that the plan above reads (engine/column_reads.py: the union
  over every query sharing the join; a query's output, and so SELECT *, reads every column).
Ids, timestamps and signs are not columns: deletes still find their rows by id, and the
bookkeeping (arrival rank, key, reason bits) is k-Mon's own. Output rows carry NULL in the columns
not kept; nothing reads them. The paper's second technique (a No component keeping only the
attributes joined with its parents) has no counterpart in exact mode: a spilled row comes back
when a partner of its key arrives after all, and must then produce the whole output row.

The choice is made when the strategy is attached, before any row enters the state, and widened
(never narrowed) while still no row has: rows already stored lack the columns eliminated, so a
query registered later that reads one of them does not share the join (the Dsms plans it its own).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from cqlstream.cql.logical import expr as X
from cqlstream.engine.operators.join import owners


def _offsets(widths: Sequence[int]) -> list[int]:
    out = [0]
    for w in widths[:-1]:
        out.append(out[-1] + w)
    return out


def conjunct_columns(predicate: X.Expr | None, widths: Sequence[int]) -> list[set[int]]:
    """Per input, the columns (its own numbering) that a conjunct over several inputs reads."""
    offsets = _offsets(widths)
    out: list[set[int]] = [set() for _ in widths]
    for c in X.conjuncts(predicate):
        if len(owners(c, offsets, widths)) < 2:
            continue  # an input's own selection (applied to the whole row before the state)
        for g in X.columns(c):
            x = max(k for k, o in enumerate(offsets) if o <= g)
            out[x].add(g - offsets[x])
    return out


@dataclass
class ColumnChoice:
    """Which columns of each input the state keeps, and why. `names[x]`: input x's column names;
    `read[x]`: its columns the plan above reads; `joined[x]`: those the join's conjuncts read;
    `eliminate`: the knob (False: every column is kept)."""

    names: list[list[str]]
    read: list[frozenset[int]]
    joined: list[frozenset[int]]
    eliminate: bool = True

    @property
    def kept(self) -> list[tuple[int, ...]]:
        if not self.eliminate:
            return [tuple(range(len(n))) for n in self.names]
        return [tuple(sorted(r | j)) for r, j in zip(self.read, self.joined)]

    def eliminated(self, x: int) -> list[int]:
        keep = set(self.kept[x])
        return [c for c in range(len(self.names[x])) if c not in keep]

    def covers(self, read: Sequence[Iterable[int]]) -> bool:
        """Whether the kept columns hold every column `read` (per input) asks for."""
        return all(set(r) <= set(k) for r, k in zip(read, self.kept))

    def line(self) -> str:
        """EXPLAIN's account: per input, the columns kept and those eliminated."""
        parts = []
        for x, names in enumerate(self.names):
            kept = ", ".join(names[c] for c in self.kept[x])
            gone = ", ".join(names[c] for c in self.eliminated(x))
            parts.append(f"[{kept}]" + (f" (eliminated: {gone})" if gone else ""))
        how = "" if self.eliminate else " (elimination off)"
        return "state keeps columns " + " ⋈ ".join(parts) + how

    def table(self) -> list[dict[str, object]]:
        return [
            {
                "input": x,
                "kept": [names[c] for c in self.kept[x]],
                "eliminated": [names[c] for c in self.eliminated(x)],
                "read_above": [names[c] for c in sorted(self.read[x])],
                "joined": [names[c] for c in sorted(self.joined[x])],
            }
            for x, names in enumerate(self.names)
        ]


def split_reads(read: frozenset[int], widths: Sequence[int]) -> list[frozenset[int]]:
    """A join's read output columns, as columns of each input."""
    offsets = _offsets(widths)
    return [frozenset(c - o for c in read if o <= c < o + w) for o, w in zip(offsets, widths)]
