"""Grouped and scalar aggregation over a relation given as signed deltas (docs/semantics.md).

Output: one row per non-empty group, the key values then the aggregate values. Without GROUP BY
(a scalar aggregate) there is exactly one row at every instant from t0 on, even over an empty
input (count 0, the other aggregates NULL), except in compat mode (STREAM 0.6), where an empty
input has no row. Whenever a group's row changes at an instant, the operator emits `−` of the
old row (with the id it was inserted with) and `+` of the new row (a fresh id); a group becoming
empty emits only the `−`; an instant after which a group's row is unchanged emits nothing.

Aggregates: count(*), count(x), sum, avg, min, max, each optionally DISTINCT, NULL arguments
ignored; sum of integers is an int64, avg a float; plus user-defined aggregates. Each call is an
*aggregate strategy* (engine/aggregates/, one class per family, looked up in
engine/aggregates/registry.py); this operator runs the shared, vectorized pipeline they plug into.

Vectorized evaluation (one pass per batch, whatever the number of instants it spans)
-----------------------------------------------------------------------------------------
1. Key and argument expressions are evaluated once over the batch; group keys are factorized to
   dense group ids (gid) through a persistent interner of packed keys (engine/aggregates/keys.py:
   all key columns in one int64, one sort, search and insert per batch). NULL is a key value of
   its own. The interner names the groups the batch created, with a row of each, whose key values
   are stored for the output.
2. Events are stable-sorted by (gid, ts) (ts order is already there: a radix/packed sort on the
   gid keeps it). A *cell* is one (gid, instant) with events; its end is the last event
   (engine/aggregates/cells.py).
3. Arguments read by DISTINCT aggregates or min/max get a per-group multiset
   (engine/aggregates/multiset.py): it gives the ±1 transitions of distinct values and the
   extremes at every cell.
4. Additive quantities — row count, count(x), sum(x), DISTINCT or not — are segmented
   cumulative sums added to the per-group totals carried between calls
   (engine/aggregates/quantities.py), shared by the strategies that read them.
5. Every strategy gives its output column per cell; each cell's row is compared with the
   previous cell of its group (or the carried row, engine/aggregates/group_state.py) and only
   real changes are emitted, in ts order.

With a probe (a second input, `Aggregate.probe`: the stream whose instants are the only ones a
stream–relation join reads this output at, cql/logical/probe_aggregates.py), step 5
looks only at the cells that end a group's run of cells within one probe interval (after one
probe instant, up to and including the next; the last interval of a call ends at the call's
bound): each is compared with the group's previous such cell, so a group emits its net change
over the interval at its last change in it. The relation is then exact at every probe instant
and at the end of every call, with the live rows inserted at the same instants, in the same
order, as without the probe. When every aggregate's value at a cell is read off the additive
totals there (count, sum, avg without DISTINCT: `AggregateStrategy.interval_cells`), step 2 cuts
the events into (group, probe interval) cells at once: the cells inside an interval, never
compared, are not built, nor their totals and values (Linear Road's SMAvgRel and VolSM: ~1/16 of
the cells). Each such cell ends at the same event, so its totals and values are the same.

With a HAVING predicate (`Aggregate.having`, cql/logical/rewrites/having_in_aggregate.py: a
selection over the output moved in), emission keeps only the rows the predicate holds for — the
old row of a `−`, the new row of a `+` — evaluated once per batch over those rows (`_having`; when
it only compares numeric columns, over every cell's old and new row at once: `having_whole`);
ids and the carried state are as without it, so the output is the selection's, element for element.

With more than one engine thread (engine/parallel.py), a grouped batch of at least PARALLEL_MIN
events runs steps 2–7 as parts of disjoint group-id ranges at once (aggregate_parts.py), its
rows and ids merged back to exactly the sequential output.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cached_property
from typing import TYPE_CHECKING, Self, cast

import numpy as np

from cqlstream.cql.logical import nodes as L
from cqlstream.cql.logical.expr import COMPARISONS, AggCall, ColRef, Const, Expr, Op, columns
from cqlstream.cql.logical.nodes import Plan
from cqlstream.engine import parallel
from cqlstream.engine.aggregates.cells import Cells
from cqlstream.engine.aggregates.changes import Changes, Follow
from cqlstream.engine.aggregates.columns import as_dtype, empty_column_of
from cqlstream.engine.aggregates.events import StepEvents
from cqlstream.engine.aggregates.group_state import GroupState
from cqlstream.engine.aggregates.keys import GroupKeys
from cqlstream.engine.aggregates.multiset import Multiset
from cqlstream.engine.aggregates.quantities import ROWS, Quantity, cell_totals
from cqlstream.engine.aggregates.registry import strategy_for
from cqlstream.engine.aggregates.strategy import AggregateStrategy
from cqlstream.engine.aggregates.sum_bound import SumBound
from cqlstream.engine.batch import Batch, dtype_of
from cqlstream.engine.deferred_batch import ChangeRows, change_batch
from cqlstream.engine.exprs import Evaluator
from cqlstream.engine.kernels import run_ends, sorted_order
from cqlstream.engine.operators.aggregate_parts import MULTISET_LOCK, part_cuts, run_parts
from cqlstream.engine.operators.base import BuildContext, IdSource, Operator
from cqlstream.engine.operators.probe_intervals import interval_ends, interval_of
from cqlstream.engine.queues import Queue

if TYPE_CHECKING:
    from cqlstream.engine.planner import EngineOptions


_HAVING_META = ((np.int64, 0), (np.int8, 1), (np.uint64, 0))  # ts, sign, id of the rows HAVING reads
_WHOLE_OPS = frozenset({"and", "or", "not", "is_null", "in"})  # with COMPARISONS: `AggregateOp.having_whole`
_WHOLE_KINDS = frozenset({"int", "float", "bool", "timestamp"})  # ... over columns of these types


class AggregateOp(Operator):
    kind = "aggregate"
    COMPACT_MIN = 1 << 16  # reuse empty groups' ids / renumber only past this many ids (tests lower it)
    PARALLEL_MIN = 1 << 16  # events of a batch worth splitting into parts on the engine's threads (tests lower it)
    # step 6: up to this share of unchanged cells, all cells are kept (masked) rather than the changed
    # ones gathered (~6 gathers of the cells a batch less: Linear Road's windows, 0.03–0.3 % unchanged)
    UNCHANGED_KEPT = 0.125

    def __init__(
        self,
        inputs: list[Queue],
        output: Queue,
        ids: IdSource,
        keys: tuple[Expr, ...],
        aggs: tuple[AggCall, ...],
        evaluator: Evaluator,
        compat: bool = False,
        options: EngineOptions | None = None,
        having: Expr | None = None,
        retracts: bool = True,
    ) -> None:
        """`retracts`: the input may delete rows (False for an input that only inserts, a stream
        read whole: then no FIFO of inserts is kept for deletes that never come, which would grow
        with the input)."""
        super().__init__(inputs, output, ids, options)
        self.having = having  # a predicate on output rows: only those it holds for are emitted
        self.having_cols = frozenset(columns(having)) if having is not None else frozenset()
        self.keys = tuple(keys)
        self.aggs = tuple(aggs)
        self.ev = evaluator
        self.compat = compat
        self.key_types = [k.type for k in self.keys]
        self.out_types = self.key_types + [a.type for a in self.aggs]
        self.args: list[Expr] = []  # distinct argument expressions; strategies refer to them by index
        self.strategies: list[AggregateStrategy] = [
            strategy_for(a, -1 if a.arg is None else self._arg(a.arg), evaluator.functions) for a in self.aggs
        ]
        # the needs of all strategies, each computed once per batch
        self.quantities: list[Quantity] = [ROWS]  # ROWS first: count(x) without NULLs reuses its deltas
        self.multisets: dict[int, list[str]] = {}  # argument → extremes wanted
        for s in self.strategies:
            self.quantities += [q for q in s.quantities if q not in self.quantities]
            if s.multiset or any(q.distinct for q in s.quantities):  # DISTINCT totals add its transitions
                ex = self.multisets.setdefault(s.ai, [])
                ex += [k for k in s.extremes if k not in ex]
        self.arg_dt = [dtype_of(a.type) if a.type.kind != "null" else np.int64 for a in self.args]
        # float sums of integer arguments only tell an int64 sum out of range: skipped while none can be
        self.sum_bound = SumBound(
            [q for q in self.quantities if q.floating and np.dtype(self.arg_dt[q.ai]).kind in "iub"]
        )
        self.ms = {ai: Multiset(self.arg_dt[ai]) for ai in self.multisets}
        self.gkeys = GroupKeys(self.key_types)
        if not retracts:
            self.gkeys.fifo.off()  # compaction carries "off" over (GroupKeys.adopt_fifo)
        self.recycling = False  # ids of empty groups are being reused (`_release`)
        self.scalar_row = not self.keys and not compat  # one row at every instant from t0
        self.need_init = self.scalar_row
        self.stateful = [s for s in self.strategies if s.stateful]
        # probed: cells per probe interval rather than per instant (`_changes`), when every value is
        # read off the quantities' totals at a cell's end (no multisets: their cells are instants)
        self.interval_cells = not self.multisets and all(s.interval_cells for s in self.strategies)
        self.state = self._new_state()
        self.probed = len(inputs) == 2  # input 1: the probe stream (module docstring)
        if self.probed:  # the join reading the output probes at every instant of it: never shed
            self.unshed = frozenset({1})

    def _arg(self, e: Expr) -> int:
        if e not in self.args:
            self.args.append(e)
        return self.args.index(e)

    def _new_state(self) -> GroupState:
        return GroupState(
            [dtype_of(t) for t in self.key_types],
            [dtype_of(a.type) for a in self.aggs],
            self.quantities,
            [s.never_null for s in self.strategies],
        )

    def state_bytes(self) -> int:
        n = self.gkeys.nbytes() + sum(m.nbytes() for m in self.ms.values()) + self.state.nbytes()
        return n + sum(s.nbytes() for s in self.strategies)

    def current_rows(self, at: int) -> Batch:
        """The current groups' output rows as `+` elements at instant `at` (what a late query or
        a snapshot subscriber starts from); ids are those the rows were inserted with. With a
        HAVING predicate, only the rows it holds for."""
        rows = self.state.current_rows(at)
        if self.having is None or not len(rows):
            return rows
        return rows.take(np.flatnonzero(self.ev.predicate(self.having, rows)))

    # ------------------------------------------------------------ processing
    def process(self, inputs: list[Batch], bound: int) -> Batch:
        b = inputs[0]
        probe_ts = inputs[1].ts if self.probed else None
        # the scalar row's first instant is t0, if the input ever started (docs/semantics.md:
        # a query none of whose sources saw an element or heartbeat has no instants)
        init = self.need_init and self.t0 is not None and bound >= self.t0 and self.inputs[0].start is not None
        if init:
            self.need_init = False
        n = len(b) + init
        if not n:
            return Batch.empty(self.out_types)
        state = self.state

        # 1. keys → dense group ids; argument values
        kv, kn = [], []
        for k in self.keys:
            v, m = self.ev.eval(k, b)
            kv.append(as_dtype(v, dtype_of(k.type)))
            kn.append(None if m is None or not m.any() else m)
        gid = self.gkeys.map(kv, kn, len(b), b.sign)
        state.ensure(self.gkeys.n)
        if self.keys:
            state.store_keys(*self.gkeys.fresh, kv, kn)
        av, an, nulls_in = [], [], []  # values (dtype per arg), not-NULL masks, any NULL
        for ai, e in enumerate(self.args):
            v, m = self.ev.eval(e, b)
            if e.type.kind == "null":
                v, m = np.zeros(len(b), np.int64), np.ones(len(b), bool)
            av.append(as_dtype(v, self.arg_dt[ai]))
            an.append(np.ones(len(b), bool) if m is None else ~m)
            nulls_in.append(m is not None and bool(m.any()))
        ts, sign = b.ts, b.sign.astype(np.int64)
        if init:  # the scalar row's first instant: a weightless event at t0 makes a cell there
            gid = np.concatenate([np.zeros(1, np.int64), gid])
            ts = np.concatenate([np.array([self.t0], np.int64), ts])
            sign = np.concatenate([np.zeros(1, np.int64), sign])
            av = [np.concatenate([empty_column_of(self.arg_dt[i], 1), v]) for i, v in enumerate(av)]
            an = [np.concatenate([np.zeros(1, bool), m]) for m in an]
            nulls_in = [True] * len(an)

        for q in [q for q in state.rows_counts if nulls_in[q.ai]]:  # a NULL x: count(x) leaves the rows'
            state.unshare(q)
        skip = self.sum_bound.skip(len(b), av, an, nulls_in, state)  # float shadows no cell needs
        ev = StepEvents(gid, ts, sign, tuple(av), tuple(an), tuple(nulls_in), skip, probe_ts)
        cuts = self._cuts(gid, n)
        if cuts is not None:  # disjoint groups on the engine's threads (aggregate_parts.py)
            return run_parts(self, cuts, ev)
        ch = self._changes(ev, 0, self.gkeys.n - 1)
        nid = np.zeros(len(ch.chg), np.uint64)
        ins = np.flatnonzero(ch.ins_mask)
        nid[ins] = self.ids.take(len(ins))
        old_id = self._old_ids(ch, nid)
        out = self._emit(ch, old_id, nid)
        self._forget(self._carry(ch, nid, ins))
        return out

    def _cuts(self, gid: np.ndarray, n: int) -> list[tuple[int, int]] | None:
        """Group-id bounds of the parts this batch is split into (aggregate_parts.py), or None:
        one part, the sequential path (one engine thread, a small batch, no GROUP BY, or
        strategies with per-group Python state)."""
        k = parallel.threads()
        if k < 2 or n < self.PARALLEL_MIN or not self.keys or self.stateful:
            return None
        return part_cuts(gid, self.gkeys.n, k)

    def _changes(self, ev: StepEvents, glo: int, ghi: int) -> Changes:
        """Steps 2–6 over events `ev` whose group ids are in [glo, ghi]: cells, multisets,
        totals, output values, and the cells whose group's row changes. Reads the carried state
        of those groups only (and updates only their multiset entries), so disjoint ranges can
        run at once."""
        state = self.state
        gid, ts, sign, av, an = ev.gid, ev.ts, ev.sign, ev.av, ev.an
        n = len(gid)
        # 2. (gid, ts) order, cells
        order, sg = sorted_order(gid, glo, ghi)
        sts = ts.take(order)
        gstart = np.empty(n, bool)
        gstart[0] = True
        np.not_equal(sg[1:], sg[:-1], out=gstart[1:])
        # with a probe and values read off totals only, a cell is a group's run of events within one
        # probe interval: its end is the interval's last cell, the only one compared (step 6)
        runs_of = ev.probe_ts if self.interval_cells else None
        runs = runs_of is not None
        cut = sts if runs_of is None else interval_of(sts, runs_of)
        cend = np.empty(n, bool)
        cend[-1] = True
        np.not_equal(cut[1:], cut[:-1], out=cend[:-1])
        cend[:-1] |= gstart[1:]
        if n and cend.all():  # every cell one event (a window's groups, mostly): no gathers at cell ends
            ce, cell_g, cell_ts = np.arange(n, dtype=np.int64), sg, sts
        else:
            ce = np.flatnonzero(cend)
            cell_g, cell_ts = sg.take(ce), sts.take(ce)
        same = np.zeros(len(ce), bool)  # the cell's group is the previous cell's
        np.equal(cell_g[1:], cell_g[:-1], out=same[1:])
        first = None  # per cell, its group's first cell (Cells.group_base)
        if same.any():
            first = np.arange(len(ce), dtype=np.int64)
            first[same] = 0
            np.maximum.accumulate(first, out=first)
        cx = Cells(
            n=n,
            order=order,
            sg=sg,
            cend=cend,
            ce=ce,
            cell_g=cell_g,
            cell_ts=cell_ts,
            first=first,
            ev=ev,
            ssign=sign.take(order),
        )
        ncells, cell_g, cell_ts = cx.ncells, cx.cell_g, cx.cell_ts

        # 3. multisets: transitions (DISTINCT) and extremes (min/max)
        if self.multisets:
            cell_of = np.empty(n, np.int64)
            cell_of[order] = np.cumsum(cend) - cend
            for ai, ex in self.multisets.items():
                idx = np.flatnonzero(an[ai] & (sign != 0))
                with MULTISET_LOCK:  # one multiset, rewritten whole: parts update it in turn
                    tr, res = self.ms[ai].update(gid[idx], av[ai][idx], sign[idx], cell_of[idx], cell_g, ex)
                full = np.zeros(n, np.int64)
                full[idx] = tr
                cx.trans[ai] = full
                for kind, r in res.items():
                    cx.extremes[(ai, kind)] = r

        # 4. additive quantities at the cell ends (not the float shadows of int sums that cannot overflow)
        cell_totals(self.quantities, cx, state, ev.skip)

        # 5. output values per cell
        rows = cast(np.ndarray, cx.totals[ROWS])  # ROWS counts: one int64 array, never a float pair
        exists = np.ones(ncells, bool) if self.scalar_row else rows > 0
        outs = [s.values(cx) for s in self.strategies]
        em = None if ev.probe_ts is None or runs else interval_ends(cell_g, cell_ts, ev.probe_ts)
        if em is not None:  # only the cells ending a probe interval of their group are compared
            cell_g, cell_ts, exists = cell_g.take(em), cell_ts.take(em), exists.take(em)
            outs = [(v.take(em), nl.take(em)) for v, nl in outs]
            ncells = len(em)

        # 6. changes against the previous cell of the group (or the carried row)
        # (in place: the gathers from the carried state are fresh arrays; cells of one group are adjacent)
        if em is not None:  # the compared cells only
            same = np.zeros(ncells, bool)
            np.equal(cell_g[1:], cell_g[:-1], out=same[1:])
        # the cells after a cell of their group take its values as their previous ones
        follow = Follow(same)
        prev_exists = state.exists.take(cell_g)
        follow.copy(prev_exists, exists)
        changed = exists != prev_exists
        prevs = []
        for free, (v, nl), ov, on in zip(state.null_free, outs, state.out_vals, state.out_nulls):
            pv = ov.take(cell_g)
            follow.copy(pv, v)
            d = np.asarray(v != pv, bool)
            if free:  # never NULL: its flags all False, before and after (GroupState.null_free)
                pn = nl
            else:
                pn = on.take(cell_g)
                follow.copy(pn, nl)
                d &= ~nl
                d |= nl != pn
            prevs.append((pv, pn))
            d &= exists
            changed |= d
        k = np.count_nonzero(changed)
        unchanged = None
        if k == ncells:  # every cell changes (a window's groups, mostly): no gathers
            chg, del_mask, ins_mask = np.arange(ncells, dtype=np.int64), prev_exists, exists
        elif ncells - k <= self.UNCHANGED_KEPT * ncells:  # nearly every cell: all kept, the others emit no row
            unchanged = np.flatnonzero(~changed)  # (their ids: `_old_ids`)
            chg, del_mask, ins_mask = np.arange(ncells, dtype=np.int64), prev_exists & changed, exists & changed
        else:
            chg = np.flatnonzero(changed)
            del_mask, ins_mask = prev_exists.take(chg), exists.take(chg)
        return Changes(
            cx,
            cell_g,
            cell_ts,
            exists,
            prev_exists,
            outs,
            prevs,
            same,
            follow,
            em,
            rows,
            chg,
            del_mask,
            ins_mask,
            unchanged,
        )

    def _old_ids(self, ch: Changes, nid: np.ndarray) -> np.ndarray:
        """Per changed cell, the id of the row it deletes: the carried row's, or the row the
        group's previous changed cell inserted (new ids `nid`). Where unchanged cells are among
        them (`ch.unchanged`), a cell after one takes the id that cell kept (its own old id)."""
        every = len(ch.chg) == len(ch.cell_g)
        cg = ch.cell_g if every else ch.cell_g.take(ch.chg)
        old_id = self.state.row_id.take(cg)
        if len(ch.chg) > 1:
            if every:  # the cells' own `same`, and its positions
                same, follow = ch.same, ch.follow
            else:
                same = np.zeros(len(cg), bool)
                np.equal(cg[1:], cg[:-1], out=same[1:])
                follow = Follow(same)
            follow.copy(old_id, nid)
            if ch.unchanged is not None and len(ch.unchanged):
                nxt = ch.unchanged + 1
                nxt = nxt[nxt < len(cg)]
                fix = nxt[same.take(nxt)]  # the cells right after an unchanged cell of their group
                while len(fix):  # runs of unchanged cells: one pass per cell of the longest run
                    src = old_id.take(fix - 1)
                    if np.array_equal(old_id.take(fix), src):
                        break
                    old_id[fix] = src
        return old_id

    def _carry(self, ch: Changes, nid: np.ndarray, ins: np.ndarray | None = None) -> np.ndarray:
        """7. Carry the state of every touched group (its last cell); returns the touched
        groups that are empty now. `ins`: the changed cells with a `+` (found if not given)."""
        state, cell_g = self.state, ch.cell_g
        lastc = run_ends(cell_g)  # each touched group's last cell
        G = cell_g.take(lastc)
        state.exists[G] = ch.exists.take(lastc)
        for free, (v, nl), ov, on in zip(state.null_free, ch.outs, state.out_vals, state.out_nulls):
            ov[G] = v.take(lastc)
            if not free:  # (a never-NULL value's flags are neither read nor kept: GroupState.null_free)
                on[G] = nl.take(lastc)
        if ins is None:
            ins = np.flatnonzero(ch.ins_mask)  # positions: cheaper than the mixed mask, used twice
        if len(ins):
            ig = cell_g.take(ins if len(ch.chg) == len(cell_g) else ch.chg.take(ins))  # every cell changes: same
            # a group's last `+` wins: a 1-D scatter writes in order (as kernels.unique_rows relies on),
            # so no run ends of `ig` and no gathers at them
            state.row_id[ig] = nid.take(ins)
        full_last = lastc if ch.em is None else ch.em.take(lastc)  # the same cells, numbered among all cells
        state.carry_totals(ch.cx.totals, full_last, G)
        return np.compress(ch.rows.take(full_last) <= 0, G)

    def _forget(self, dead: np.ndarray) -> None:
        """After a batch: groups `dead` (touched, empty now) are released, or state compacted.
        A compaction drops every empty group, so releasing them first (resetting their state,
        taking their keys out of the interner) would be work thrown away."""
        if not self.keys:
            return
        for s in self.stateful:
            s.forget(dead.tolist())
        live = self._compaction_due()
        if live is not None:
            self._compact(live)
        else:
            self._release(dead)

    # ------------------------------------------------------------ pieces
    def _emit(self, ch: Changes, old_id: np.ndarray, nid: np.ndarray) -> Batch:
        """Rows for the changed cells `ch.chg` (ids of the rows they delete `old_id`, of those
        they insert `nid`): `−` (old row, old id) where the group existed before the cell, `+`
        (new row, new id) where it exists after, in ts order; with a HAVING predicate, only the
        rows it holds for (`_having`), and only the cells with such a row. Returned as a deferred
        batch (engine/deferred_batch.py `ChangeRows`): the rows' instants now, the rows laid out
        when first read — by the writer thread for a query's result. Only the key values are
        gathered here, from the group state that later calls change."""
        cell_g, cell_ts, chg, outs, prevs = ch.cell_g, ch.cell_ts, ch.chg, ch.outs, ch.prevs
        del_mask, ins_mask = ch.del_mask, ch.ins_mask
        if self.having is not None:  # the cells with a row it keeps: few, often (Linear Road: 48 of 1.3M)
            del_mask, ins_mask = self._having(ch)
            kept = np.flatnonzero(del_mask | ins_mask)
            if len(kept) < len(chg):
                chg, del_mask, ins_mask = chg.take(kept), del_mask.take(kept), ins_mask.take(kept)
                old_id, nid = old_id.take(kept), nid.take(kept)
        k = len(chg)
        if not k or not (del_mask.any() or ins_mask.any()):
            return Batch.empty(self.out_types)
        cts = cell_ts if k == len(cell_ts) else cell_ts.take(chg)
        tmin = int(cts.min())
        g = cell_g if k == len(cell_g) else cell_g.take(chg)
        st = self.state  # key values are gathered now: the state's arrays change after this call
        rec = ChangeRows(
            ts=cts - tmin,
            tmin=tmin,
            tmax=int(cts.max()),
            dels=del_mask,
            ins=ins_mask,
            keys=[kvals.take(g) for kvals in st.key_vals],
            key_nulls=[st.key_null(i, g) for i in range(len(st.key_vals))],
            cell=chg,
            old=prevs,
            new=outs,
            old_id=old_id,
            new_id=nid,
        )
        return change_batch(rec)  # laid out in ts order when first read: by the writer thread, if any

    @cached_property
    def having_whole(self) -> bool:
        """The HAVING predicate may be evaluated over every cell's old and new row, emitted or not
        (`_having_whole`): it only compares numeric or boolean columns and constants (no function,
        no arithmetic, no text), so a row that is never emitted — a junk old row of a group that
        did not exist — can neither raise nor run user code. (A cached property: an operator
        pickled before it existed computes it on first use.)"""
        if self.having is None:
            return False
        types = self.out_types

        def total(e: Expr) -> bool:
            if isinstance(e, Const):
                return True
            if isinstance(e, ColRef):
                return types[e.index].kind in _WHOLE_KINDS
            if isinstance(e, Op) and (e.op in COMPARISONS or e.op in _WHOLE_OPS):
                return all(total(a) for a in e.args)
            return False

        return total(self.having)

    def _having(self, ch: Changes) -> tuple[np.ndarray, np.ndarray]:
        """`ch.del_mask` and `ch.ins_mask` kept only where the HAVING predicate is TRUE of the row
        (NULL: false, as a selection): evaluated once, vectorized, over the rows that would be
        emitted — the old rows of the deletes, then the new rows of the inserts. Only the columns
        the predicate reads are gathered (the others stay empty), so the rows it rejects — 1.3M
        of VehPos's in Linear Road, against 48 kept — cost one or two columns, not a whole row."""
        assert self.having is not None
        cell_g, chg, del_mask, ins_mask, outs, prevs = ch.cell_g, ch.chg, ch.del_mask, ch.ins_mask, ch.outs, ch.prevs
        if len(chg) == len(cell_g) and self.having_whole:
            return self._having_whole(ch)
        di, ii = np.flatnonzero(del_mask), np.flatnonzero(ins_mask)
        dc, ic = (di, ii) if len(chg) == len(cell_g) else (chg.take(di), chg.take(ii))  # every cell changes: same
        if not (len(dc) + len(ic)):
            return del_mask, ins_mask
        read = self.having_cols
        n = len(dc) + len(ic)
        nk = len(self.state.key_vals)
        g = cell_g.take(np.concatenate([dc, ic])) if any(j < nk for j in read) else dc[:0]  # groups: for key columns
        cols: list[np.ndarray] = []
        nulls: list[np.ndarray | None] = []
        for j, kv in enumerate(self.state.key_vals):
            cols.append(kv.take(g) if j in read else kv[:0])
            nulls.append(self.state.key_null(j, g) if j in read else None)
        for j, ((v, nl), (pv, pn)) in enumerate(zip(outs, prevs), len(cols)):
            cols.append(np.concatenate([pv.take(dc), v.take(ic)]) if j in read else v[:0])
            nulls.append(np.concatenate([pn.take(dc), nl.take(ic)]) if j in read else None)
        nulls = [None if m is None or not m.any() else m for m in nulls]
        # no instants, signs or ids are read: read-only broadcasts, not three arrays of n
        rows = Batch(cols, nulls, *(np.broadcast_to(dt(v), (n,)) for dt, v in _HAVING_META))
        keep = self.ev.predicate(self.having, rows)
        del_mask, ins_mask = del_mask.copy(), ins_mask.copy()
        del_mask[di] = keep[: len(dc)]
        ins_mask[ii] = keep[len(dc) :]
        return del_mask, ins_mask

    def _having_whole(self, ch: Changes) -> tuple[np.ndarray, np.ndarray]:
        """`_having` when every compared cell is kept (`ch.chg` is all cells) and the predicate
        may see any row (`having_whole`): evaluated over every cell's old row and every cell's new
        row as they are — the cells' own arrays, no positions found, no gathers of the rows to be
        emitted, no scatters back — then and-ed with the masks (VehPos: ~57k cells a call, nearly
        all a `−` or a `+`). Row for row the same predicate on the same values: the same masks."""
        assert self.having is not None
        read = self.having_cols
        n = len(ch.cell_g)
        st = self.state
        nk = len(st.key_vals)
        g = ch.cell_g if any(j < nk for j in read) else ch.cell_g[:0]  # keys: one gather for old and new rows
        kcols = [kv.take(g) if j in read else kv[:0] for j, kv in enumerate(st.key_vals)]
        knulls = [st.key_null(j, g) if j in read else None for j in range(nk)]
        meta = [np.broadcast_to(dt(v), (n,)) for dt, v in _HAVING_META]

        def holds(rows: list[tuple[np.ndarray, np.ndarray]]) -> np.ndarray:
            cols = kcols + [v if j in read else v[:0] for j, (v, _) in enumerate(rows, nk)]
            nulls = knulls + [nl if j in read and nl.any() else None for j, (_, nl) in enumerate(rows, nk)]
            assert self.having is not None
            return self.ev.predicate(self.having, Batch(cols, nulls, *meta))

        return np.logical_and(ch.del_mask, holds(ch.prevs)), np.logical_and(ch.ins_mask, holds(ch.outs))

    # ------------------------------------------------------------ dead groups: reuse, compaction
    def _release(self, dead: np.ndarray) -> None:
        """Groups `dead` (touched by this call, empty after it) are forgotten. Past COMPACT_MIN
        group ids their ids are also reused for new groups (`GroupKeys.release`; the first time,
        every empty group is swept), so keys and state follow the live groups with no renumbering
        pass. Below it ids are never reused: the ids, and with them the order of the rows an
        instant emits, stay those of first discovery."""
        if self.gkeys.n < self.COMPACT_MIN:
            return
        if not self.recycling:
            self.recycling = True
            dead = np.flatnonzero(self.state.totals[ROWS][: self.gkeys.n] <= 0)
        if len(dead):
            self.state.reset(dead)
            self.gkeys.release(dead)

    def _compaction_due(self) -> np.ndarray | None:
        """The live groups when most ids belong to groups that have become empty (then state is
        renumbered: `_compact`), else None."""
        n = self.gkeys.n
        if n < self.COMPACT_MIN:
            return None
        rows = self.state.totals[ROWS][:n]
        if 4 * np.count_nonzero(rows > 0) > n:  # counted first: most batches do not compact
            return None
        return np.flatnonzero(rows > 0)

    def _compact(self, live: np.ndarray) -> None:
        """Renumber groups `live` densely and drop the others, so state follows the live groups,
        not the history of keys (vectorized, amortized O(1))."""
        n = self.gkeys.n
        st = self.state
        kv = [a.take(live) for a in st.key_vals]
        kn = [a.take(live) if seen else None for a, seen in zip(st.key_nulls, st.null_keys)]
        fresh, newg = self.gkeys.compacted(live, kv, [None if m is None or not m.any() else m for m in kn])
        remap = np.full(n, -1, np.int64)
        remap[live] = newg
        # capacity: up to 8x the live groups, as much as the arrays had (they just held n ids), so the
        # batches after a compaction do not grow them again and again (Linear Road's SMVAvgRel did
        # 2–3 doubling copies of every array between compactions); memory stays O(live groups)
        st.compact(live, newg, max(fresh.n, 16, min(st.cap, 8 * fresh.n)))
        fresh.adopt_fifo(self.gkeys, remap)
        self.gkeys = fresh
        self.recycling = False
        for ms in self.ms.values():
            ms.remap(remap)
        for s in self.stateful:
            s.remap(remap)

    # operator protocol
    @classmethod
    def from_node(cls, node: Plan, ctx: BuildContext) -> Self:
        assert isinstance(node, L.Aggregate)
        return cls(
            ctx.inputs,
            ctx.output,
            ctx.ids,
            node.keys,
            node.aggs,
            ctx.ev,
            compat=ctx.options.compat,
            having=node.having,
            retracts=not node.input.monotonic,
        )

    def snapshot(self, at: int, inputs: Callable[[], list[Batch] | None]) -> Batch | None:
        return self.current_rows(at)

    def snapshotable(self, inputs: Callable[[], bool]) -> bool:
        return True

    @classmethod
    def state_class(cls, node: Plan, kids: list[int]) -> tuple[int, list[tuple[int, str]]]:
        """A scalar count/sum/avg keeps O(1) state; otherwise state grows with the input's
        relation; the output of a grouped aggregate is as large as its input's."""
        from cqlstream.engine.operators.base import BOUNDED

        assert isinstance(node, L.Aggregate)
        worst = max(kids[:1], default=BOUNDED)  # a probe (kids[1]) only gives instants: nothing is kept of it
        scalar_o1 = not node.keys and all(
            a.func.lower() in ("count", "sum", "avg") and not a.distinct for a in node.aggs
        )
        return (BOUNDED if not node.keys else worst), [(BOUNDED if scalar_o1 else worst, "aggregate state")]
