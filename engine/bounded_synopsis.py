"""Constant-size synopsis evaluation of a bounded duplicate-preserving join (the execution strategy
of the bounded-memory characterization, docs/bounded-memory.md), for streams read whole.

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

Not wired into the planner: `SynopsisJoin` runs one query over pushed batches (tests compare it with
the reference evaluator and measure its memory on long inputs).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from cqlstream.cql.boundedness import Decision, decide
from cqlstream.cql.boundedness.closure import Atom, Closure, Elem
from cqlstream.cql.boundedness.from_plan import normal_form
from cqlstream.cql.boundedness.normal_form import Occurrence, Spj
from cqlstream.cql.logical.nodes import Plan

_OPS = {"<": np.less, "=": np.equal}


@dataclass
class _Table:
    """One stream's synopsis: keys (bucket codes), representatives (first tuples), counts."""

    occ: Occurrence
    cols: list[int]  # attribute numbers stored, in order
    positions: list[int]  # their column positions in the stream's rows
    bucketed: bool  # False: every stored attribute is bounded, the key is the values themselves
    filters: list[Atom]  # the stream's filters in P⁺
    keys: np.ndarray
    reps: np.ndarray
    counts: np.ndarray


class SynopsisJoin:
    """A bounded π̃ query over several streams, evaluated with constant-size synopses. `push(stream,
    rows)` returns the new results as (distinct result tuples, multiplicities)."""

    def __init__(self, plan: Plan) -> None:
        q = normal_form(plan)
        verdict = decide(plan)
        if not isinstance(q, Spj) or q.distinct or len(q.occurrences) < 2:
            raise ValueError("the synopsis join evaluates duplicate-preserving joins of several streams")
        if not (isinstance(verdict, Decision) and verdict.bounded):
            raise ValueError(f"not bounded-memory computable: {getattr(verdict, 'reason', verdict)}")
        c = Closure.of(q.n_attrs, list(q.atoms))
        assert c is not None  # a satisfiable P (an unsatisfiable one is bounded but not worth a join)
        self.q, self.c = q, c
        ks = q.constants()
        self.lo, self.hi = (ks[0] - 1, ks[-1] + 1) if ks else (0, 0)
        self.cross = [a for a in q.atoms if not a.left.is_const and not a.right.is_const and _cross(q, a)]
        self.tables = [self._table(o) for o in q.occurrences]

    def _table(self, o: Occurrence) -> _Table:
        q, c = self.q, self.c
        refs = set(q.referenced())
        kept = [i for i in o.attrs if i in q.joined() or i in q.projected]
        exact = all(c.bounded(i) for i in kept)
        cols = kept if exact else [i for i in o.attrs if i in refs]
        elems = [Elem(i) for i in o.attrs if i in refs] + [Elem(0, k) for k in q.constants()]
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
        return _Table(o, cols, pos, not exact, filters, empty, empty, np.zeros(0, dtype=np.int64))

    def units(self) -> int:
        """Memory held in the paper's units: each stored value and each count is one."""
        return sum(t.counts.size * (len(t.cols) + 1) for t in self.tables)

    def entries(self) -> int:
        return sum(t.counts.size for t in self.tables)

    def push(self, stream: str, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """New results for a batch of `stream`'s tuples (rows × the stream's columns, integers)."""
        outs, mults = [], []
        for i, t in enumerate(self.tables):
            if t.occ.stream == stream:
                o, m = self._arrive(i, np.asarray(rows, dtype=np.int64).reshape(len(rows), -1))
                outs.append(o)
                mults.append(m)
        if not outs:
            return np.zeros((0, len(self.q.projected)), dtype=np.int64), np.zeros(0, dtype=np.int64)
        return _merge(np.concatenate(outs), np.concatenate(mults))

    def _arrive(self, i: int, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        t = self.tables[i]
        values = {a: rows[:, k] for k, a in enumerate(t.occ.attrs)}
        keep = np.ones(len(rows), dtype=bool)
        for f in t.filters:
            keep &= _OPS[f.op](_value(f.left, values), _value(f.right, values))
        stored = rows[keep][:, t.positions]
        keys = np.clip(stored, self.lo, self.hi) if t.bucketed else stored
        keys, first, counts = np.unique(keys, axis=0, return_index=True, return_counts=True)
        reps = stored[first]
        out = self._join(i, reps, counts)
        self._add(t, keys, reps, counts)
        return out

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
