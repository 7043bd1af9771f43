"""The stream–relation join: `Rstream(S [Now] ⋈ X)` in one operator (logical node `StreamJoin`,
chosen by cql/logical/rewrites/stream_join.py), as STREAM's own engine runs it.

Under Rstream a `[Now]` side makes only the instants where S has tuples produce anything: at t
the result is S(t) ⋈ X(t), X(t) being the relation as of the end of t (every X event with
timestamp ≤ t). The general join (join.py) would process every insert and expiry of the `[Now]`
window and every change of X as delta events and the Rstream would then re-expand the result; here
X's changes only maintain X's state, and each S tuple probes that state as of its instant and is
emitted at once as stream tuples (the Rstream folded in). No window over S is kept at all.

One call. X's carried rows (alive at the start of the call, in insertion order) and the call's X
events form a `Table` (join.py) on a per-call instant scale: with r the dense rank of an instant
among the call's S and X timestamps, X's events at r get seq 2r + 1 and an S tuple at r probes at
2r + 2, so an X instance (lo, hi) is alive for it iff inserted at or before its instant and not
deleted by its end — X(t) exactly (an insert and its delete within one instant make an empty
instance). Pairs are found by `scan_pairs` when the S tuples are few against the instances, else by
a `StabIndex`, both exact; conjuncts reading one side filter that side's tuples first (X's before
they enter the state), others are evaluated on the pairs.

Output order within an instant is the one `Rstream(join)` gives (its elements in insertion order,
which the join's event order decides): with S the join's first input, S's tuples of t come before
X's events of t, so first every S tuple (arrival order) with its partners inserted before t
(insertion order), then every X row inserted at t (insertion order) with its S partners (arrival
order); with S second, X's events of t come first and all pairs are in (S tuple, partner) order.
When X is not arrival-ordered (`StreamJoin.order`, cql/logical/instant_order.py), X's insertion
order follows the rounds, so each instant's pairs are then sorted by the value of the plan's output
columns instead, as Rstream sorts the unfused plan's rows.
Compat (STREAM 0.6): like Rstream, nothing at the last input instant.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Self, cast

import numpy as np

from cqlstream.cql.logical import expr as X
from cqlstream.cql.logical import nodes as L
from cqlstream.cql.logical.nodes import Plan
from cqlstream.cql.types import DataType
from cqlstream.engine.batch import Batch, BlankedBatch, placeholder
from cqlstream.engine.kernels import combine_codes, filled, run_lengths, run_starts, stable_order
from cqlstream.engine.limits import reserve
from cqlstream.engine.operators import tiny_pairs as TP
from cqlstream.engine.operators.base import RATE, BuildContext, IdSource, Operator
from cqlstream.engine.operators.join import (
    SCAN_RATIO,
    Keyed,
    StabIndex,
    Table,
    classify,
    combine_keys,
    input_layout,
    key_codes,
    scan_pairs,
)
from cqlstream.engine.operators.live_rows import LiveRows
from cqlstream.engine.operators.state_prefilter import reachable_rows
from cqlstream.engine.operators.tiny_pairs import Pairing, tiny_pairs
from cqlstream.engine.queues import Queue

if TYPE_CHECKING:
    from cqlstream.engine.exprs import Evaluator
    from cqlstream.engine.planner import EngineOptions

# carried X rows from which a call narrows them to those its S tuples can meet, and the least
# ratio of carried rows to S tuples, and to X's deletes, for it (below, narrowing costs about
# what it saves)
NARROW_MIN = 256
NARROW_RATIO = 2


class StreamJoinOp(Operator):
    """Evaluates a `StreamJoin` node: input `now` is the stream S, the other input the relation X
    whose live rows (`state`, insertion order) the operator keeps."""

    kind = "stream join"
    # the plan's output columns over the joined rows, each instant's output sorted by their value
    # (None: the join's order; set per operator, a checkpoint pickled before it keeps None)
    order: tuple[X.Expr, ...] | None = None
    _keys_of_order: list[tuple[X.Expr | None, tuple[int, int]]] | None = None  # (`_order_keys`)
    _order_reads: frozenset[int] = frozenset()  # the columns its computed expressions read

    def __init__(
        self,
        inputs: list[Queue],
        output: Queue,
        ids: IdSource,
        predicate: X.Expr | None,
        input_types: Sequence[Sequence[DataType]],
        ev: Evaluator,
        now: int,
        compat: bool = False,
        options: EngineOptions | None = None,
    ) -> None:
        super().__init__(inputs, output, ids, options)
        self.now, self.rel = now, 1 - now
        self.input_types = [list(t) for t in input_types]
        self.out_types = [t for ts in self.input_types for t in ts]
        self.offsets, self.widths = input_layout(self.input_types)
        self.equi, self.const, self.local, self.theta = classify(predicate, self.offsets, self.widths)
        # the conjuncts reading both sides, evaluated on the candidate pairs: only the columns
        # they read are gathered for them (the SegChangeStr self-join: 2 of 4 columns for 0.7M
        # candidate pairs, of which 33k are output)
        self.theta_pred = X.conjunction([c for c, _ in self.theta]) if self.theta else None
        self.theta_cols = frozenset(X.columns(self.theta_pred)) if self.theta_pred is not None else frozenset()
        self.predicate = predicate
        self.ev = ev
        self.compat = compat
        self.held = LiveRows(self.input_types[self.rel])  # X's live rows, insertion order, kept in place
        # per equi conjunct: whether its key over the rows held is a non-NULL int, ascending
        # (Linear Road's minutes), and the last one; then narrowing finds its rows by searches
        # (None: not looked at yet, see _check_order)
        self.ascending: list[bool | None] = [None] * len(self.equi)
        self.last_key: list[int | None] = [None] * len(self.equi)
        self.counters.extra.update(unmatched_deletes=0, candidate_pairs=0, state_tuples=0)

    def __setstate__(self, state: dict[str, Any]) -> None:
        """Checkpoints of before LiveRows hold X's live rows as one batch (`state`)."""
        old = state.pop("state", None) if "held" not in state else None
        self.__dict__.update(state)
        if "ascending" not in state:
            self.ascending, self.last_key = [None] * len(self.equi), [None] * len(self.equi)
        if old is not None:
            self._restore_rows(old)

    def _restore_rows(self, rows: Batch) -> None:
        self.held = LiveRows(self.input_types[self.rel])
        self.held.append(rows)

    @classmethod
    def from_node(cls, node: Plan, ctx: BuildContext) -> Self:
        """The operator for `node`: a band join (band_join.py) when the node reads its relation
        side as a window's stream (`StreamJoin.window`), else this one."""
        assert isinstance(node, L.StreamJoin)
        types = [[a.type for a in i.schema] for i in node.inputs]
        if node.window is not None:
            from cqlstream.engine.operators.band_join import BandJoinOp
            from cqlstream.engine.operators.window_kinds import range_life

            assert node.window.size is not None
            life = range_life(node.window.size, ctx.options.compat)
            band = BandJoinOp(
                ctx.inputs,
                ctx.output,
                ctx.ids,
                node.predicate,
                types,
                ctx.ev,
                node.now,
                life,
                node.inputs_[0] == node.inputs_[1],
                ctx.options.compat,
                ctx.options,
            )
            return cast(Self, band)
        op = cls(
            ctx.inputs, ctx.output, ctx.ids, node.predicate, types, ctx.ev, node.now, ctx.options.compat, ctx.options
        )
        op.order = node.order
        return op

    def produce_only(self, cols: frozenset[int] | None) -> None:
        """Gather only the output columns `cols` (engine/column_pruning.py); the state keeps
        whole rows, so the choice can change at any call."""
        self.produced = cols

    def state_bytes(self) -> int:
        return self.held.nbytes()

    @classmethod
    def state_class(cls, node: Plan, kids: list[int]) -> tuple[int, list[tuple[int, str]]]:
        assert isinstance(node, L.StreamJoin)
        if node.window is not None:  # the band join holds the window's live tuples, as the window would
            held = RATE
            return max([*kids, held]), [(held, f"band join state (its stream's tuples alive in [{node.window.sql()}])")]
        held = kids[1 - node.now]
        return max(kids, default=held), [(held, "stream join state (the relation's live rows)")]

    def _final(self, bound: int) -> bool:
        """This call processes the last input instant (every input ended there): what the
        Rstream over the join sees as its final call."""
        return all(q.ended and q.watermark == bound for q in self.inputs)

    def _filtered(self, k: int, b: Batch) -> Batch:
        for c in self.local[k]:
            if len(b):
                b = b.take(self.ev.predicate(c, b))
        return b

    def _const_ok(self) -> bool:
        if not self.const:
            return True
        one = Batch([], [], np.zeros(1, np.int64), np.ones(1, np.int8), np.zeros(1, np.uint64))
        return all(bool(self.ev.predicate(c, one)[0]) for c in self.const)

    def process(self, inputs: list[Batch], bound: int) -> Batch:
        s = self._filtered(self.now, inputs[self.now])
        xe = self._filtered(self.rel, inputs[self.rel])
        held = self.held
        if not len(xe) and (not len(s) or not len(held)):
            return Batch.empty(self.out_types)
        inst = _instants(s.ts, xe.ts)
        s_rank = _ranks(s.ts, inst)
        x_seq = _ranks(xe.ts, inst) * 2 + 1
        held.compact_if_due()  # (before any position into the held rows is taken)
        carried = self._reachable(s, xe)
        # the call's table knows the carried rows by id; their columns stay where they are held
        ids = held.ids()
        table = Table.of_ids(ids if carried is None else ids.take(carried), xe, x_seq)
        self.counters.extra["unmatched_deletes"] += table.unmatched_deletes
        where = self._place(table, carried, xe)  # table row → row held (None: the same)
        self.counters.extra["state_tuples"] = len(held)
        if not len(s) or not len(table.inst) or not self._const_ok():
            return Batch.empty(self.out_types)
        xb = held.view()
        p, rows, in_order = self._pairs(s, s_rank * 2 + 2, table, 2 * len(inst) + 4, xb, where)
        if self.theta_pred is not None and len(p):
            at = rows if where is None else where.take(rows)
            keep = self.ev.predicate(self.theta_pred, self._gather(s, xb, p, at, self.theta_cols))
            at = keep.nonzero()[0]  # (positions: numpy's mask indexing is ~5× slower at this size)
            p, rows = p.take(at), rows.take(at)
        if len(p) and self.compat and self._final(bound):
            keep = s.ts[p] < bound  # STREAM 0.6: no Rstream output at the last instant
            p, rows = p[keep], rows[keep]
        if not len(p):
            return Batch.empty(self.out_types)
        if self.order is None:
            p, rows = self._ordered(p, rows, s_rank, table.seq, in_order)
        else:  # (instead of the join's order: one sort)
            p, rows = self._by_value(s, xb, p, rows, where, s_rank, len(inst))
        reserve(self, len(p), [s, xb])  # over a memory limit: stop here
        out = self._gather(s, xb, p, rows if where is None else where.take(rows))
        out.id = self.ids.take(len(p))
        return out

    @property
    def state(self) -> Batch:
        """X's live rows, in insertion order (a copy)."""
        return self.held.batch()

    def _reachable(self, s: Batch, xe: Batch) -> np.ndarray | None:
        """Positions of the live held rows this call can touch (None: all rows held, none of
        them dead): those whose keys on every equi conjunct some S tuple of the call has, and
        those X's events delete. The others can pair with nothing and stay as they are, so they
        never enter the call's table (Linear Road: ~1k S tuples a call against ~20k carried
        rows). Their relative order is kept, so pairs and their order are those of the whole
        state."""
        held = self.held
        live = len(held)
        everything = None if not held.n_dead else held.live()
        if live < NARROW_MIN or not self.equi or len(s) * NARROW_RATIO > live:
            return everything
        gone = xe.id[xe.sign < 0]
        if len(gone) * NARROW_RATIO > live:  # X's events delete much of it: all enter
            return everything
        sides = [(e.ea, e.eb) if e.a == self.rel else (e.eb, e.ea) for e in self.equi]
        if None in self.ascending:
            self._check_order(sides)
        up = self.ascending.index(True) if True in self.ascending else None
        if up is not None:  # that conjunct first: its matches are ranges of the rows held
            sides.insert(0, sides.pop(up))
        pos = reachable_rows(held.view(), s, gone, sides, self.ev, key_codes, up is not None)
        return everything if pos is None else held.alive(pos)

    def _place(self, table: Table, carried: np.ndarray | None, xe: Batch) -> np.ndarray | None:
        """Keeps X's state: the call's inserts are written after the held rows, and the rows
        deleted in the call (carried or inserted in it) are marked dead. Returns, per table row,
        the row held (−1 for a delete event), or None when that is the table row itself (every
        row held carried, every event an insert); it ascends over the inserts, so pairs sorted
        by table row are sorted by row held."""
        held = self.held
        n0, nc = held.n, table.n_state
        ins = xe.sign > 0
        if True in self.ascending:  # (tracked once narrowing looked at the order)
            self._track_order(xe if ins.all() else xe.take(ins))
        if ins.all():  # nothing deleted: nothing dies
            held.append(xe)
            if carried is None:
                return None
            return np.concatenate([carried, np.arange(n0, n0 + len(xe))])
        at = ins.nonzero()[0]
        held.append(xe, at)
        where = np.empty(nc + len(xe), np.int64)
        where[:nc] = np.arange(nc) if carried is None else carried
        where[nc:] = -1
        where[nc + at] = np.arange(n0, n0 + len(at))
        held.kill(where.take(table.retracted))  # the inserts (carried or new) that did not survive
        return where

    def _check_order(self, sides: list[tuple[X.Expr, X.Expr]]) -> None:  # (sides: in `equi`'s order)
        """`ascending` of the conjuncts not yet looked at, from the rows held (once: from
        then on each call's inserts keep it; small states that never narrow never pay it)."""
        view = self.held.view()
        for k in range(len(sides)):
            if self.ascending[k] is None and len(view):
                self.ascending[k], self.last_key[k] = True, None
                self._track_order(view, k)

    def _track_order(self, new: Batch, only: int | None = None) -> None:
        """Keeps `ascending` for the rows `new` about to be held: a conjunct's key stays
        ascending while every new key is a non-NULL int at or above the last one held (rows
        deleted since keep their place until compacted away, which keeps the order). `only`:
        that conjunct alone."""
        if not len(new):
            return
        for k, e in enumerate(self.equi):
            if not self.ascending[k] or (only is not None and k != only):
                continue
            vals, nulls = self.ev.eval(e.ea if e.a == self.rel else e.eb, new)
            last = self.last_key[k]
            ok = (
                vals.dtype.kind == "i"
                and (nulls is None or not nulls.any())
                and (last is None or int(vals[0]) >= last)
                and (len(vals) < 2 or bool((vals[1:] >= vals[:-1]).all()))
            )
            self.ascending[k] = ok
            if ok:
                self.last_key[k] = int(vals[-1])

    def _pairs(
        self, s: Batch, seq: np.ndarray, table: Table, m: int, xb: Batch, where: np.ndarray | None
    ) -> tuple[np.ndarray, np.ndarray, bool]:
        """(S row, X table row) of every S tuple with each X instance alive at its instant whose
        equi keys equal its own, and whether they come in (S row, X row) order. X's rows are
        those of `xb` (the rows held), table row r at `where[r]` (None: at r)."""
        inst = table.inst
        if where is None:
            at = None if len(inst) == len(xb) else inst  # (the table's instances: every row, or some)
        else:
            at = where.take(inst)
        ikey, ivalid, pkey, pvalid = self._keys(s, xb, at)
        if len(s) * len(inst) <= TP.TINY_CELLS:
            # a few S tuples: one probes × instances table (tiny_pairs.py), its pairs in (S row,
            # X row) order (`inst` ascends); `_ordered` sorts other paths' pairs fully, so the
            # order they come in never shows
            p, at, _ = tiny_pairs(Pairing(pkey, pvalid, seq, ikey, ivalid, table.lo, table.hi))
            self.counters.extra["candidate_pairs"] += len(p)
            return p, inst.take(at), True
        if SCAN_RATIO * len(s) < len(inst):
            got = scan_pairs(Pairing(pkey, pvalid, seq, ikey, ivalid, table.lo, table.hi))
            if got is not None:
                self.counters.extra["candidate_pairs"] += len(got[0])
                return got[0], inst[got[1]], False
        iv = ivalid.nonzero()[0]  # one position array for the four gathers
        index = StabIndex(inst.take(iv), ikey.take(iv), table.lo.take(iv), table.hi.take(iv), m)
        p, rows = index.probe(pkey, pvalid, seq)
        self.counters.extra["candidate_pairs"] += index.examined
        return p, rows, False

    def _keys(
        self, s: Batch, xb: Batch, at: np.ndarray | None = None
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(X rows' keys, valid, S keys, valid): one int64 code per row for all equi conjuncts;
        X's rows are those of `xb` at positions `at` (None: all)."""
        if not self.equi:
            n, k = len(xb) if at is None else len(at), len(s)
            return np.zeros(n, np.int64), filled(n, True, bool), np.zeros(k, np.int64), filled(k, True, bool)
        xs: list[Keyed] = []
        ss: list[Keyed] = []
        for e in self.equi:
            es, ex = (e.ea, e.eb) if e.a == self.now else (e.eb, e.ea)
            vx, nx = self.ev.eval(ex, xb)
            if at is not None:
                vx, nx = vx.take(at), (None if nx is None else nx.take(at))
            (cs, oks, _), (cx, okx, _) = key_codes([self.ev.eval(es, s), (vx, nx)])
            ss.append((cs, oks))
            xs.append((cx, okx))
        (ik, iv), (pk, pv) = combine_keys(xs, ss)
        return ik, iv, pk, pv

    def _ordered(
        self, p: np.ndarray, rows: np.ndarray, s_rank: np.ndarray, x_seq: np.ndarray, in_order: bool = False
    ) -> tuple[np.ndarray, np.ndarray]:
        """The pairs in the Rstream-of-the-join order (module docstring): by instant; with S
        first, pairs of X rows inserted before the instant by (S row, X row), then those of rows
        inserted at it by (X row, S row); with S second all by (S row, X row). S rows are in
        (instant, arrival) order and X table rows in insertion order. `in_order`: the pairs
        already come in (S row, X row) order (then only late pairs need a sort)."""
        nr = max(len(x_seq), 1)
        late = (x_seq[rows] == s_rank[p] * 2 + 1) if self.now == 0 else None
        if late is None or not late.any():
            if in_order:
                return p, rows
            comp = p.astype(np.int64) * nr + rows
            o = stable_order(comp)  # (a packed sort: ~8× a stable argsort)
        else:
            major = np.where(late, rows, p)
            minor = np.where(late, p, rows)
            o = np.lexsort((minor, major, late, s_rank[p]))
        return p[o], rows[o]

    def _by_value(
        self,
        s: Batch,
        xb: Batch,
        p: np.ndarray,
        rows: np.ndarray,
        where: np.ndarray | None,
        s_rank: np.ndarray,
        n_inst: int,
    ) -> tuple[np.ndarray, np.ndarray]:
        """The pairs sorted by instant (S's rank `s_rank` among the call's `n_inst` instants) and
        within it by the value of `order` over their joined rows: the order Rstream gives the
        unfused plan's output. Equal keys are equal output rows, so one sort of packed codes
        does, with no tie order to keep."""
        if len(p) < 2:
            return p, rows
        keys = self._order_keys()
        inst = s_rank.take(p)
        if not keys:  # (constant output columns: by instant alone)
            o = stable_order(inst, 0, max(n_inst - 1, 0))
            return p.take(o), rows.take(o)
        at = rows if where is None else where.take(rows)
        joined = None
        if self._order_reads:  # only the columns the computed expressions read are gathered
            joined = self._gather(s, xb, p, at, self._order_reads)
        cols: list[np.ndarray] = []
        nulls: list[np.ndarray | None] = []
        for e, (k, c) in keys:
            if e is None:  # a column of one side, taken from it directly
                b, r = (s, p) if k == self.now else (xb, at)
                m = b.nulls[c]
                cols.append(b.cols[c].take(r))
                nulls.append(None if m is None else m.take(r))
                continue
            assert joined is not None
            v, m = self.ev.eval(e, joined)
            cols.append(np.broadcast_to(v, len(p)) if np.ndim(v) == 0 else v)
            nulls.append(None if m is None else np.broadcast_to(m, len(p)))
        key, width = combine_codes(cols, nulls, inst.astype(np.int64), max(n_inst, 1))
        o = stable_order(key, 0, width - 1)
        return p.take(o), rows.take(o)

    def _order_keys(self) -> list[tuple[X.Expr | None, tuple[int, int]]]:
        """`order` as sort keys, worked out once: (None, (side, column)) for a plain column, else
        (expression, _); constant expressions order nothing and are left out."""
        keys = self._keys_of_order
        if keys is None:
            assert self.order is not None
            keys = []
            for e in self.order:
                if not X.columns(e):
                    continue
                if isinstance(e, X.ColRef):
                    k = 0 if e.index < self.offsets[1] else 1
                    keys.append((None, (k, e.index - self.offsets[k])))
                else:
                    keys.append((e, (-1, -1)))
            self._keys_of_order = keys
            self._order_reads = frozenset(c for e, _ in keys if e is not None for c in X.columns(e))
        return keys

    def _gather(
        self,
        s: Batch,
        xb: Batch,
        p: np.ndarray,
        rows: np.ndarray,
        only: frozenset[int] | None = None,
        parts: tuple[Batch, Batch] | None = None,
    ) -> Batch:
        """The joined rows (columns in the join's input order), stamped with their S tuple's
        instant. `only`: the joined column positions to fill; the others are left empty (length
        0), for a predicate that reads no other column. `parts`: X's rows are those of the two
        batches one after the other (`xb` is not read), gathered from each without joining them."""
        cols: list[np.ndarray] = []
        nulls: list[np.ndarray | None] = []
        split = None if parts is None else _Split(rows, len(parts[0]))
        n = len(p)
        out = self.produced if only is None else None  # output rows: the columns read above
        for k in range(2):
            b, r = (s, p) if k == self.now else (xb, rows)
            for c in range(self.widths[k]):
                if only is not None and self.offsets[k] + c not in only:
                    cols.append(b.cols[c][:0])
                    nulls.append(None)
                    continue
                if out is not None and self.offsets[k] + c not in out:
                    v, m = placeholder(self.input_types[k][c], n)
                    cols.append(v)
                    nulls.append(m)
                    continue
                if split is not None and k != self.now:
                    assert parts is not None
                    col, msk = split.take(parts, c)
                    cols.append(col)
                    nulls.append(msk)
                    continue
                cols.append(b.cols[c][r])
                msk = b.nulls[c]
                msk = None if msk is None else msk[r]
                nulls.append(msk if msk is not None and msk.any() else None)
        if out is not None and len(out) < len(cols):
            blank = frozenset(range(len(cols))) - out
            return BlankedBatch(cols, nulls, s.ts[p], filled(n, 1, np.int8), np.zeros(n, np.uint64), blank)
        return Batch(cols, nulls, s.ts[p], filled(n, 1, np.int8), np.zeros(n, np.uint64))


class _Split:
    """Rows of two batches placed one after the other (the first has `n0` rows), split once by
    batch so every column is gathered from each batch directly."""

    def __init__(self, rows: np.ndarray, n0: int) -> None:
        self.n = len(rows)
        self.all0 = bool(self.n == 0 or rows.max() < n0)
        self.all1 = not self.all0 and bool(rows.min() >= n0)
        if self.all0 or self.all1:
            self.r0, self.r1 = rows, rows - n0
        else:
            first = rows < n0
            self.at0 = first.nonzero()[0]
            self.at1 = (~first).nonzero()[0]
            self.r0, self.r1 = rows.take(self.at0), rows.take(self.at1) - n0

    def take(self, parts: tuple[Batch, Batch], c: int) -> tuple[np.ndarray, np.ndarray | None]:
        """Column c of the rows, and its NULL mask (None when no row is NULL)."""
        a, b = parts
        if self.all0 or self.all1:
            src, r = (a, self.r0) if self.all0 else (b, self.r1)
            m = src.nulls[c]
            m = None if m is None else m.take(r)
            return src.cols[c].take(r), (m if m is not None and m.any() else None)
        ca, cb = a.cols[c], b.cols[c]
        col = np.empty(self.n, dtype=np.result_type(ca, cb) if ca.dtype != cb.dtype else ca.dtype)
        col[self.at0] = ca.take(self.r0)
        col[self.at1] = cb.take(self.r1)
        if a.nulls[c] is None and b.nulls[c] is None:
            return col, None
        m = np.zeros(self.n, bool)
        m[self.at0] = a.null_mask(c).take(self.r0)
        m[self.at1] = b.null_mask(c).take(self.r1)
        return col, (m if m.any() else None)


def _distinct_sorted(ts: np.ndarray) -> np.ndarray:
    """The distinct values of a sorted array (one comparison pass, no sort)."""
    return ts[run_starts(ts)]


def _ranks(ts: np.ndarray, inst: np.ndarray) -> np.ndarray:
    """Each element's position in `inst` (sorted, holding every value of the sorted `ts`): the
    distinct values are looked up, and repeated over their runs."""
    first = run_starts(ts).nonzero()[0]
    return inst.searchsorted(ts.take(first)).astype(np.int64, copy=False).repeat(run_lengths(first, len(ts)))


def _instants(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The sorted distinct instants of two ts-sorted batches: each batch's distinct instants (a
    few hundred per call against ~100k tuples) are merged, not the tuples."""
    # (a sort and a pass, not np.unique: numpy 2's np.unique imports numpy.ma on its first
    # call, ~15 ms of start-up that landed in the first stream join's call)
    both = np.concatenate([_distinct_sorted(a), _distinct_sorted(b)])
    both.sort()
    return _distinct_sorted(both)
