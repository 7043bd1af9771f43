"""Relation → stream: Istream, Dstream, Rstream (docs/semantics.md).

With m_v(t) the multiplicity of value v at the end of instant t (net over the instant, by
whole-tuple value, NULL equal to NULL; m_v(t0 − 1) = 0):

    Istream at t: max(0, m_v(t) − m_v(t−1)) copies of v
    Dstream at t: max(0, m_v(t−1) − m_v(t)) copies of v
    Rstream at t: m_v(t) copies of every v, at every integer instant t0..L

Istream/Dstream only look at the (value, instant) pairs a batch touches: m_v(t) − m_v(t−1) is the
net sign of v's elements at t and a batch holds whole instants, so no counts are carried between
calls (one sort of the batch by (instant, value, wanted sign), `instant_value_order`); the copies
emitted are the value's newest inserts (Istream) / oldest deletes (Dstream) at that instant, in
arrival order, which is the reference's tie order over windows. When no (instant, value) holds two
rows of one sign, a wanted row is emitted iff it is alone in its group (`_singles`).

Order within an instant (cql/logical/instant_order.py): arrival (batch) order over windows and
stored relations; `by_value` for every other input, whose own order within an instant follows the
rounds: the chosen rows are taken in the sort's (instant, value) order, and Rstream sorts each
instant by value, so the bytes never depend on how the input was cut.

Rstream keeps the live elements in insertion order (the reference lists R(t) in that order, which
matters to a Rows window over the Rstream). A call covering the instants (last_done, bound] gives
every element a lifetime [max(insert, lo), delete) and expands lifetimes × instants with
np.repeat, so long runs of unchanged instants cost output size, never Python loops.

Compat (STREAM 0.6): nothing at the last input instant L, i.e. in the call that processes the
final bound of ended inputs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Self

import numpy as np

from cqlstream.cql.logical import instant_order
from cqlstream.cql.logical import nodes as L
from cqlstream.cql.logical.nodes import Plan
from cqlstream.engine.batch import Batch, concat, match_deletes
from cqlstream.engine.errors import EngineError
from cqlstream.engine.kernels import expand, filled, row_codes
from cqlstream.engine.operators.base import BuildContext, IdSource, Operator
from cqlstream.engine.operators.valuecount import instant_value_order
from cqlstream.engine.queues import Queue

if TYPE_CHECKING:
    from cqlstream.engine.planner import EngineOptions

INF = np.iinfo(np.int64).max


class RelToStreamOp(Operator):
    ONE_SIDED = True  # the fast path for batches of inserts (Istream) or deletes (Dstream) only
    by_value = False  # (set per operator; a checkpoint pickled before it existed keeps arrival order)

    def __init__(
        self,
        inputs: list[Queue],
        output: Queue,
        ids: IdSource,
        op: str,
        compat: bool = False,
        options: EngineOptions | None = None,
        by_value: bool = False,
    ) -> None:
        super().__init__(inputs, output, ids, options)
        if op not in ("istream", "dstream", "rstream"):
            raise EngineError("internal", f"no relation-to-stream operator {op!r}")
        self.op = op
        self.kind = op
        self.quiet_on_empty = op != "rstream"  # Istream/Dstream of no elements: none, and no state
        self.compat = compat
        # an instant's rows by value, not in arrival order (cql/logical/instant_order.py): the
        # input relation's own order within an instant depends on where rounds were cut
        self.by_value = by_value
        self.types = list(output.types)
        # Istream/Dstream carry no state between calls (see process)
        # Rstream: the live elements of the relation, in insertion order (seq)
        self.live: Batch = Batch.empty(inputs[0].types)
        self.live_seq = np.zeros(0, np.int64)
        self.seq = 0
        self.last_done: int | None = None  # Rstream: output covers instants through this

    def state_bytes(self) -> int:
        return self.live.nbytes() + self.live_seq.nbytes  # Rstream only; Istream/Dstream keep nothing

    @classmethod
    def from_node(cls, node: Plan, ctx: BuildContext) -> Self:
        assert isinstance(node, L.RelToStream)
        return cls(
            ctx.inputs, ctx.output, ctx.ids, node.op, compat=ctx.options.compat, by_value=instant_order.by_value(node)
        )

    def complete_from(self, cf: float) -> float:
        return cf if self.op == "rstream" else cf + 1  # Istream/Dstream at t compare R(t) with R(t-1)

    def _final(self, bound: int) -> bool:
        """This call processes the last instant L of the input (ended inputs, full bound)."""
        top = self.bound()  # the smallest input watermark
        return self.ending and top is not None and bound >= top

    def process(self, inputs: list[Batch], bound: int) -> Batch:
        b = inputs[0]
        final = self.compat and self._final(bound)
        if self.op == "rstream":
            return self._rstream(b, bound, final)
        if not len(b):
            return b
        one_sided = self.ONE_SIDED and bool((b.sign > 0).all() if self.op == "istream" else (b.sign < 0).all())
        if one_sided and not self.by_value:
            return self._all_of(b, bound, final)
        # m_v(t) − m_v(t−1) is the net sign of v's elements at t (a batch holds whole instants),
        # so Istream/Dstream need no carried counts: group by (instant, value) within the batch,
        # the wanted rows (Istream's inserts, Dstream's deletes) last in each group.
        n = len(b)
        wanted = b.sign > 0 if self.op == "istream" else b.sign < 0
        order, skey = instant_value_order(b.ts, b.cols, b.nulls, wanted)
        if one_sided:  # (by value) every row is emitted, in the sort's order
            idx = order
        else:
            if self.SINGLES and not (skey[1:] == skey[:-1]).any():
                chosen = self._singles(skey)
            else:
                chosen = self._copies(skey)
            if self.by_value:  # the chosen rows in the sort's (instant, value) order
                idx = order.take(np.flatnonzero(chosen))
            else:  # chosen rows back in batch (ts, arrival) order
                keep = np.empty(n, bool)
                keep[order] = chosen
                idx = keep.nonzero()[0]
        if final:  # STREAM 0.6: no output at the last instant (whole groups go)
            # rows of instants before the bound are the positions below `last`; in either order
            # they are a prefix of idx (ts sorted, and the sort's major key is the instant), so
            # `idx < last` is monotone along idx and a binary search finds the cut
            last = int(b.ts.searchsorted(bound, side="left"))
            idx = idx[: int(idx.searchsorted(last, side="left"))]
        k = len(idx)
        if type(b) is not Batch:  # (a BlankedBatch's take keeps its placeholders)
            out = b.take(idx)
            out.sign, out.id = filled(k, 1, np.int8), self.ids.take(k)
            return out
        # sign and id are new: gather the columns and ts only
        return Batch(
            [c.take(idx) for c in b.cols],
            [None if m is None else m.take(idx) for m in b.nulls],
            b.ts.take(idx),
            filled(k, 1, np.int8),
            self.ids.take(k),
        )

    SINGLES = True  # the shortcut for batches whose (instant, value) groups hold one row of each sign at most

    @staticmethod
    def _groups(skey: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(wanted, starts) of the sorted keys: each row's wanted bit (the key's lowest) and True
        where a row starts its (instant, value) group. Shifts `skey` (the caller's, not read
        after) to the groups in place: no fresh 8-byte-per-row arrays."""
        n = len(skey)
        wanted = np.empty(n, bool)
        np.bitwise_and(skey, 1, out=wanted, casting="unsafe")
        skey >>= 1  # the (instant, value) group
        starts = np.empty(n, bool)
        starts[0] = True
        np.not_equal(skey[1:], skey[:-1], out=starts[1:])
        return wanted, starts

    @staticmethod
    def _singles(skey: np.ndarray) -> np.ndarray:
        """Every (instant, value) group holds at most one wanted and one unwanted row (no two
        sorted keys equal), so copies = 1 exactly for a wanted row alone in its group, which is
        then its first row (the unwanted row sorts first): wanted and starting its group."""
        wanted, chosen = RelToStreamOp._groups(skey)
        chosen &= wanted
        return chosen

    def _copies(self, skey: np.ndarray) -> np.ndarray:
        """The general case: per (instant, value) group, copies = max(0, #wanted − #unwanted) of
        its wanted rows — Istream the newest, Dstream the oldest (wanted rows are the group's tail,
        positions ascending)."""
        n = len(skey)
        wanted, brk = self._groups(skey)
        starts = brk.nonzero()[0]
        sizes = np.empty_like(starts)
        sizes[:-1] = starts[1:] - starts[:-1]
        sizes[-1] = n - starts[-1]
        c = np.empty(n + 1, np.int64)  # c[i]: wanted rows before offset i
        c[0] = 0
        wanted.cumsum(out=c[1:])
        c_start = c[starts]
        c_end = np.empty_like(c_start)
        c_end[:-1] = c_start[1:]
        c_end[-1] = c[n]
        copies = (c_end - c_start) * 2 - sizes  # #wanted − #unwanted
        np.maximum(copies, 0, out=copies)
        if self.op == "istream":  # the wanted row at offset i is among the newest `copies`
            thr = (c_end - copies).repeat(sizes)
            chosen = c[1:] > thr
        else:  # among the oldest `copies`
            thr = (c_start + copies).repeat(sizes)
            chosen = c[1:] <= thr
        chosen &= wanted
        return chosen

    def _all_of(self, b: Batch, bound: int, final: bool) -> Batch:
        """A batch of inserts only (Istream) or deletes only (Dstream): every (instant, value)
        has copies = its number of elements, so every element is emitted, in batch order — the
        general path's result without its sort or copies (the column arrays are shared, as
        readers of one queue share them). Istream over a stream's Unbounded window (a STREAM
        script's stream views in compat mode, where the rewrite removing it does not apply)
        always takes this path."""
        n = int(b.ts.searchsorted(bound, side="left")) if final else len(b)
        if n < len(b):  # STREAM 0.6: no output at the last instant
            b = b.slice(0, n)
        return Batch(list(b.cols), list(b.nulls), b.ts, filled(n, 1, np.int8), self.ids.take(n))

    def _rstream(self, b: Batch, bound: int, final: bool) -> Batch:
        """Every live element, at every instant of its lifetime within [lo, hi], instants in
        order and, within one, elements in insertion order. Deletes end the lifetime of the
        insert with their id (ids of live elements are distinct)."""
        assert self.t0 is not None  # step() sets it before the first call
        lo = self.t0 if self.last_done is None else max(self.last_done + 1, self.t0)
        hi = bound - 1 if final else bound
        self.last_done = bound
        ins = b.sign > 0
        nin = int(ins.sum())
        cand = concat([self.live, b.take(ins)], self.types) if nin else self.live
        seq = np.concatenate([self.live_seq, np.arange(self.seq, self.seq + nin, dtype=np.int64)])
        self.seq += nin
        start = np.concatenate([np.full(len(self.live), lo, np.int64), b.ts[ins]])
        end = np.full(len(cand), INF, np.int64)  # exclusive
        dele = ~ins
        if dele.any():
            # an id may be deleted and re-inserted within one call: pair the k-th delete of an id
            # with its k-th instance
            at, dpos = match_deletes(cand.id, b.id[dele])
            end[at] = b.ts[dele][dpos]
        keep = end == INF
        self.live, self.live_seq = cand.take(keep), seq[keep]
        s = np.maximum(start, lo)
        e = np.minimum(end - 1, hi)
        n_inst = np.maximum(e - s + 1, 0)
        total = int(n_inst.sum())
        if total == 0:
            return Batch.empty(self.types)
        el, inst = expand(s, n_inst)  # every candidate's instants s..e
        if self.by_value:  # within an instant by value (equal values in insertion order)
            code = row_codes(cand.cols, cand.nulls, len(cand))[0]
            order = np.lexsort((seq[el], code[el], inst))
        else:
            order = np.lexsort((seq[el], inst))
        out = cand.take(el[order])
        out.ts = inst[order]
        out.sign = np.ones(total, np.int8)
        out.id = self.ids.take(total)
        return out
