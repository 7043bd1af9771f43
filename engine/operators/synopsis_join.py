"""The synopsis join: the physical operator of a query the bounded-memory characterization judges
bounded (engine/synopsis_plan.py), a select-project-join of several streams read whole. It reads
the streams directly and keeps, per stream occurrence, a constant-size synopsis
(engine/bounded_synopsis.py): a first tuple and a count per bucket for a duplicate-preserving
query, at most two representative tuples per bucket plus the results emitted so far for a
duplicate-eliminating one. Its memory stops growing however long the input, where windows and a
join would keep every tuple that passes the filters.

Instants are processed in order; within one instant each input's tuples join the others' synopses
before being added to their own, so every pair of tuples meets once and results do not depend on
how the input was batched. A tuple whose referenced column is NULL never satisfies a predicate and
is dropped (by each occurrence that reads the column). The engine option `synopsis_joins=False` falls back to the ordinary plan."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Self

import numpy as np

from cqlstream.cql.logical.nodes import Plan
from cqlstream.engine.batch import Batch, dtype_of
from cqlstream.engine.bounded_synopsis import SynopsisJoin
from cqlstream.engine.operators.base import BOUNDED, BuildContext, IdSource, Operator
from cqlstream.engine.operators.synopsis_inputs import columns_by_stream, int_matrix, per_stream
from cqlstream.engine.queues import Queue
from cqlstream.engine.synopsis_plan import SynopsisJoinPlan

if TYPE_CHECKING:
    from cqlstream.engine.planner import EngineOptions


class SynopsisJoinOp(Operator):
    """Evaluates a `SynopsisJoinPlan` with a `SynopsisJoin`; one input per distinct stream."""

    kind = "synopsis join"

    def __init__(
        self,
        inputs: list[Queue],
        output: Queue,
        ids: IdSource,
        node: SynopsisJoinPlan,
        options: EngineOptions | None = None,
    ) -> None:
        super().__init__(inputs, output, ids, options)
        self.plan = node
        self.join = SynopsisJoin(node.query)
        self.names = [s.name for s in node.sources]
        occ = self.join.q.occurrences
        self.read = columns_by_stream(self.names, (o.stream for o in occ), self.join.columns)  # per input
        self.out_types = [a.type for a in node.schema]
        self.dropped_null = 0

    @classmethod
    def from_node(cls, node: Plan, ctx: BuildContext) -> Self:
        assert isinstance(node, SynopsisJoinPlan)
        return cls(ctx.inputs, ctx.output, ctx.ids, node, ctx.options)

    def _rows(self, k: int, b: Batch) -> tuple[np.ndarray, np.ndarray]:
        """Input k's batch as an int64 matrix of the stream's width (unread columns zero) and its
        NULL marks on the read columns (each occurrence drops the rows with a NULL in a column it
        reads; in a self-join another occurrence may not read that column)."""
        m, keep = int_matrix(b, self.read[k])
        nulls = np.zeros((len(b), b.width), dtype=bool)
        for c in self.read[k]:
            if b.nulls[c] is not None:
                nulls[:, c] = b.nulls[c]
        self.dropped_null += int((~keep).sum())
        return m, nulls

    def process(self, inputs: list[Batch], bound: int) -> Batch | None:
        if not any(len(b) for b in inputs):
            return None
        instants = np.unique(np.concatenate([b.ts for b in inputs]))
        res, mult, ts = [], [], []
        for t in instants.tolist():
            for k, b in enumerate(inputs):
                lo, hi = np.searchsorted(b.ts, [t, t + 1])
                if hi > lo:
                    r, m = self.join.push(self.names[k], *self._rows(k, b.slice(int(lo), int(hi))))
                    if len(r):
                        res.append(r)
                        mult.append(m)
                        ts.append(np.full(len(r), t, dtype=np.int64))
        if not res:
            return None
        counts = np.concatenate(mult)
        rows = np.repeat(np.concatenate(res), counts, axis=0)
        return self._batch(rows, np.repeat(np.concatenate(ts), counts))

    def _batch(self, rows: np.ndarray, ts: np.ndarray) -> Batch:
        cols: list[np.ndarray] = [rows[:, i].astype(dtype_of(t)) for i, t in enumerate(self.out_types)]
        nulls: list[np.ndarray | None] = [None] * len(cols)
        n = len(ts)
        return Batch(cols, nulls, ts, np.ones(n, np.int8), self.ids.take(n))

    def snapshot(self, at: int, inputs: Callable[[], list[Batch] | None]) -> Batch | None:
        """A duplicate-eliminating relation result is the set of results emitted so far."""
        if self.plan.is_stream or not self.join.distinct:
            return None
        e = self.join.emitted
        return self._batch(e, np.full(len(e), at, np.int64))

    def snapshotable(self, inputs: Callable[[], bool]) -> bool:
        return not self.plan.is_stream and self.join.distinct

    def complete_from(self, cf: float) -> float:
        return math.inf  # started late it misses the history its synopses summarize

    @classmethod
    def state_class(cls, node: Plan, kids: list[int]) -> tuple[int, list[tuple[int, str]]]:
        return BOUNDED, [(BOUNDED, "synopsis join (constant-size synopses)")]

    def state_bytes(self) -> int:
        return self.join.nbytes()

    def control_table(self) -> dict[str, Any]:
        t = super().control_table()
        j = self.join
        t["counters"].update(units=j.units(), entries=j.entries(), dropped_null=self.dropped_null)
        t["synopsis"] = {
            "mode": "distinct (representatives)" if j.distinct else "counts",
            "units": j.units(),
            "bound_units": j.verdict.memory_units,
            "per_stream": per_stream(j),
            "emitted": len(j.emitted) if j.distinct else None,
        }
        return t

    def explain_detail(self) -> list[str]:
        j = self.join
        parts = ", ".join(f"{tb.occ.label} {len(tb.keys)} entries" for tb in j.tables)
        return [f"synopsis: {j.units()} of ≤ {j.verdict.memory_units} units ({parts})"]
