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


@dataclass(frozen=True)
class EngineOptions:
    """`compat`: STREAM 0.6 behaviour (docs/semantics.md)."""

    compat: bool = False


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
def _join(n, qs, out, ids, ev, opt):
    from engine.operators.join import JoinOp

    return JoinOp(qs, out, ids, n.predicate, [_types(i) for i in n.inputs], ev)


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
        q = Queue(_types(node), name=type(node).__name__)
        op = BUILDERS[type(node)](node, inputs, q, self.ids, self.ev, self.options)
        op.node = node
        self.operators.append(op)
        self.producer[id(q)] = op
        self.queues[node] = q
        return q
