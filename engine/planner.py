"""Physical planning: logical plan → operators and queues, one builder per logical node type.

Equal logical subplans hash equal, so the memo dict makes every query share the operators of
subplans it has in common with queries registered before it.
"""
from __future__ import annotations

from dataclasses import dataclass

from cql.logical import nodes as L
from engine.exprs import Evaluator
from engine.operators.base import IdSource, Operator
from engine.operators.basic import FilterOp, ProjectOp, SampleOp
from engine.operators.window import WindowOp
from engine.queues import Queue
from engine.synopses import RelationStore


@dataclass(frozen=True)
class EngineOptions:
    """`compat`: STREAM 0.6 behaviour (docs/semantics.md). `binary_joins`: run joins of 3+
    inputs as left-deep trees of binary joins (XJoin style, thesis Table 2.1) instead of one MJoin."""

    compat: bool = False
    binary_joins: bool = False


def _types(node: L.Plan):
    return [a.type for a in node.schema]


def _window(n, qs, out, ids, ev, opt):
    return WindowOp(qs, out, ids, n.spec, compat=opt.compat)


def _filter(n, qs, out, ids, ev, opt):
    return FilterOp(qs, out, ids, n.predicate, ev)


def _project(n, qs, out, ids, ev, opt):
    return ProjectOp(qs, out, ids, n.exprs, ev)


def _sample(n, qs, out, ids, ev, opt):
    return SampleOp(qs, out, ids, n.percent)


# Builders of stateful relational operators import their module when first used.
def _join(n, qs, out, ids, ev, opt, stores=None):
    from engine.operators.join import JoinOp

    return JoinOp(qs, out, ids, n.predicate, [_types(i) for i in n.inputs], ev, stores=stores)


def _aggregate(n, qs, out, ids, ev, opt):
    from engine.operators.aggregate import AggregateOp

    return AggregateOp(qs, out, ids, n.keys, n.aggs, ev, compat=opt.compat)


def _distinct(n, qs, out, ids, ev, opt):
    from engine.operators.relational import DistinctOp

    return DistinctOp(qs, out, ids)


def _setop(n, qs, out, ids, ev, opt):
    from engine.operators.relational import SetOpOp

    return SetOpOp(qs, out, ids, n.op, n.all)


def _semijoin(n, qs, out, ids, ev, opt):
    from engine.operators.semijoin import SemiJoinOp

    return SemiJoinOp(qs, out, ids, n.predicate, len(n.left.schema), n.anti, n.null_aware, ev)


def _r2s(n, qs, out, ids, ev, opt):
    from engine.operators.r2s import RelToStreamOp

    return RelToStreamOp(qs, out, ids, n.op, compat=opt.compat)


BUILDERS = {
    L.Window: _window, L.Filter: _filter, L.Project: _project, L.Sample: _sample, L.Join: _join,
    L.Aggregate: _aggregate, L.Distinct: _distinct, L.SetOp: _setop, L.SemiJoin: _semijoin,
    L.RelToStream: _r2s,
}


class PhysicalPlan:
    """The global plan: operators in producer-before-consumer order, queues memoized by subplan."""

    def __init__(self, ids: IdSource, evaluator: Evaluator, options: EngineOptions):
        self.ids = ids
        self.ev = evaluator
        self.options = options
        self.queues: dict[L.Plan, Queue] = {}  # source and operator output queues by subplan
        self.operators: list[Operator] = []
        self.producer: dict[int, Operator] = {}  # id(queue) → operator writing it
        self.stores: dict[int, RelationStore] = {}  # id(queue) → the synopsis of that relation

    def store(self, q: Queue) -> RelationStore:
        """The one shared store of a relation-valued queue (created on first use)."""
        st = self.stores.get(id(q))
        if st is None:
            st = self.stores[id(q)] = RelationStore(q)
        return st

    def source_queue(self, node: L.Plan) -> Queue:
        q = self.queues.get(node)
        if q is None:
            q = self.queues[node] = Queue(_types(node), name=getattr(node, "name", ""))
        return q

    def build(self, node: L.Plan) -> Queue:
        """The queue carrying `node`'s output, creating operators for subplans not yet present."""
        q = self.queues.get(node)
        if q is not None:
            return q
        if isinstance(node, (L.StreamSource, L.RelationSource)):
            return self.source_queue(node)
        inputs = [self.build(i) for i in node.inputs]
        if isinstance(node, L.Join) and self.options.binary_joins and len(inputs) > 2:
            q = self._binary_tree(node, inputs)
        else:
            q = self._add(node, BUILDERS[type(node)], inputs)
        self.queues[node] = q
        return q

    def _add(self, node: L.Plan, builder, inputs: list[Queue]) -> Queue:
        q = Queue(_types(node), name=type(node).__name__)
        if builder is _join:  # joins read their inputs' state from shared synopses
            op = _join(node, inputs, q, self.ids, self.ev, self.options, stores=[self.store(i) for i in inputs])
        else:
            op = builder(node, inputs, q, self.ids, self.ev, self.options)
        op.node = node
        self.operators.append(op)
        self.producer[id(q)] = op
        return q

    def _binary_tree(self, node: L.Join, inputs: list[Queue]) -> Queue:
        """((I0 ⋈ I1) ⋈ I2) ⋈ ...: each conjunct is applied at the first join that has its columns.
        The columns keep their positions (each step's output is a prefix of the full schema)."""
        from cql.logical import expr as X

        widths = [len(i.schema) for i in node.inputs_]
        pending = X.conjuncts(node.predicate)
        left, left_node = inputs[0], node.inputs_[0]
        for k in range(1, len(inputs)):
            width = sum(widths[:k + 1])
            here = [c for c in pending if max(X.columns(c), default=-1) < width]
            pending = [c for c in pending if c not in here]
            step = L.Join((left_node, node.inputs_[k]), X.conjoin(here))
            left = self._add(step, _join, [left, inputs[k]])
            left_node = step
        return left
