"""Constant-size synopsis evaluation of a bounded join of several streams read whole (the execution
strategies of the bounded-memory characterization, docs/bounded-memory.md): duplicate-preserving
(π̃, buckets with a first tuple and a count) and duplicate-eliminating (π, buckets with at most two
representative tuples, plus the set of results emitted so far).

Per stream it keeps buckets: a tuple's bucket places each of its referenced attributes below, at
each integer between, or above the query's smallest and largest constants (so a bounded attribute's
bucket is its value). For a query the characterization judges bounded, tuples in one bucket are
interchangeable in every join, so a bucket keeps its first tuple and a count. When every attribute
a stream's joins and result read is bounded, the bucket is just those attributes' values (the
per-value counts of Theorem 5.6's proof). An arriving batch is filtered by its stream's filters in
P⁺ (implied ones too: a tuple failing one must not be counted), reduced to its distinct buckets,
joined with the other streams' buckets (P evaluated on the representatives over the product of the
bucket tables), each result emitted with multiplicity count × the product of the others' counts,
and then counted into its stream's table. Work per batch is numpy over the rows plus numpy over the
bounded product of bucket tables; memory never depends on the input's length.

Under duplicate elimination tuples of one bucket are not interchangeable, but one or two of them
stand for all: in each bucket b, with MaxRef(S, b) / MinRef(S, b) the stream's unbounded attributes
on the greater / smaller side of a nonredundant inequality join once the bucket's ranges are added
to P, the tuple with the largest minimum over MaxRef(S, b) joins every tuple of the other streams
any tuple of b joins through those predicates (and likewise the smallest maximum over MinRef), and
the bounded attributes that decide every other predicate are equal across b. A bucket with both
sets empty keeps its first tuple. Each batch is reduced to its candidates per bucket, joined, the
results not emitted before are emitted once, and the candidates merged into the stored ones.

`SynopsisJoin` runs one query over pushed batches; the physical operator built on it is
engine/operators/synopsis_join.py, which the planner uses for queries judged bounded.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from cqlstream.cql.boundedness import Decision, decide
from cqlstream.cql.boundedness.closure import Atom, Closure, Elem
from cqlstream.cql.boundedness.from_plan import normal_form
from cqlstream.cql.boundedness.lto import refs
from cqlstream.cql.boundedness.normal_form import Occurrence, Spj
from cqlstream.cql.boundedness.theorems import decide as decide_normal_form
from cqlstream.cql.logical.nodes import Plan

_OPS = {"<": np.less, "=": np.equal}


@dataclass
class _Table:
    """One stream's synopsis: keys (bucket codes), representatives, counts (π̃: tuples in the
    bucket; π: unused, 1). Under π a bucket may hold two rows (two representatives)."""

    occ: Occurrence
    index: int  # the occurrence's position in the query
    cols: list[int]  # attribute numbers stored, in order
    positions: list[int]  # their column positions in the stream's rows
    bucketed: bool  # False: every stored attribute is bounded, the key is the values themselves
    filters: list[Atom]  # the stream's filters in P⁺
    keys: np.ndarray
    reps: np.ndarray
    counts: np.ndarray
    # π: bucket key → (columns of MaxRef(S, b), columns of MinRef(S, b)), computed on first use
    extremes: dict[tuple[int, ...], tuple[list[int], list[int]]] = field(default_factory=dict)


def applicable(plan: Plan) -> Spj | None:
    """The query's normal form when the synopsis join evaluates it: a select-project-join of
    several stream occurrences, π̃ or π, judged bounded by the characterization with a satisfiable
    predicate (None otherwise)."""
    q = normal_form(plan)
    if not isinstance(q, Spj) or len(q.occurrences) < 2:
        return None
    d = decide(plan)
    if not (isinstance(d, Decision) and d.bounded) or Closure.of(q.n_attrs, list(q.atoms)) is None:
        return None
    return q


class SynopsisJoin:
    """A bounded π̃ or π query over several streams, evaluated with constant-size synopses.
    `push(stream, rows)` returns the new results as (distinct result tuples, multiplicities); under
    π every multiplicity is 1 and no result is returned twice over the synopsis's life."""

    def __init__(self, plan: Plan | Spj) -> None:
        """`plan`: a logical plan, or directly the normal form (the synopsis aggregate passes the
        join projected on its grouping attributes, duplicates kept)."""
        q = plan if isinstance(plan, Spj) else normal_form(plan)
        if not isinstance(q, Spj) or len(q.occurrences) < 2:
            raise ValueError("the synopsis join evaluates select-project-joins of several streams")
        verdict = decide_normal_form(q) if isinstance(plan, Spj) else decide(plan)
        if not (isinstance(verdict, Decision) and verdict.bounded):
            raise ValueError(f"not bounded-memory computable: {getattr(verdict, 'reason', verdict)}")
        c = Closure.of(q.n_attrs, list(q.atoms))
        if c is None:
            raise ValueError("the predicate can never hold: the result is empty")
        self.q, self.c = q, c
        self.distinct = q.distinct
        ks = q.constants()
        self.lo, self.hi = (ks[0] - 1, ks[-1] + 1) if ks else (0, 0)
        self.cross = [a for a in q.atoms if not a.left.is_const and not a.right.is_const and _cross(q, a)]
        self.tables = [self._table(k, o) for k, o in enumerate(q.occurrences)]
        # π: the results emitted so far (bounded: every projected attribute is)
        self.emitted = np.zeros((0, len(q.projected)), dtype=np.int64)
        self.verdict = verdict

    def _table(self, index: int, o: Occurrence) -> _Table:
        q, c = self.q, self.c
        refs_ = set(q.referenced())
        kept = [i for i in o.attrs if i in q.joined() or i in q.projected]
        exact = all(c.bounded(i) for i in kept)
        cols = kept if exact else [i for i in o.attrs if i in refs_]
        elems = [Elem(i) for i in o.attrs if i in refs_] + [Elem(0, k) for k in q.constants()]
        filters = []
        for x, a in enumerate(elems):
            for b in elems[x + 1 :]:
                if a.is_const and b.is_const:
                    continue
                for atom in (Atom("<", a, b), Atom("=", a, b), Atom("<", b, a)):
                    if (c.lt if atom.op == "<" else c.eq)(atom.left, atom.right):
                        filters.append(atom)
        empty = np.zeros((0, len(cols)), dtype=np.int64)
        pos = [o.attrs.index(i) for i in cols]
        return _Table(o, index, cols, pos, not exact, filters, empty, empty, np.zeros(0, dtype=np.int64))

    @property
    def columns(self) -> list[list[int]]:
        """Per occurrence, the positions of the stream's columns the synopsis reads (the others
        may hold anything, e.g. zeros for columns that are not integers)."""
        return [sorted({o.attrs.index(i) for i in o.attrs if i in self.q.referenced()}) for o in self.q.occurrences]

    def units(self) -> int:
        """Memory held in the paper's units: each stored value and each count is one."""
        if self.distinct:
            return sum(t.reps.size for t in self.tables) + self.emitted.size
        return sum(t.counts.size * (len(t.cols) + 1) for t in self.tables)

    def entries(self) -> int:
        return sum(t.counts.size for t in self.tables)

    def nbytes(self) -> int:
        """Bytes of the arrays held."""
        return sum(t.keys.nbytes + t.reps.nbytes + t.counts.nbytes for t in self.tables) + self.emitted.nbytes

    def push(self, stream: str, rows: np.ndarray, nulls: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """New results for a batch of `stream`'s tuples (rows × the stream's columns, integers;
        `nulls` marks NULLs: each occurrence drops the rows with a NULL in a column it reads)."""
        outs, mults = [], []
        rows = np.asarray(rows, dtype=np.int64).reshape(len(rows), -1)
        for i, t in enumerate(self.tables):
            if t.occ.stream == stream:
                mine = rows
                read = self.columns[i]
                if nulls is not None and read:
                    mine = rows[~nulls[:, read].any(axis=1)]
                o, m = self._arrive(i, mine)
                outs.append(o)
                mults.append(m)
        if not outs:
            return np.zeros((0, len(self.q.projected)), dtype=np.int64), np.zeros(0, dtype=np.int64)
        res, mult = _merge(np.concatenate(outs), np.concatenate(mults))
        if self.distinct:
            res = self._new_results(res)
            mult = np.ones(len(res), dtype=np.int64)
        return res, mult

    def _new_results(self, res: np.ndarray) -> np.ndarray:
        """π: the distinct results not emitted before, remembered as emitted."""
        if not len(res):
            return res
        if len(self.emitted):
            both = np.concatenate([self.emitted, res])
            _, first = np.unique(both, axis=0, return_index=True)
            res = both[np.sort(first[first >= len(self.emitted)])]
        self.emitted = np.concatenate([self.emitted, res])
        return res

    def _arrive(self, i: int, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        t = self.tables[i]
        values = {a: rows[:, k] for k, a in enumerate(t.occ.attrs)}
        keep = np.ones(len(rows), dtype=bool)
        for f in t.filters:
            keep &= _OPS[f.op](_value(f.left, values), _value(f.right, values))
        stored = rows[keep][:, t.positions]
        keys = np.clip(stored, self.lo, self.hi) if t.bucketed else stored
        if self.distinct:
            keys, reps = self.representatives(t, keys, stored)
            counts = np.ones(len(keys), dtype=np.int64)
        else:
            keys, first, counts = np.unique(keys, axis=0, return_index=True, return_counts=True)
            reps = stored[first]
        out = self._join(i, reps, counts)
        if self.distinct:
            t.keys, t.reps = self.representatives(t, np.concatenate([t.keys, keys]), np.concatenate([t.reps, reps]))
            t.counts = np.ones(len(t.keys), dtype=np.int64)
        else:
            self._add(t, keys, reps, counts)
        return out

    def bucket_refs(self, t: _Table, key: tuple[int, ...]) -> tuple[list[int], list[int]]:
        """Columns (of t's stored ones) of MaxRef(S, b) and MinRef(S, b) for the bucket `key`:
        judged in P plus the bucket's ranges (`A < kmin`, `A = k`, `A > kmax`)."""
        got = t.extremes.get(key)
        if got is None:
            got = t.extremes[key] = self.refs_within(t, dict(zip(t.cols, key)) if t.bucketed else {})
        return got

    def refs_within(self, t: _Table, ranges: dict[int, int]) -> tuple[list[int], list[int]]:
        """Columns (of t's stored ones) of MaxRef(S, b) and MinRef(S, b) when the attributes in
        `ranges` lie in the given bucket ranges (self.lo: below the constants, self.hi: above,
        else equal to the value) and the others anywhere; both empty when that cannot hold (the
        bucket's tuples never join, so any one stands for them)."""
        cb: Closure | None = self.c
        for col, v in ranges.items():
            if cb is None:
                break
            e = Elem(col)
            if v == self.lo:
                cb = cb.add(Atom("<", e, Elem(0, v + 1)))
            elif v == self.hi:
                cb = cb.add(Atom("<", Elem(0, v - 1), e))
            else:
                cb = cb.add(Atom("=", e, Elem(0, v)))
        if cb is None:
            return [], []
        r = refs(self.q, cb)[t.index]
        return [t.cols.index(a) for a in r.max_ref], [t.cols.index(a) for a in r.min_ref]

    def representatives(self, t: _Table, keys: np.ndarray, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Per bucket, the rows that stand for all of rows' in it (earlier rows win ties): the
        largest minimum over MaxRef(S, b), the smallest maximum over MinRef(S, b), else the first."""
        if not len(keys):
            return keys, rows
        uk, inverse = np.unique(keys, axis=0, return_inverse=True)
        inverse = inverse.ravel()
        order = np.argsort(inverse, kind="stable")
        bounds = np.searchsorted(inverse[order], np.arange(len(uk) + 1))
        pick: list[int] = []
        for g in range(len(uk)):
            idx = order[bounds[g] : bounds[g + 1]]
            hi_cols, lo_cols = self.bucket_refs(t, tuple(int(v) for v in uk[g]))
            chosen = []
            if hi_cols:
                chosen.append(int(idx[np.argmax(rows[idx][:, hi_cols].min(axis=1))]))
            if lo_cols:
                chosen.append(int(idx[np.argmin(rows[idx][:, lo_cols].max(axis=1))]))
            pick.extend(dict.fromkeys(chosen or [int(idx[0])]))
        sel = np.array(pick, dtype=np.int64)
        return keys[sel], rows[sel]

    def _join(self, i: int, reps: np.ndarray, counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Results of the new buckets of stream i with every combination of the others' buckets."""
        sides = [(reps, counts) if k == i else (t.reps, t.counts) for k, t in enumerate(self.tables)]
        grids = np.meshgrid(*[np.arange(len(cnt)) for _, cnt in sides], indexing="ij")
        idx = [g.ravel() for g in grids]
        values: dict[int, np.ndarray] = {}
        mult = np.ones(idx[0].size if idx else 0, dtype=np.int64)
        for k, (t, (rp, cnt)) in enumerate(zip(self.tables, sides)):
            for col, attr in enumerate(t.cols):
                values[attr] = rp[idx[k], col]
            mult = mult * cnt[idx[k]]
        ok = np.ones(mult.size, dtype=bool)
        for a in self.cross:
            ok &= _OPS[a.op](_value(a.left, values), _value(a.right, values))
        if not self.q.projected:  # e.g. SELECT 1: only the multiplicities matter
            return np.zeros((int(ok.sum()), 0), dtype=np.int64), mult[ok]
        return np.stack([values[p][ok] for p in self.q.projected], axis=1), mult[ok]

    def _add(self, t: _Table, keys: np.ndarray, reps: np.ndarray, counts: np.ndarray) -> None:
        """Count the new buckets into t (a bucket seen before keeps its first tuple)."""
        allk = np.concatenate([t.keys, keys])
        allr = np.concatenate([t.reps, reps])
        allc = np.concatenate([t.counts, counts])
        t.keys, first, inverse = np.unique(allk, axis=0, return_index=True, return_inverse=True)
        t.reps = allr[first]
        t.counts = np.bincount(inverse.ravel(), weights=allc, minlength=len(first)).astype(np.int64)


def _cross(q: Spj, a: Atom) -> bool:
    return q.owner(a.left.attr) != q.owner(a.right.attr)


def _value(e: Elem, values: dict[int, np.ndarray]) -> np.ndarray | int:
    return e.value if e.is_const else values[e.attr]


def _merge(rows: np.ndarray, mults: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Equal result tuples merged, their multiplicities added."""
    if rows.shape[0] == 0:
        return rows, mults
    uniq, inverse = np.unique(rows, axis=0, return_inverse=True)
    return uniq, np.bincount(inverse.ravel(), weights=mults, minlength=len(uniq)).astype(np.int64)
