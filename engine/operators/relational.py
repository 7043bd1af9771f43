"""Distinct and the set operations: CQL's bag union / except / intersect and SQL's set versions (DISTINCT).

Both compare whole tuples, NULL equal to NULL (docs/semantics.md). The output multiplicity of a
value at an instant is a function f of its input multiplicities at the end of that instant, so
per (value, instant) touched by a batch we compute the input counts before and after
(`ValueTable.changes`, vectorized) and emit the change of f as that many `+`/`−`:

    distinct              f(m)      = 1 if m > 0
    union                 f(mL, mR) = mL + mR          (bag; forwarded: no state at all)
    union distinct        f(mL, mR) = 1 if mL + mR > 0
    except                f(mL, mR) = max(0, mL − mR)  (bag difference, "monus")
    except distinct       f(mL, mR) = 1 if mL > 0 and mR = 0
    intersect             f(mL, mR) = min(mL, mR)      (bag)
    intersect distinct    f(mL, mR) = 1 if mL > 0 and mR > 0

Output ids are derived, not stored: the k-th copy ever inserted of a value gets
combine_ids(vkey, k) (vkey: a fresh id owned by the value while it is live) and a delete retracts
the oldest live copy, so only two serial counters per value are carried.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Self, cast

import numpy as np

from cqlstream.cql.logical import nodes as L
from cqlstream.cql.logical.nodes import Plan
from cqlstream.engine.batch import Batch, combine_ids, concat
from cqlstream.engine.errors import EngineError
from cqlstream.engine.kernels import stable_order
from cqlstream.engine.operators.base import BuildContext, IdSource, Operator, held_state
from cqlstream.engine.operators.probe_intervals import interval_ends
from cqlstream.engine.operators.setop_summary import BloomSetOp, setop_summaries
from cqlstream.engine.operators.summary_mode import DEFAULT_BYTES, SUMMARIES, SUMMARY_KNOBS, BloomDistinct, summary_line
from cqlstream.engine.operators.valuecount import Changes, ValueTable
from cqlstream.engine.queues import Queue

if TYPE_CHECKING:
    from cqlstream.engine.planner import EngineOptions


def emit_changes(table: ValueTable, b: Batch, ch: Changes, delta: np.ndarray, indicator: bool = False) -> Batch:
    """`delta` (per group) copies of each group's value, `+` or `−` with derived ids, in ts order
    (`indicator`: see ValueTable.output_ids)."""
    gidx, sign, ids = table.output_ids(ch, delta, indicator)
    if not len(gidx):
        return b.take(np.zeros(0, np.int64))
    pos = ch.first[gidx]  # positions in the ts-sorted batch: sorting by them sorts by ts
    order = stable_order(pos, 0, max(len(b) - 1, 0))
    out = b.take(pos[order])
    out.sign = sign[order]
    out.id = ids[order]
    return out


class DistinctOp(Operator):
    kind = "distinct"
    KNOBS = Operator.KNOBS + SUMMARY_KNOBS  # summary: exact | bloom (engine/operators/summary_mode.py)

    def __init__(self, inputs: list[Queue], output: Queue, ids: IdSource, options: EngineOptions | None = None) -> None:
        super().__init__(inputs, output, ids, options)
        self.table = ValueTable(inputs[0].types, ids)
        self.summary = "exact"
        self.summary_bytes = DEFAULT_BYTES
        self.bloom: BloomDistinct | None = None
        self.probed = len(inputs) == 2  # input 1: the probe stream (`Distinct.probe`; `_net_per_interval`)
        if self.probed:  # the output is read at every instant of the probe: never shed it
            self.unshed = frozenset({1})

    @classmethod
    def from_node(cls, node: Plan, ctx: BuildContext) -> Self:
        """The operator for `node`: over a window's stream (`Distinct.window`) the last-seen
        instants' one (range_distinct.py), else this one."""
        if isinstance(node, L.Distinct) and node.window is not None:
            from cqlstream.engine.operators.range_distinct import RangeDistinctOp

            return cast(Self, RangeDistinctOp.from_node(node, ctx))
        return cls(ctx.inputs, ctx.output, ctx.ids)

    @classmethod
    def state_class(cls, node: Plan, kids: list[int]) -> tuple[int, list[tuple[int, str]]]:
        if isinstance(node, L.Distinct) and node.window is not None:
            from cqlstream.engine.operators.range_distinct import RangeDistinctOp

            return RangeDistinctOp.state_class(node, kids)
        return held_state(node, kids[:1])  # a probe (kids[1]) only gives instants: nothing is kept of it

    def state_bytes(self) -> int:
        return self.table.nbytes() if self.bloom is None else self.bloom.nbytes()

    def summaries(self) -> tuple[str, ...]:
        return SUMMARIES

    def summary_changed(self) -> None:
        self.bloom = BloomDistinct(self.summary_bytes) if self.summary == "bloom" else None

    def control_table(self) -> dict[str, Any]:
        out = super().control_table()
        if self.bloom is not None:
            out["counters"].update(self.bloom.counters())
        return out

    def summary_info(self) -> dict[str, Any] | None:
        """The summary in force, for the query reply and EXPLAIN (None: exact)."""
        return None if self.bloom is None else self.bloom.info()

    def explain_detail(self) -> list[str]:
        return [] if self.bloom is None else [summary_line(self.bloom.info())]

    def process(self, inputs: list[Batch], bound: int) -> Batch:
        b = inputs[0]
        if not len(b):
            return b
        if self.bloom is not None:
            return self.bloom.process(b, self.ids.take)
        t = self.table
        enc = t.encode(b)
        ch = t.changes(enc, b.ts, b.sign.astype(np.int64)[None, :])
        delta = (ch.after[0] > 0).astype(np.int64) - (ch.before[0] > 0)
        if self.probed:
            delta = _net_per_interval(ch, delta, inputs[1].ts)
        out = emit_changes(t, b, ch, delta, indicator=True)
        t.finish(enc)
        return out


