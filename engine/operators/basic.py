"""Stateless operators: select (filter), project, sample, and the output sink."""

from __future__ import annotations

import numpy as np
from cqlstream.cql.logical import expr as X
from cqlstream.engine.batch import splitmix64
from cqlstream.engine.exprs import Evaluator
from cqlstream.engine.operators.base import Operator


class FilterOp(Operator):
    """Selection. Conjuncts are kept as a list whose order is data (adaptive reordering)."""

    kind = "select"

    def __init__(self, inputs, output, ids, predicate: X.Expr, evaluator: Evaluator, options=None):
        super().__init__(inputs, output, ids, options)
        self.conjuncts = X.conjuncts(predicate)
        self.ev = evaluator

    def process(self, inputs, bound):
        b = inputs[0]
        for c in self.conjuncts:
            if not len(b):
                break
            b = b.take(self.ev.predicate(c, b))
        return b


class ProjectOp(Operator):
    kind = "project"

    def __init__(self, inputs, output, ids, exprs, evaluator: Evaluator, options=None):
        super().__init__(inputs, output, ids, options)
        self.exprs = exprs
        self.ev = evaluator

    def process(self, inputs, bound):
        b = inputs[0]
        cols, nulls = [], []
        for e in self.exprs:
            v, m = self.ev.eval(e, b)
            cols.append(v)
            nulls.append(None if m is None or not m.any() else m)
        return b.with_columns(cols, nulls)


class SampleOp(Operator):
    """Keeps element i (0-based in arrival order) iff splitmix64(i)/2^64 < p/100 (docs/semantics.md)."""

    kind = "sample"

    def __init__(self, inputs, output, ids, percent: float, options=None):
        super().__init__(inputs, output, ids, options)
        self.percent = percent
        self.seen = 0

    def process(self, inputs, bound):
        b = inputs[0]
        idx = np.arange(self.seen, self.seen + len(b), dtype=np.uint64)
        self.seen += len(b)
        u = (splitmix64(idx) >> np.uint64(11)).astype(np.float64) * 2.0**-53
        return b.take(u < self.percent / 100.0)


class PassOp(Operator):
    """Forwards its input unchanged (a query's output stage; its queue is what subscribers read)."""

    kind = "output"

    def process(self, inputs, bound):
        return inputs[0]
