"""Memory allocation for precision: split a total byte budget among the stateful operators of
the running queries so that the weighted sum of the active queries' precisions is largest.

The budget is handed out in whole units. A greedy pass gives each unit batch to the operator
whose precision gain per unit is largest (trying several batch sizes, so an operator whose
benefit starts only past a threshold still gets its chance), then a local search moves batches
between operators while that improves the objective. Changes — a query coming, going, being
(de)activated or reweighted, an input's rates or an operator's need changing, a new budget —
re-run the search from the current allocation instead of from nothing, so little moves when
little changed.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace
from itertools import product
from typing import Any

from cqlstream.engine.approx.precision import Plan

_EPS = 1e-12


@dataclass(frozen=True)
class Query:
    """A query's result node, its weight and whether it runs (inactive ones count for nothing)."""

    name: str
    root: str
    weight: float = 1.0
    active: bool = True


class Allocator:
    """The allocation of `budget` bytes (in units of `unit` bytes) over `plan` for `queries`."""

    def __init__(self, plan: Plan, budget: int, unit: int = 1) -> None:
        self.plan = plan
        self.budget = budget
        self.unit = unit
        self.queries: dict[str, Query] = {}
        self.units: dict[str, int] = {}  # operator → units given
        self.evaluations = 0  # objective evaluations so far (what a re-run costs)

    # ---------------------------------------------------------------- the objective
    def bytes(self) -> dict[str, int]:
        """Bytes per stateful operator of the current allocation."""
        return {k: u * self.unit for k, u in self.units.items() if u}

    def objective(self, units: Mapping[str, int] | None = None) -> float:
        """Σ weight × precision over the active queries (of `units`, default the current one)."""
        units = self.units if units is None else units
        self.evaluations += 1
        alloc = {k: u * self.unit for k, u in units.items()}
        memo: dict[str, Any] = {}
        return sum(q.weight * self.plan.rates(alloc, q.root, memo).precision for q in self._live())

    def precision(self, query: str) -> float:
        q = self.queries[query]
        return self.plan.rates(self.bytes(), q.root).precision

    def _live(self) -> list[Query]:
        return [q for q in self.queries.values() if q.active and q.weight > 0]

    def operators(self) -> list[str]:
        """Stateful operators some live query reads (the only ones worth memory), sorted."""
        seen: set[str] = set()
        todo = [q.root for q in self._live()]
        while todo:
            k = todo.pop()
            if k not in seen:
                seen.add(k)
                todo.extend(self.plan.nodes[k].inputs)
        return [k for k in self.plan.stateful() if k in seen]

    def cap(self, op: str) -> int:
        """Units past which an operator gains nothing (its exact state)."""
        n = self.plan.nodes[op]
        return math.ceil((n.need + n.need_right) / self.unit)

    # ---------------------------------------------------------------- changes (§ incremental)
    def add_query(self, q: Query) -> dict[str, int]:
        self.queries[q.name] = q
        return self.rerun()

    def drop_query(self, name: str) -> dict[str, int]:
        del self.queries[name]
        return self.rerun()

    def set_active(self, name: str, active: bool) -> dict[str, int]:
        self.queries[name] = replace(self.queries[name], active=active)
        return self.rerun()

    def set_weight(self, name: str, weight: float) -> dict[str, int]:
        self.queries[name] = replace(self.queries[name], weight=weight)
        return self.rerun()

    def set_node(self, name: str, **changes: Any) -> dict[str, int]:
        """New statistics of a node (rate, overlap, need, items, need_right) — e.g. measured rates."""
        self.plan.nodes[name] = replace(self.plan.nodes[name], **changes)
        return self.rerun()

    def set_budget(self, budget: int) -> dict[str, int]:
        self.budget = budget
        return self.rerun()

    # ---------------------------------------------------------------- solving
    def solve(self) -> dict[str, int]:
        """From scratch: forget the current allocation and search again."""
        self.units = {}
        return self.rerun()

    def rerun(self) -> dict[str, int]:
        """Search again starting from the current allocation, trimmed to what still matters."""
        ops = self.operators()
        units = {k: min(self.units.get(k, 0), self.cap(k)) for k in ops}
        total = self.budget // self.unit
        while sum(units.values()) > total:  # over a reduced budget: take from where it hurts least
            units = max(self._takes(units, ops), key=self.objective)
        units = self._fill(units, ops, total)
        units = self._improve(units, ops, total)
        self.units = {k: v for k, v in units.items() if v}
        return self.bytes()

    def _takes(self, units: dict[str, int], ops: list[str]) -> Iterator[dict[str, int]]:
        for k in ops:
            if units[k]:
                yield {**units, k: units[k] - 1}

    def _fill(self, units: dict[str, int], ops: list[str], total: int) -> dict[str, int]:
        """Greedy: repeatedly give the batch of best gain per unit, while one gains anything. A
        batch goes to one operator or to two at once: operators in series (a join over a join)
        may gain only together."""
        base = self.objective(units)
        while True:
            free = total - sum(units.values())
            best, best_ratio = None, _EPS
            for cand, spent in self._grants(units, ops, free):
                ratio = (self.objective(cand) - base) / spent
                if ratio > best_ratio:
                    best, best_ratio = cand, ratio
            if best is None:
                return units
            units, base = best, self.objective(best)

    def _grants(self, units: dict[str, int], ops: list[str], free: int) -> Iterator[tuple[dict[str, int], int]]:
        """(allocation, units added): batches of `free` units to one operator or to a pair."""
        room = {k: min(free, self.cap(k) - units[k]) for k in ops}
        for i, k in enumerate(ops):
            for s in _steps(room[k]):
                yield {**units, k: units[k] + s}, s
                for j in ops[i + 1 :]:
                    for t in _steps(min(room[j], free - s)):
                        yield {**units, k: units[k] + s, j: units[j] + t}, s + t

    def _improve(self, units: dict[str, int], ops: list[str], total: int) -> dict[str, int]:
        """Local search: move a batch from one operator to another, or to two others, or hand
        free units out, while the objective grows; first improvement, in a fixed order, so runs
        are repeatable."""
        base = self.objective(units)
        while True:
            for cand in self._moves(units, ops, total):
                val = self.objective(cand)
                if val > base + _EPS:
                    units, base = cand, val
                    break
            else:
                return units

    def _moves(self, units: dict[str, int], ops: list[str], total: int) -> Iterator[dict[str, int]]:
        free = total - sum(units.values())
        for cand, _ in self._grants(units, ops, free):
            yield cand
        for src in ops:
            for s in _steps(units[src]):
                taken = {**units, src: units[src] - s}
                yield taken  # to the free pool (an operator that hurts)
                for cand, _ in self._grants(taken, [k for k in ops if k != src], free + s):
                    yield cand


