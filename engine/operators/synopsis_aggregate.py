"""The synopsis aggregate: the physical operator of a bounded aggregate over a join of several
streams read whole (engine/synopsis_plan.py, engine/bounded_aggregate.py). It reads the streams
directly, keeps bucket synopses with partial aggregates and the answer (a bounded number of
groups), and emits the aggregate's relation as the ordinary aggregate does: at each instant a
group's row changed, `−` of its old row (with the id it was inserted with) and `+` of the new one
(a fresh id); a scalar aggregate has its one row from the first instant (count 0, the others
NULL), except in compat mode. Instants are processed in order and each input's tuples meet the
others' synopses before joining their own, so the result does not depend on batching. A tuple with
a NULL in a column a predicate or the grouping reads never joins and is dropped (by each occurrence
that reads the column); a NULL argument is not aggregated."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Self

import numpy as np

from cqlstream.cql.logical.nodes import Plan
from cqlstream.engine.batch import Batch, from_rows
from cqlstream.engine.bounded_aggregate import SynopsisAggregate
from cqlstream.engine.operators.base import BOUNDED, BuildContext, IdSource, Operator
from cqlstream.engine.operators.synopsis_inputs import columns_by_stream, int_matrix, per_stream
from cqlstream.engine.queues import Queue
from cqlstream.engine.synopsis_plan import SynopsisAggregatePlan

if TYPE_CHECKING:
    from cqlstream.engine.planner import EngineOptions


class SynopsisAggregateOp(Operator):
    """Evaluates a `SynopsisAggregatePlan` with a `SynopsisAggregate`; one input per distinct stream."""

    kind = "synopsis aggregate"

    def __init__(
        self,
        inputs: list[Queue],
        output: Queue,
        ids: IdSource,
        node: SynopsisAggregatePlan,
        options: EngineOptions | None = None,
    ) -> None:
        super().__init__(inputs, output, ids, options)
        self.plan = node
        self.agg = SynopsisAggregate(node.query)
        self.names = [s.name for s in node.sources]
        streams = [o.stream for o in self.agg.join.q.occurrences]
        self.read = columns_by_stream(self.names, streams, self.agg.columns)
        self.args = columns_by_stream(self.names, streams, self.agg.arguments)
        self.out_types = [a.type for a in node.schema]
        self.current: dict[int, tuple[tuple[object, ...], int]] = {}  # group → (row emitted, its id)
        self.scalar_pending = not node.query.keys and not (options is not None and options.compat)
        self.dropped_null = 0

    @classmethod
    def from_node(cls, node: Plan, ctx: BuildContext) -> Self:
        assert isinstance(node, SynopsisAggregatePlan)
        return cls(ctx.inputs, ctx.output, ctx.ids, node, ctx.options)

    def _rows(self, k: int, b: Batch) -> tuple[np.ndarray, np.ndarray]:
        """Input k's batch as an int64 matrix of the stream's width and its NULL marks on the
        columns read or aggregated. Each occurrence of the stream drops the rows with a NULL in a
        column it reads (in a self-join another occurrence may not read that column)."""
        m, keep = int_matrix(b, self.read[k])
        nulls = np.zeros((len(b), b.width), dtype=bool)
        for c in self.args[k]:
            if np.issubdtype(b.cols[c].dtype, np.integer):
                m[:, c] = b.cols[c]
        for c in set(self.args[k]) | set(self.read[k]):
            if b.nulls[c] is not None:
                nulls[:, c] = b.nulls[c]
        self.dropped_null += int((~keep).sum())
        return m, nulls

    def process(self, inputs: list[Batch], bound: int) -> Batch | None:
        instants = set(np.concatenate([b.ts for b in inputs]).tolist()) if any(len(b) for b in inputs) else set()
        start = self.scalar_pending and self.t0 is not None and bound >= self.t0
        start = start and any(q.start is not None for q in self.inputs)
        if start:
            instants.add(self.t0)
        rows: list[tuple[object, ...]] = []
        ts: list[int] = []
        sign: list[int] = []
        ids: list[int] = []
        for t in sorted(instants):
            touched: set[int] = set()
            for k, b in enumerate(inputs):
                lo, hi = np.searchsorted(b.ts, [t, t + 1])
                if hi > lo:
                    m, nulls = self._rows(k, b.slice(int(lo), int(hi)))
                    touched |= self.agg.push(self.names[k], m, nulls)
            if start and t == self.t0:
                touched.add(0)
                self.scalar_pending = False
            for g in sorted(touched):
                new = self.agg.row(g)
                old = self.current.get(g)
                if new is None or (old is not None and old[0] == new):
                    continue
                if g == 0 and self.scalar_pending:  # the scalar row starts at t0, not before
                    continue
                if old is not None:
                    rows.append(old[0])
                    ts.append(t)
                    sign.append(-1)
                    ids.append(old[1])
                rid = int(self.ids.take(1)[0])
                self.current[g] = (new, rid)
                rows.append(new)
                ts.append(t)
                sign.append(1)
                ids.append(rid)
        if not rows:
            return None
        return from_rows(rows, self.out_types, ts, np.array(sign, np.int8), np.array(ids, np.uint64))

    def snapshot(self, at: int, inputs: Callable[[], list[Batch] | None]) -> Batch | None:
        """The current groups' rows as `+` elements at `at`, with the ids they were inserted with."""
        rows = [r for r, _ in self.current.values()]
        ids = np.array([i for _, i in self.current.values()], np.uint64)
        return from_rows(rows, self.out_types, [at] * len(rows), np.ones(len(rows), np.int8), ids)

    def snapshotable(self, inputs: Callable[[], bool]) -> bool:
        return True

    def complete_from(self, cf: float) -> float:
        return math.inf  # started late it misses the history its synopses summarize

    @classmethod
    def state_class(cls, node: Plan, kids: list[int]) -> tuple[int, list[tuple[int, str]]]:
        return BOUNDED, [(BOUNDED, "synopsis aggregate (constant-size synopses and groups)")]

    def state_bytes(self) -> int:
        return self.agg.nbytes()

    def control_table(self) -> dict[str, Any]:
        t = super().control_table()
        a = self.agg
        t["counters"].update(
            units=a.units(), entries=a.join.entries(), groups=len(a.groups), dropped_null=self.dropped_null
        )
        t["synopsis"] = {
            "mode": (
                "representatives (≤ 2 per bucket) and partial extremes per bucket"
                if a.representatives
                else "partial aggregates per bucket"
            ),
            "units": a.units(),
            "bound_units": a.join.verdict.memory_units,
            "per_stream": per_stream(a.join),
            "groups": len(a.groups),
        }
        return t

    def explain_detail(self) -> list[str]:
        a = self.agg
        parts = ", ".join(f"{tb.occ.label} {len(tb.keys)} entries" for tb in a.join.tables)
        return [f"synopsis: {a.units()} units ({parts}), {len(a.groups)} groups"]
