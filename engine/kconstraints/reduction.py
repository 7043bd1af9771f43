"""The Yes / No / Unknown partition of one join input's state, and the rules that decide it.

For a 2-way join of inputs X and Y, a state row r of X is
- Yes: it has met a Y partner (its results are out);
- No: it has not, and the constraints say no future Y insert can match it;
- Unknown: neither.
A rule (one constraint applied to X) marks the rows no future Y insert can match ("blocked"). Rows
that are No, or Yes and blocked, are unnecessary for future inserts: exact mode spills them to the
disk store (they come back for a Y delete of their key or their own delete), approximate mode
drops the No ones.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from cqlstream.engine.kconstraints.constraints import CA, OA, RIDS, Constraint, ManyOne, label
from cqlstream.engine.kconstraints.monitors import CAAux, Monitor, OARecord


@dataclass
class StateView:
    """What the rules read of X's state rows: join key (valid = not NULL), whether the row met a Y
    partner, how many Y inserts had arrived before it, and how many have arrived by now."""

    key: np.ndarray
    valid: np.ndarray
    joined: np.ndarray
    born: np.ndarray
    partner_n: int


class Rule:
    """One constraint applied to input `x` of a join; `bit` tags the rows it blocks."""

    evidence = False  # approximate mode keeps rows to k_e (and a p-sample) to see increases

    def __init__(self, c: Constraint, x: int, bit: int, monitor: Monitor, role: str | None = None) -> None:
        self.c, self.x, self.bit, self.monitor, self.role = c, x, bit, monitor, role

    def blocked(self, v: StateView, k: float) -> np.ndarray:
        raise NotImplementedError

    def arrive(self, keys: np.ndarray) -> np.ndarray | None:
        """Partner inserts (keys in arrival order): the distances they show, if this rule measures
        them from arrivals."""
        return None

    def forget(self, alive_keys: np.ndarray) -> None:
        """Bound the rule's structures; `alive_keys`: sorted keys of the pruned input's live rows."""

    def nbytes(self) -> int:
        return 0

    def label(self) -> str:
        return label(self.c, self.monitor.k_u, self.role)


class ManyOneRule(Rule):
    """Y's key column is unique: a row that met its one partner meets no other insert."""

    def blocked(self, v: StateView, k: float) -> np.ndarray:
        return v.joined.copy()


class RidsRule(Rule):
    """RIDS(k) on X → Y: a row whose partner has not come within k Y arrivals never gets one."""

    evidence = True

    def blocked(self, v: StateView, k: float) -> np.ndarray:
        return (v.partner_n - v.born) >= k


class CaRule(Rule):
    """CA(k) on Y's join column: once k + 1 other values followed the value v, no Y has v again."""

    def __init__(self, c: Constraint, x: int, bit: int, monitor: Monitor, role: str | None = None) -> None:
        super().__init__(c, x, bit, monitor, role)
        self.aux = CAAux()

    def arrive(self, keys: np.ndarray) -> np.ndarray:
        return self.aux.arrive(keys)

    def forget(self, alive_keys: np.ndarray) -> None:
        """Values closed long ago that no row of the pruned input (in memory or spilled) has."""
        self.aux.forget_older(self.monitor.k_e + self.monitor.W, alive_keys)

    def blocked(self, v: StateView, k: float) -> np.ndarray:
        return v.valid & (self.aux.gap(v.key) > k)

    def nbytes(self) -> int:
        return self.aux.nbytes()


class OaRule(Rule):
    """OA(k) on Y's join column: no future Y has a value below the max of all but its last k arrivals."""

    def __init__(self, c: Constraint, x: int, bit: int, monitor: Monitor, role: str | None = None) -> None:
        super().__init__(c, x, bit, monitor, role)
        self.rec = OARecord()

    def arrive(self, keys: np.ndarray) -> np.ndarray:
        d = self.rec.arrive(keys)
        self.rec.forget_older(max(self.monitor.k_e, self.monitor.W))
        return d

    def blocked(self, v: StateView, k: float) -> np.ndarray:
        lo = self.rec.lo(k)
        return np.zeros(len(v.key), bool) if lo is None else v.valid & (v.key < lo)

    def nbytes(self) -> int:
        return self.rec.nbytes()


RULES: dict[type, type[Rule]] = {ManyOne: ManyOneRule, RIDS: RidsRule, CA: CaRule, OA: OaRule}


@dataclass(frozen=True)
class Partition:
    """Row counts of one input's state by component."""

    yes: int
    no: int
    unknown: int


def partition(joined: np.ndarray, blocked: np.ndarray) -> Partition:
    no = int((~joined & blocked).sum())
    yes = int(joined.sum())
    return Partition(yes, no, len(joined) - yes - no)