def _steps(room: int) -> list[int]:
    """Batch sizes tried: powers of two up to `room`, and `room` itself."""
    out, s = [], 1
    while s <= room:
        out.append(s)
        s *= 2
    if room > 0 and (not out or out[-1] != room):
        out.append(room)
    return out


def uniform(alloc: Allocator) -> dict[str, int]:
    """The baseline: the budget split over the live operators in proportion to their need."""
    ops = alloc.operators()
    needs = {k: alloc.cap(k) for k in ops}
    total_need = sum(needs.values())
    units = alloc.budget // alloc.unit
    if total_need <= units:
        return {k: v * alloc.unit for k, v in needs.items()}
    return {k: (v * units // total_need) * alloc.unit for k, v in needs.items()}


def brute_force(alloc: Allocator) -> tuple[float, dict[str, int]]:
    """The best allocation by trying every one (small fixtures only): (objective, units)."""
    ops = alloc.operators()
    total = alloc.budget // alloc.unit
    best: tuple[float, dict[str, int]] = (-math.inf, {})
    for combo in product(*[range(alloc.cap(k) + 1) for k in ops]):
        if sum(combo) <= total:
            units = dict(zip(ops, combo))
            val = alloc.objective(units)
            if val > best[0] + 1e-12:
                best = (val, units)
    return best