def _net_per_interval(ch: Changes, delta: np.ndarray, probe_ts: np.ndarray) -> np.ndarray:
    """`delta` (the output's change per (value, instant) group, groups in (value, ts) order) with
    each value's changes within one probe interval summed into one net change at the last of them
    (engine/operators/probe_intervals.py); the other groups change nothing. The output is then
    exact at every probe instant and at the end of the call; a value inserted in the interval is
    inserted at its last real change, as without the probe, and one that leaves and returns keeps
    its earlier row (cql/logical/probe_aggregates.py: the order within an instant can differ)."""
    real = delta.nonzero()[0]
    if not len(real):
        return delta
    ends = interval_ends(ch.slot[real], ch.ts[real], probe_ts)
    if len(ends) == len(real):  # no value changes twice within a probe interval: nothing to net
        return delta
    starts = np.r_[0, ends[:-1] + 1]
    out = np.zeros_like(delta)
    out[real[ends]] = np.add.reduceat(delta[real], starts)
    return out


def _f_set(op: str, all_: bool) -> Callable[[np.ndarray, np.ndarray], np.ndarray]:
    """The output multiplicity as a function of the (left, right) multiplicity arrays."""
    if op == "union":
        return (lambda l, r: l + r) if all_ else (lambda l, r: ((l + r) > 0).astype(np.int64))
    if op == "except":
        return (lambda l, r: np.maximum(l - r, 0)) if all_ else (lambda l, r: ((l > 0) & (r <= 0)).astype(np.int64))
    if op == "intersect":
        return (
            (lambda l, r: np.maximum(np.minimum(l, r), 0))
            if all_
            else (lambda l, r: ((l > 0) & (r > 0)).astype(np.int64))
        )
    raise EngineError("internal", f"no set operation {op!r}")


