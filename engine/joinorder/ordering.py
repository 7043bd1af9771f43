"""Probe orders of an MJoin chosen by the cost model: at plan build from the plan's windows and
default rates (`initial_probe_orders`), and again at run time from the arrival rates the join
observes (`JoinOrdering.observe`) when its `join_order` knob asks for it.

The cost is additive over the join's inputs (each input's events probe in their own order), so
each input's order is chosen on its own: by exhaustive search over the (n−1)! orders for joins of
up to EXHAUSTIVE_INPUTS inputs, else among the paper's heuristic global order and the join's
default order. Ties keep the default order (linked inputs first, lowest index), so a join whose
inputs look alike runs as it did without the model. The order never changes a result.
"""

from __future__ import annotations

import itertools
from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field

from cqlstream.cql.logical import expr as X
from cqlstream.cql.logical import nodes as L
from cqlstream.engine.joinorder.cost import JoinShape, plan_cost
from cqlstream.engine.joinorder.estimates import engine_shape
from cqlstream.engine.joinorder.heuristic import best_origin_order, heuristic_order

EXHAUSTIVE_INPUTS = 6  # up to this many inputs: try every probe order ((n−1)! ≤ 120 per input)
LOOKUP = 1.0  # cost of one index lookup, in tuple visits (the engine's loops are index probes)
MARGIN = 0.2  # run time: switch only when another plan is this much cheaper (relative)
MIN_EVENTS = 1000  # run time: re-evaluate after at least this many input events
MODES = ("fixed", "cost", "rates")  # the join_order knob's values

Orders = list[list[int]]


def choose_orders(shape: JoinShape, default: Orders) -> tuple[Orders, float]:
    """The cheapest probe order per input (ties: `default`) and the plan's cost per time unit."""
    n = shape.n
    glob = heuristic_order(shape)[0] if n > EXHAUSTIVE_INPUTS else None
    out: Orders = []
    total = 0.0
    for i in range(n):
        others = [j for j in range(n) if j != i]
        if glob is None:
            cands: list[list[int]] = [list(p) for p in itertools.permutations(others)]
        else:
            cands = [[j for j in glob if j != i]]
        best, best_cost = best_origin_order(shape, i, [default[i], *cands], lookup=LOOKUP)
        out.append(best)
        total += shape.windows[i].rate * best_cost
    return out, total


def input_names(node: L.Join) -> list[str]:
    """A display name per join input: its qualifier (alias or source name) where it has one."""
    names = []
    for k, i in enumerate(node.inputs):
        q = next((a.qualifier for a in i.schema if a.qualifier), None)
        names.append(q or f"#{k}")
    return names


@dataclass
class JoinOrdering:
    """A join's cost-model ordering: the estimates it started from, the orders they give, and the
    run-time observation of arrival rates (per input events per time unit)."""

    shape: JoinShape
    names: list[str]
    default: Orders
    orders: Orders  # the cost model's current choice
    cost: float  # its estimated comparisons per time unit
    basis: str = "plan windows, default rates"
    margin: float = MARGIN
    counts: list[int] = field(default_factory=list)
    since: int | None = None  # first instant of the current observation period
    changes: int = 0

    def cost_of(self, orders: Orders) -> float:
        return plan_cost(self.shape, orders, lookup=LOOKUP)

    def observe(self, events: Sequence[int], bound: int, current: Orders) -> Orders | None:
        """Count one call's input events (through instant `bound`); once enough have been seen,
        re-estimate with the observed rates and return new orders when they beat `current` by
        the margin (None: keep the current ones)."""
        if not self.counts:
            self.counts = [0] * len(events)
        self.counts = [c + e for c, e in zip(self.counts, events)]
        if self.since is None:
            self.since = bound
            return None
        elapsed = bound - self.since
        if elapsed <= 0 or sum(self.counts) < MIN_EVENTS:
            return None
        # each tuple enters and later leaves its window: two events per arrival
        rates = [max(c / 2 / elapsed, 1e-9) for c in self.counts]
        self.counts, self.since = [0] * len(events), bound
        self.shape = self.shape.with_rates(rates)
        self.basis = "observed rates " + ", ".join(f"{n} {r:.3g}" for n, r in zip(self.names, rates))
        best, best_cost = choose_orders(self.shape, current)
        self.orders, self.cost = best, best_cost
        if best != current and best_cost * (1 + self.margin) < self.cost_of(current):
            self.changes += 1
            return best
        return None

    def explain(self, current: Orders, mode: str) -> str:
        """One EXPLAIN line: which orders the join probes in and what the model estimates for them."""
        orders = ", ".join("→".join(self.names[k] for k in [i, *o]) for i, o in enumerate(current))
        est = _short(self.cost_of(current))
        by = {"fixed": "fixed order", "cost": "cost model", "rates": "cost model, re-evaluated on observed rates"}
        more = f"; {self.changes} run-time change(s)" if self.changes else ""
        return f"probe orders by {by[mode]}: {orders} (est. {est} probes per time unit; {self.basis}{more})"


def _short(x: float) -> str:
    for div, unit in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if x >= div:
            return f"{x / div:.3g}{unit}"
    return f"{x:.3g}"


def initial_probe_orders(
    node: L.Join,
    links: Sequence[tuple[int, Hashable, int, Hashable]],
    default: Orders,
    theta: Sequence[tuple[X.Expr, frozenset[int]]] = (),
) -> JoinOrdering:
    """The cost model's probe orders for the join `node` before any statistics exist: window
    sizes from the plan, default rates and distinct counts (engine/joinorder/estimates.py).
    `links`: the join's equality conjuncts as (input a, a's side, input b, b's side);
    `default`: the join's own order per input (kept on ties); `theta`: its other conditions
    reading several inputs (conjunct, inputs), a band or an inequality."""
    shape = engine_shape(node.inputs, links, theta)
    orders, cost = choose_orders(shape, default)
    return JoinOrdering(shape, input_names(node), [list(o) for o in default], orders, cost)
