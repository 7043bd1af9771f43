"""Semijoin / anti-semijoin of relations (IN, NOT IN, EXISTS, NOT EXISTS subqueries).

Output: the left instances (same ids, same columns) that have ≥ 1 right partner making the
predicate TRUE (anti: none). With `null_aware` (NOT IN, docs/semantics.md) an anti semijoin also
drops a left row while some right row makes the predicate UNKNOWN, i.e. a left row qualifies iff
every right row makes the predicate FALSE; we count "not false" partners instead of true ones
(a conjunction is not false iff no conjunct is false).

The call's events are ordered as in the join (ts, input index — left before right —, arrival),
and each left instance x has an alive interval (lo, hi) of positions (engine.operators.join).
Let c_x(s) be x's partner count at position s. x is in the output while alive and q(c_x) holds
(semi: c > 0, anti: c = 0); we emit `+`/`−` with x's id where that changes: at x's insert, at x's
delete, and at right events that move c_x across 0. Emissions are ordered by the position of the
event causing them, so an instance's `+`/`−` alternate.

Fast path (predicate = equi conjuncts only, plus conjuncts on one side, TRUE semantics): c_x(s) is
the number N_k(s) of alive right rows with x's key k. Right deltas (carried rows as +1 at position
−1, then the signed events) are sorted by (key, position); a cumulative sum per key gives N before
and after each event, and only events where N_k crosses 0 touch left rows: those probe the left
instances alive there with key k (engine.operators.join.StabIndex). No state beyond the two
relations.

General path (theta conjuncts, or NOT IN): explicit pairs. New left instances probe the right
instances alive at their insert (count c0 = bincount of surviving pairs); right events probe the
left instances alive at them (a ±1 delta per surviving pair); per left instance the deltas are
sorted by position and summed cumulatively from c0 (or the carried count). NOT IN's NULL keys are
wildcards: a row with a NULL in a compared column is paired with every row of the other side (a
cross product, proportional to the NULL rows; candidates are then checked by evaluating the
conjuncts), others by key.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Self

import numpy as np

from cqlstream.cql.logical import expr as X
from cqlstream.cql.logical import nodes as L
from cqlstream.cql.logical.nodes import Plan
from cqlstream.engine.batch import Batch
from cqlstream.engine.operators.base import BuildContext, IdSource, Operator, held_state
from cqlstream.engine.operators.join import (
    INF,
    Keyed,
    StabIndex,
    Table,
    classify,
    combine_keys,
    gather_batch,
    global_seqs,
    key_codes,
)
from cqlstream.engine.queues import Queue

if TYPE_CHECKING:
    from cqlstream.engine.exprs import Evaluator
    from cqlstream.engine.planner import EngineOptions


# a call's emissions: (left rows, seq, sign, partner count of each left instance at its end or None)
Emitted = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray | None]


class SemiJoinOp(Operator):
    kind = "semijoin"

    def __init__(
        self,
        inputs: list[Queue],
        output: Queue,
        ids: IdSource,
        predicate: X.Expr,
        left_width: int,
        anti: bool,
        null_aware: bool,
        evaluator: Evaluator,
        options: EngineOptions | None = None,
    ) -> None:
        super().__init__(inputs, output, ids, options)
        self.ev = evaluator
        self.anti = anti
        self.nonfalse = bool(anti and null_aware)  # count partners that do not make the predicate FALSE
        self.ltypes = list(inputs[0].types)
        self.rtypes = list(inputs[1].types)
        self.offsets = [0, left_width]
        self.widths = [left_width, len(self.rtypes)]
        self.width = left_width + len(self.rtypes)
        self.equi, self.const, self.local, theta = classify(predicate, self.offsets, self.widths)
        self.theta = [c for c, _ in theta]
        for eq in self.equi:
            if eq.a != 0:  # left side first
                eq.a, eq.ea, eq.b, eq.eb = eq.b, eq.eb, eq.a, eq.ea
        cids = {eq.cid for eq in self.equi}
        self.equi_exprs = [c for cid, c in enumerate(X.conjuncts(predicate)) if cid in cids]
        self.fast = not self.nonfalse and not self.theta
        self.lstate = Batch.empty(self.ltypes)
        self.lelig = np.zeros(0, bool)  # per left state row: can it have partners at all
        self.lcount = np.zeros(0, np.int64)  # per left state row: partner count (general path)
        self.rstate = Batch.empty(self.rtypes)
        self.counters.extra.update(state_tuples=0, candidate_pairs=0, unmatched_deletes=0)

    def state_bytes(self) -> int:
        return self.lstate.nbytes() + self.rstate.nbytes() + self.lelig.nbytes + self.lcount.nbytes

    @classmethod
    def from_node(cls, node: Plan, ctx: BuildContext) -> Self:
        assert isinstance(node, L.SemiJoin)
        return cls(
            ctx.inputs, ctx.output, ctx.ids, node.predicate, len(node.left.schema), node.anti, node.null_aware, ctx.ev
        )

    @classmethod
    def state_class(cls, node: Plan, kids: list[int]) -> tuple[int, list[tuple[int, str]]]:
        return kids[0], held_state(node, kids)[1]  # its output is a part of its left input

    # -------------------------------------------------------------- helpers
    def _holds(self, c: X.Expr, b: Batch) -> np.ndarray:
        """TRUE (or, for NOT IN, not FALSE) per row."""
        v, m = self.ev.eval(c, b)
        v = v.astype(bool, copy=False)
        if m is None:
            return v
        return (v | m) if self.nonfalse else (v & ~m)

    def _const_ok(self) -> bool:
        one = Batch([], [], np.zeros(1, np.int64), np.ones(1, np.int8), np.zeros(1, np.uint64))
        return all(bool(self._holds(c, one)[0]) for c in self.const)

    def _q(self, c: np.ndarray) -> np.ndarray:
        return (c == 0) if self.anti else (c > 0)

    def _keys(self, tl: Table, tr: Table) -> tuple[Keyed, Keyed]:
        """(key, valid) for every row of both tables; valid = no NULL/NaN in a compared value."""
        if not self.equi:
            return (
                (np.zeros(len(tl.b), np.int64), np.ones(len(tl.b), bool)),
                (np.zeros(len(tr.b), np.int64), np.ones(len(tr.b), bool)),
            )
        lp: list[Keyed] = []
        rp: list[Keyed] = []
        for e in self.equi:
            (cl, okl, _), (cr, okr, _) = key_codes([self.ev.eval(e.ea, tl.b), self.ev.eval(e.eb, tr.b)])
            lp.append((cl, okl))
            rp.append((cr, okr))
        return combine_keys(lp, rp)

    # -------------------------------------------------------------- one call
    def process(self, inputs: list[Batch], bound: int) -> Batch:
        lb, rb = inputs
        if not len(lb) and not len(rb):
            return Batch.empty(self.ltypes)
        # right rows failing a right-only conjunct never count; left ones just never have partners
        const_ok = self._const_ok()
        if not const_ok:
            rb = rb.take(np.zeros(len(rb), bool))
        for c in self.local[1]:
            if len(rb):
                rb = rb.take(self._holds(c, rb))
        lelig_ev = np.full(len(lb), const_ok)
        for c in self.local[0]:
            if len(lb):
                lelig_ev &= self._holds(c, lb)
        (ls, rs), total = global_seqs([lb, rb])
        m = total + 3
        tl = Table(self.lstate, lb, ls, self.ltypes)
        tr = Table(self.rstate, rb, rs, self.rtypes)
        lelig = np.concatenate([self.lelig, lelig_ev])
        (lkey, lvalid), (rkey, rvalid) = self._keys(tl, tr)
        if self.fast:
            rows, seq, sign, c_end = self._fast(tl, tr, lelig & lvalid, lkey, rkey, rvalid, m)
        else:
            rows, seq, sign, c_end = self._general(tl, tr, lelig, lkey, lvalid, rkey, rvalid, m)
        # state
        surv = tl.hi == INF
        self.lstate = tl.b.take(tl.survivors)
        self.lelig = lelig[tl.survivors]
        self.lcount = c_end[surv] if c_end is not None else np.zeros(len(tl.survivors), np.int64)
        self.rstate = tr.b.take(tr.survivors)
        x = self.counters.extra
        x["unmatched_deletes"] += tl.unmatched_deletes + tr.unmatched_deletes
        x["state_tuples"] = len(self.lstate) + len(self.rstate)
        if not len(rows):
            return Batch.empty(self.ltypes)
        order = np.argsort(seq, kind="stable")
        rows, seq, sign = rows[order], seq[order], sign[order]
        out = tl.b.take(rows)
        out.ts = _seq_ts(seq, tl, tr)
        out.sign = sign.astype(np.int8)
        return out

    def _boundary(self, tl: Table, q_start: np.ndarray, q_end: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Emissions at left inserts (q at insert) and left deletes (q just before the delete)."""
        new = (tl.lo >= 0) & q_start
        gone = (tl.hi != INF) & q_end
        rows = np.concatenate([tl.inst[new], tl.inst[gone]])
        seq = np.concatenate([tl.lo[new], tl.hi[gone]])
        sign = np.concatenate([np.ones(int(new.sum()), np.int64), -np.ones(int(gone.sum()), np.int64)])
        return rows, seq, sign

    # -------------------------------------------------------------- fast path: counts per key
    def _fast(
        self, tl: Table, tr: Table, lok: np.ndarray, lkey: np.ndarray, rkey: np.ndarray, rvalid: np.ndarray, m: int
    ) -> Emitted:
        # right deltas: carried rows +1 at −1, events ±1 at their positions (valid keys only)
        ns = tr.n_state
        d_rows = np.concatenate([np.arange(ns), tr.ev])
        d_rows = d_rows[rvalid[d_rows]]
        d_key = rkey[d_rows]
        d_seq = tr.seq[d_rows]
        d_delta = np.where(d_rows < ns, 1, tr.b.sign[d_rows].astype(np.int64))
        order = np.lexsort((d_seq, d_key))
        d_key, d_seq, d_delta = d_key[order], d_seq[order], d_delta[order]
        n = len(d_key)
        if n:
            new = np.empty(n, bool)
            new[0] = True
            np.not_equal(d_key[1:], d_key[:-1], out=new[1:])
            rank = np.cumsum(new) - 1
            uniq = d_key[new]
            cum = np.cumsum(d_delta)
            base = (cum - d_delta)[new]  # running total before each key group
            after = cum - base[rank]
        else:
            rank = after = np.zeros(0, np.int64)
            uniq = np.zeros(0, np.int64)
        before = after - d_delta
        comp = rank * m + d_seq + 1

        def n_at(key: np.ndarray, s: np.ndarray) -> np.ndarray:
            if not len(uniq):
                return np.zeros(len(key), np.int64)
            r = np.searchsorted(uniq, key)
            rc = np.minimum(r, len(uniq) - 1)
            pos = np.searchsorted(comp, rc * m + s + 1, side="left") - 1
            posc = np.maximum(pos, 0)
            ok = (uniq[rc] == key) & (pos >= 0) & (rank[posc] == rc)
            return np.where(ok, after[posc], 0)

        # left instances: boundary emissions
        ok = lok[tl.inst]
        ikey = lkey[tl.inst]
        n_lo = np.where(ok & (tl.lo >= 0), n_at(ikey, tl.lo), 0)
        n_hi = np.where(ok & (tl.hi != INF), n_at(ikey, np.minimum(tl.hi, m)), 0)
        rows, seq, sign = self._boundary(tl, self._q(n_lo), self._q(n_hi))
        # right events where N_k crosses 0 touch the left instances of key k alive there
        flip = (d_seq >= 0) & ((before > 0) != (after > 0))
        if flip.any():
            f_key, f_seq = d_key[flip], d_seq[flip]
            f_dir = np.where(after[flip] > 0, 1, -1) * (-1 if self.anti else 1)
            index = StabIndex(tl.inst[ok], ikey[ok], tl.lo[ok], tl.hi[ok], m)
            p, lrows = index.probe(f_key, np.ones(len(f_key), bool), f_seq)
            self.counters.extra["candidate_pairs"] += len(p)
            rows = np.concatenate([rows, lrows])
            seq = np.concatenate([seq, f_seq[p]])
            sign = np.concatenate([sign, f_dir[p]])
        return rows, seq, sign, None

    # -------------------------------------------------------------- general path: explicit pairs
    def _pairs(
        self,
        inst_rows: np.ndarray,
        inst_key: np.ndarray,
        inst_valid: np.ndarray,
        lo: np.ndarray,
        hi: np.ndarray,
        probe_key: np.ndarray,
        probe_valid: np.ndarray,
        probe_seq: np.ndarray,
        m: int,
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Candidate pairs (probe position, instance row): equal valid keys; with NOT IN also every
        pair where one side has a NULL compared value (checked later by evaluating the equi
        conjuncts). Returns (p, rows, wild) with wild marking the latter."""
        ps: list[np.ndarray] = []
        rs: list[np.ndarray] = []
        ws: list[np.ndarray] = []
        iv = inst_valid
        index = StabIndex(inst_rows[iv], inst_key[iv], lo[iv], hi[iv], m)
        p, r = index.probe(probe_key, probe_valid, probe_seq)
        ps.append(p)
        rs.append(r)
        ws.append(np.zeros(len(p), bool))
        if self.nonfalse and self.equi:
            zero_p = np.zeros(len(probe_seq), np.int64)
            # valid probes × wild instances
            wi = ~iv
            if wi.any():
                idx = StabIndex(inst_rows[wi], np.zeros(int(wi.sum()), np.int64), lo[wi], hi[wi], m)
                p, r = idx.probe(zero_p, probe_valid, probe_seq)
                ps.append(p)
                rs.append(r)
                ws.append(np.ones(len(p), bool))
            # wild probes × all instances
            if (~probe_valid).any():
                idx = StabIndex(inst_rows, np.zeros(len(inst_rows), np.int64), lo, hi, m)
                p, r = idx.probe(zero_p, ~probe_valid, probe_seq)
                ps.append(p)
                rs.append(r)
                ws.append(np.ones(len(p), bool))
        p, r, w = np.concatenate(ps), np.concatenate(rs), np.concatenate(ws)
        self.counters.extra["candidate_pairs"] += len(p)
        return p, r, w

    def _check(self, tl: Table, tr: Table, lrows: np.ndarray, rrows: np.ndarray, wild: np.ndarray) -> np.ndarray:
        """Pairs surviving the theta conjuncts (and, for wild pairs, the equi conjuncts)."""
        keep = np.ones(len(lrows), bool)
        if not len(lrows):
            return keep
        tables = [tl, tr]
        checks: list[tuple[X.Expr, np.ndarray | None]] = [(c, None) for c in self.theta] + [
            (c, wild) for c in self.equi_exprs if wild.any()
        ]
        for c, only in checks:
            sel = keep if only is None else (keep & only)
            if not sel.any():
                continue
            pos = np.flatnonzero(sel)
            b = gather_batch(
                self.width,
                sorted(X.columns(c)),
                self.offsets,
                self.widths,
                tables,
                {0: lrows[pos], 1: rrows[pos]},
                np.zeros(len(pos), np.int64),
            )
            keep[pos[~self._holds(c, b)]] = False
        return keep

    def _general(
        self,
        tl: Table,
        tr: Table,
        lelig: np.ndarray,
        lkey: np.ndarray,
        lvalid: np.ndarray,
        rkey: np.ndarray,
        rvalid: np.ndarray,
        m: int,
    ) -> Emitted:
        ninst = len(tl.inst)
        # partner counts of the new left instances at their insert
        c_start = np.zeros(ninst, np.int64)
        c_start[tl.lo < 0] = self.lcount[_state_pos(tl)]
        newi = np.flatnonzero((tl.lo >= 0) & lelig[tl.inst])
        if len(newi) and len(tr.inst):
            lr = tl.inst[newi]
            p, rr, wild = self._pairs(
                tr.inst, rkey[tr.inst], rvalid[tr.inst], tr.lo, tr.hi, lkey[lr], lvalid[lr], tl.lo[newi], m
            )
            keep = self._check(tl, tr, lr[p], rr, wild)
            c_start[newi] = np.bincount(p[keep], minlength=len(newi))
        # deltas: right events against the left instances alive there
        elig_i = np.flatnonzero(lelig[tl.inst])
        d_x = np.zeros(0, np.int64)
        d_seq = d_sign = d_x
        if len(tr.ev) and len(elig_i):
            er = tr.ev
            li = tl.inst[elig_i]
            p, lrows, wild = self._pairs(
                li, lkey[li], lvalid[li], tl.lo[elig_i], tl.hi[elig_i], rkey[er], rvalid[er], tr.seq[er], m
            )
            keep = self._check(tl, tr, lrows, er[p], wild)
            p, lrows = p[keep], lrows[keep]
            d_x = np.searchsorted(tl.inst, lrows)  # instance position (tl.inst is ascending)
            d_seq = tr.seq[er][p]
            d_sign = tr.b.sign[er][p].astype(np.int64)
        order = np.lexsort((d_seq, d_x))
        d_x, d_seq, d_sign = d_x[order], d_seq[order], d_sign[order]
        total = np.bincount(d_x, weights=d_sign, minlength=ninst).astype(np.int64)
        c_end = c_start + total
        rows, seq, sign = self._boundary(tl, self._q(c_start), self._q(c_end))
        if len(d_x):
            cum = np.cumsum(d_sign)
            first = np.r_[True, d_x[1:] != d_x[:-1]]
            base = (cum - d_sign)[first]
            grp = np.cumsum(first) - 1
            after = c_start[d_x] + cum - base[grp]
            before = after - d_sign
            qa, qb = self._q(after), self._q(before)
            flip = qa != qb
            rows = np.concatenate([rows, tl.inst[d_x[flip]]])
            seq = np.concatenate([seq, d_seq[flip]])
            sign = np.concatenate([sign, np.where(qa[flip], 1, -1)])
        return rows, seq, sign, c_end


def _state_pos(tl: Table) -> np.ndarray:
    """For the carried instances (lo = −1, rows < n_state), their state row = their table row."""
    return tl.inst[tl.lo < 0]


def _seq_ts(seq: np.ndarray, tl: Table, tr: Table) -> np.ndarray:
    """ts of the events at global positions `seq` (every seq here is an event of either side)."""
    allseq = np.concatenate([tl.seq[tl.n_state :], tr.seq[tr.n_state :]])
    allts = np.concatenate([tl.b.ts[tl.n_state :], tr.b.ts[tr.n_state :]])
    ts = np.empty(len(allseq), np.int64)
    ts[allseq] = allts
    return ts[seq]