_SIDE_L = np.uint64(0x5E7_0001)
_SIDE_R = np.uint64(0x5E7_0002)


class SetOpOp(Operator):
    KNOBS = Operator.KNOBS + SUMMARY_KNOBS  # summary: exact | bloom for except / intersect (setop_summary.py)

    def __init__(
        self,
        inputs: list[Queue],
        output: Queue,
        ids: IdSource,
        op: str,
        all: bool,
        options: EngineOptions | None = None,
    ) -> None:
        super().__init__(inputs, output, ids, options)
        self.op = op
        self.all = all
        self.kind = op + ("" if all else " distinct")  # `all`: the bag operator, CQL's default
        self.types = list(output.types)
        self.f = _f_set(op, all)
        self.forward = op == "union" and all
        self.table = None if self.forward else ValueTable(self.types, ids, sides=2)
        self.summary = "exact"
        self.summary_bytes = DEFAULT_BYTES
        self.bloom: BloomSetOp | None = None

    def summaries(self) -> tuple[str, ...]:
        return setop_summaries(self.op)

    def summary_changed(self) -> None:
        self.bloom = BloomSetOp(self.op, self.summary_bytes) if self.summary == "bloom" else None

    def summary_info(self) -> dict[str, Any] | None:
        """The summary in force, for the query reply and EXPLAIN (None: exact)."""
        return None if self.bloom is None or self.table is None else self.bloom.info(self.table)

    def control_table(self) -> dict[str, Any]:
        out = super().control_table()
        if self.bloom is not None and self.table is not None:
            out["counters"].update(self.bloom.counters(self.table))
        return out

    def explain_detail(self) -> list[str]:
        i = self.summary_info()
        return [] if i is None else [summary_line(i)]

    @classmethod
    def from_node(cls, node: Plan, ctx: BuildContext) -> Self:
        assert isinstance(node, L.SetOp)
        return cls(ctx.inputs, ctx.output, ctx.ids, node.op, node.all)

    @classmethod
    def state_class(cls, node: Plan, kids: list[int]) -> tuple[int, list[tuple[int, str]]]:
        return held_state(node, kids)

    def state_bytes(self) -> int:
        return (0 if self.table is None else self.table.nbytes()) + (0 if self.bloom is None else self.bloom.nbytes())

    def process(self, inputs: list[Batch], bound: int) -> Batch:
        left, right = inputs
        if self.forward:
            return self._union_all(left, right)
        nl, n = len(left), len(left) + len(right)
        if n == 0:
            return left
        b = concat([left, right], self.types)
        side = np.zeros(n, np.int64)
        side[nl:] = 1
        if nl and n > nl:
            order = b.ts.argsort(kind="stable")  # merge the two ts-sorted sides
            b, side = b.take(order), side[order]
        deltas = np.zeros((2, n), np.int64)
        deltas[side, np.arange(n)] = b.sign
        t = self.table
        assert t is not None  # only the forwarding bag union has no table
        enc = t.encode(b)
        if self.bloom is not None:  # the right side's counts are the filter's estimates
            ch = self.bloom.changes(t, b, side == 1, enc)
        else:
            ch = t.changes(enc, b.ts, deltas)
        delta = self.f(ch.after[0], ch.after[1]) - self.f(ch.before[0], ch.before[1])
        out = emit_changes(t, b, ch, delta)
        t.finish(enc)
        return out

    def _union_all(self, left: Batch, right: Batch) -> Batch:
        """Bag union: both inputs' deltas, ids made distinct per side (a delete still carries
        the id of its insert, since both are mapped alike)."""
        parts = []
        for b, salt in ((left, _SIDE_L), (right, _SIDE_R)):
            if len(b):
                parts.append(Batch(b.cols, b.nulls, b.ts, b.sign, combine_ids(b.id, np.full(len(b), salt))))
        out = concat(parts, self.types)
        if len(parts) == 2:
            out = out.take(out.ts.argsort(kind="stable"))
        return out
