"""Stateless operators: select (filter), project, sample, and the output sink."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Self

import numpy as np

from cqlstream.cql.logical import expr as X
from cqlstream.cql.logical import nodes as L
from cqlstream.cql.logical.nodes import Plan
from cqlstream.engine import knobs as K
from cqlstream.engine.adaptive import config as AC
from cqlstream.engine.adaptive.backoff import cap as backoff_cap
from cqlstream.engine.adaptive.config import AdaptiveConfig
from cqlstream.engine.adaptive.conjuncts import AdaptiveOrder
from cqlstream.engine.batch import Batch, BlankedBatch, blanked, placeholder, splitmix64
from cqlstream.engine.deferred_batch import DeferredBatch
from cqlstream.engine.errors import KnobError
from cqlstream.engine.exprs import Evaluator
from cqlstream.engine.operators.base import BuildContext, IdSource, Operator, Stateless
from cqlstream.engine.queues import Queue

if TYPE_CHECKING:
    from cqlstream.engine.planner import EngineOptions


def _set_conjunct_order(op: FilterOp, value: object) -> None:
    n = op.adaptive.n
    if not (isinstance(value, list) and sorted(value) == list(range(n))):
        raise KnobError(f"conjunct_order must be a permutation of 0..{n - 1}")
    op.adaptive.set_order(value, "set by hand (conjunct_order knob)")


# The order as indexes into the predicate's conjuncts as written (first evaluated first).
CONJUNCT_ORDER = K.Knob("conjunct_order", lambda op: list(op.adaptive.order), _set_conjunct_order)


ADAPTIVE_KNOBS = (
    K.config_field("adaptive", "adaptive", "policy", AC.policy_name),
    K.config_field("profile_probability", "adaptive", "probability", AC.probability),
    K.config_field("profile_window", "adaptive", "window", AC.window),
    K.config_field("alpha", "adaptive", "alpha", AC.alpha),
    K.config_field("cost_model", "adaptive", "cost_model", AC.cost_model),
    K.config_field("profile_backoff", "adaptive", "backoff", backoff_cap),
)


class FilterOp(Stateless):
    """Selection. Conjuncts are kept as a list whose order is data (adaptive reordering)."""

    kind = "select"
    KNOBS = (*Stateless.KNOBS, CONJUNCT_ORDER, *ADAPTIVE_KNOBS)
    _blank_keep: frozenset[int] | None = None  # columns kept before selecting (None: all)

    def __init__(
        self,
        inputs: list[Queue],
        output: Queue,
        ids: IdSource,
        predicate: X.Expr,
        evaluator: Evaluator,
        options: EngineOptions | None = None,
    ) -> None:
        super().__init__(inputs, output, ids, options)
        # the conjuncts, their current order and its adaptation (engine/adaptive/conjuncts.py)
        self.adaptive = AdaptiveOrder(X.conjuncts(predicate), options.adaptive if options else AdaptiveConfig())
        self.ev = evaluator

    @classmethod
    def from_node(cls, node: Plan, ctx: BuildContext) -> Self:
        assert isinstance(node, L.Filter)
        return cls(ctx.inputs, ctx.output, ctx.ids, node.predicate, ctx.ev, ctx.options)

    def groupable(self) -> bool:
        """A plain running selection that started from no snapshot can become a hub member."""
        return self.readers[0].prefix is None and self.hold_until is None

    @property
    def conjuncts(self) -> list[X.Expr]:
        """The conjuncts in their current order."""
        return self.adaptive.ordered

    def produce_only(self, cols: frozenset[int] | None) -> None:
        """The columns not produced are blanked before the selection (its predicate's columns
        stay), so its gather of the surviving rows skips them."""
        self.produced = cols
        reads = frozenset().union(*(X.columns(c) for c in self.adaptive.conjuncts))
        self._blank_keep = None if cols is None else cols | reads

    def process(self, inputs: list[Batch], bound: int) -> Batch:
        keep = self._blank_keep
        b = inputs[0] if keep is None else blanked(inputs[0], self.output.types, keep)
        return self.adaptive.run(b, self.ev)

    def control_table(self) -> dict[str, Any]:
        t = super().control_table()
        t["counters"].update(reorders=self.adaptive.reorders, profiled=self.adaptive.profiled)
        t["adaptive"] = self.adaptive.statistics()
        return t

    def explain_detail(self) -> list[str]:
        return [self.adaptive.explain()] if self.adaptive.n > 1 else []

    def events(self) -> list[tuple[str, float]]:
        return self.adaptive.drain_events()


class ProjectOp(Stateless):
    kind = "project"
    quiet_on_empty = True

    def __init__(
        self,
        inputs: list[Queue],
        output: Queue,
        ids: IdSource,
        exprs: Sequence[X.Expr],
        evaluator: Evaluator,
        options: EngineOptions | None = None,
    ) -> None:
        super().__init__(inputs, output, ids, options)
        self.exprs = exprs
        self.ev = evaluator
        # plain column references: a deferred input (engine/deferred_batch.py) stays deferred
        refs = [e for e in exprs if isinstance(e, X.ColRef)]
        self.picks = [e.index for e in refs] if len(refs) == len(exprs) else None

    @classmethod
    def from_node(cls, node: Plan, ctx: BuildContext) -> Self:
        assert isinstance(node, L.Project)
        return cls(ctx.inputs, ctx.output, ctx.ids, node.exprs, ctx.ev)

    def produce_only(self, cols: frozenset[int] | None) -> None:
        """Expressions of columns not produced are not evaluated (their inputs may be blank)."""
        self.produced = cols

    def process(self, inputs: list[Batch], bound: int) -> Batch:
        b = inputs[0]
        if self.picks is not None and isinstance(b, DeferredBatch) and not b.built:
            return b.project(self.picks)
        keep = self.produced
        cols: list[np.ndarray] = []
        nulls: list[np.ndarray | None] = []
        for i, e in enumerate(self.exprs):
            if keep is not None and i not in keep:
                v, blank = placeholder(self.output.types[i], len(b))
                cols.append(v)
                nulls.append(blank)
                continue
            v, m = self.ev.eval(e, b)
            cols.append(v)
            nulls.append(None if m is None or not m.any() else m)
        if keep is not None and len(keep) < len(cols):
            return BlankedBatch(cols, nulls, b.ts, b.sign, b.id, frozenset(range(len(cols))) - keep)
        return b.with_columns(cols, nulls)


class SampleOp(Operator):
    """Keeps element i (0-based in arrival order) iff splitmix64(i)/2^64 < p/100 (docs/semantics.md)."""

    kind = "sample"

    def __init__(
        self, inputs: list[Queue], output: Queue, ids: IdSource, percent: float, options: EngineOptions | None = None
    ) -> None:
        super().__init__(inputs, output, ids, options)
        self.percent = percent
        self.seen = 0

    @classmethod
    def from_node(cls, node: Plan, ctx: BuildContext) -> Self:
        assert isinstance(node, L.Sample)
        return cls(ctx.inputs, ctx.output, ctx.ids, node.percent)

    def process(self, inputs: list[Batch], bound: int) -> Batch:
        b = inputs[0]
        idx = np.arange(self.seen, self.seen + len(b), dtype=np.uint64)
        self.seen += len(b)
        u = (splitmix64(idx) >> np.uint64(11)).astype(np.float64) * 2.0**-53
        return b.take(u < self.percent / 100.0)


class PassOp(Stateless):
    """Forwards its input unchanged (a query's output stage; its queue is what subscribers read)."""

    kind = "output"
    quiet_on_empty = True

    def process(self, inputs: list[Batch], bound: int) -> Batch:
        return inputs[0]
