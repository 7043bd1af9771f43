"""Constant-size evaluation of a bounded aggregate over a join of several streams read whole (the
bounded-memory characterization's §8.2 strategy, docs/bounded-memory.md): COUNT, SUM, AVG, MAX and
MIN grouped on bounded attributes, with the partial aggregates pushed below the join.

The join projected on the grouping attributes, duplicates kept, must be bounded by Theorem 5.6:
then tuples of one bucket are interchangeable in every join (engine/bounded_synopsis.py), and each
bucket of a stream keeps, besides its first tuple and its count, per aggregated attribute of that
stream the count of its non-NULL values, their sum, their largest and their smallest. When a batch
arrives its tuples are filtered and reduced to buckets the same way, joined with the other
streams' buckets, and each joining combination of buckets adds to its group (the grouping
attributes are bounded, so a bucket holds one value of each):

- COUNT(*): the product of the buckets' counts;
- COUNT(A), SUM(A) with A of stream k: k's bucket's non-NULL count, sum, times the product of the
  other buckets' counts (each A value meets every combination of the others' tuples);
- MAX(A), MIN(A): k's bucket's extreme (duplicates do not matter);
- AVG(A): SUM(A) / COUNT(A).

The groups are bounded, so the answer is kept whole: per group the row count, and per aggregate
its non-NULL count, sum and extremes. Streams only grow, so a group's totals only grow; a group
whose row changed at an instant is reported by the operator (engine/operators/synopsis_aggregate.py)
as `−` of its old row and `+` of its new one, as the ordinary aggregate does. Sums are int64, as
the ordinary aggregate's over integers.

This covers every query Theorem 8.6 judges bounded with a duplicate-sensitive aggregate (its
reduced characteristic query is then π̃) and the MAX / MIN queries whose join has no inequality
join left to summarize by an extreme.

MAX / MIN queries bounded only through representatives (MAX(S.B) over S.B > T.D: the reduced query
is bounded under π, not under π̃) run on the §7.2 synopsis instead: per bucket at most two
representative tuples, chosen by the bucket's MaxRef / MinRef as the synopsis join chooses them
(engine/bounded_synopsis.py), plus the partial extremes of the bucket's aggregated values. A
joining combination of representatives adds its buckets' extremes to its group. That is exact when,
in every bucket b of a stream with MAX(A) of an A that b does not fix to one value, MinRef(S, b) is
empty and MaxRef(S, b) lies in A's class (MIN mirrored): then the representative is the tuple with
the largest A, which joins every combination of the others' tuples that any tuple of b joins, and a
bucket with both sets empty holds interchangeable tuples. Every combination of representatives
that joins is a real join result, and every real result is met by one (the π synopsis's property),
so each group's extreme is exact and only groups with a result appear. The condition is checked
on every bucket when the plan is chosen (`_extremes_hold`); a query with more buckets than
`BUCKETS_CHECKED` keeps the ordinary plan.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import replace

import numpy as np

from cqlstream.cql.boundedness import Decision, decide, lto
from cqlstream.cql.boundedness.closure import Closure, Elem
from cqlstream.cql.boundedness.from_plan import normal_form
from cqlstream.cql.boundedness.normal_form import Aggregation
from cqlstream.cql.boundedness.theorems import decide as decide_normal_form
from cqlstream.cql.logical import nodes as L
from cqlstream.engine.bounded_synopsis import _OPS, SynopsisJoin, _value

# the aggregates this strategy computes (MAX / MIN DISTINCT are MAX / MIN)
FUNCS = frozenset({"count", "sum", "avg", "max", "min", "max distinct", "min distinct"})
_LO, _HI = np.iinfo(np.int64).min, np.iinfo(np.int64).max
_MERGE = (np.add, np.add, np.maximum, np.minimum)  # how two partials of (nn, sum, max, min) combine
# buckets whose MaxRef / MinRef the representatives strategy checks when a plan is chosen, at most
BUCKETS_CHECKED = 1024


def applicable(node: L.Aggregate) -> Aggregation | None:
    """The aggregate's normal form when this strategy evaluates it exactly in constant memory
    (`strategy`); None otherwise."""
    got = strategy(node)
    return None if got is None else got[0]


def strategy(node: L.Aggregate) -> tuple[Aggregation, bool] | None:
    """(normal form, representatives?) when the aggregate runs on synopses: over several stream
    occurrences, judged bounded, standard non-holistic aggregates of integers (COUNT of anything),
    and either the join on the grouping attributes bounded with duplicates kept (Theorem 5.6:
    counts per bucket, False) or, for MAX / MIN only, bounded under π with every bucket's
    representatives carrying its extremes (`_extremes_hold`: representatives, True)."""
    if node.having is not None or node.probe is not None:  # the synopses emit every row, every change
        return None
    a = normal_form(node)
    if not isinstance(a, Aggregation) or len(a.spj.occurrences) < 2:
        return None
    if any(t.func not in FUNCS for t in a.aggs):
        return None
    for call in node.aggs:
        if call.func.lower() != "count" and call.arg is not None and call.arg.type.kind != "int":
            return None
    d = decide(node)
    if not (isinstance(d, Decision) and d.bounded):
        return None
    bag = replace(a.spj, distinct=False)
    if Closure.of(bag.n_attrs, list(bag.atoms)) is None:
        return None
    b = decide_normal_form(bag)
    if isinstance(b, Decision) and b.bounded:
        return a, False
    # all aggregates ignore duplicates (the reduced query is π) and Theorem 8.6 judged it bounded
    if a.spj.distinct and _extremes_hold(a, SynopsisJoin(a.spj)):
        return a, True
    return None


def _extremes_hold(a: Aggregation, join: SynopsisJoin) -> bool:
    """Whether, in every bucket of every stream with a MAX(A) / MIN(A), the representatives carry
    the bucket's extreme of A: A fixed to one value by the bucket (A bounded: every bucket that
    can hold a tuple fixes it), or MinRef(S, b) empty and MaxRef(S, b) within A's class (MIN:
    mirrored); both empty makes the bucket's tuples interchangeable. Attributes compared with
    constants only are left out of the buckets looked at (their range only decides whether the
    bucket can hold a tuple that joins); False when more than BUCKETS_CHECKED buckets remain (about
    1 ms each)."""
    c, linked = join.c, lto.linked(join.q)
    span = list(range(join.lo, join.hi + 1))
    for t in join.tables:
        terms = [x for x in a.aggs if x.arg is not None and x.arg in t.occ.attrs and not c.bounded(x.arg)]
        if not terms:
            continue
        cols = [i for i in t.cols if i in linked] if t.bucketed else []
        # P bounds some of them: every bucket that can hold a tuple places those at a value between
        # their bounds; a bucket placing the others between the constants too bounds them all, so
        # has no MaxRef / MinRef (and fixes A or leaves it out of inequality joins): only buckets
        # with one of the others below or above the constants need looking at
        values = [_between(c, i) or span for i in cols]
        free = sum(1 for i in cols if not c.bounded(i))
        n = math.prod(len(v) for v in values) // len(span) ** free
        if n * (len(span) ** free - (len(span) - 2) ** free) > BUCKETS_CHECKED:
            return False
        for key in itertools.product(*values):
            if all(join.lo < v < join.hi for v in key):
                continue
            ranges = dict(zip(cols, key))
            hi, lo = join.refs_within(t, ranges)
            for x in terms:
                assert x.arg is not None
                if join.lo < ranges.get(x.arg, join.lo) < join.hi:
                    continue  # the bucket fixes A
                same, other = (hi, lo) if x.func.startswith("max") else (lo, hi)
                if other or any(not c.eq(Elem(x.arg), Elem(t.cols[m])) for m in same):
                    return False
    return True


def _between(c: Closure, i: int) -> list[int]:
    """The values P allows attribute i, when it bounds i (else none)."""
    lo, hi = c.lower(i), c.upper(i)
    return list(range(lo, hi + 1)) if lo is not None and hi is not None else []


class SynopsisAggregate:
    """A bounded aggregate over several streams, evaluated with bucket synopses carrying partial
    aggregates. `push(stream, rows, nulls)` adds a batch and returns the groups whose totals
    changed; `row(g)` is group g's current output row (keys then aggregates, None for NULL)."""

    def __init__(self, node: L.Aggregate) -> None:
        got = strategy(node)
        if got is None:
            raise ValueError("not an aggregate the synopsis strategy evaluates (see `applicable`)")
        a, self.representatives = got
        self.a = a
        # representatives: the π synopsis join's tables (≤ 2 rows per bucket, count 1 each)
        self.join = SynopsisJoin(a.spj if self.representatives else replace(a.spj, distinct=False))
        q = self.join.q
        self.funcs = [t.func.split()[0] for t in a.aggs]
        # per occurrence: (aggregate index, column position in the stream's rows) of its arguments
        self.payload = [
            [(j, o.attrs.index(t.arg)) for j, t in enumerate(a.aggs) if t.arg is not None and t.arg in o.attrs]
            for o in q.occurrences
        ]
        # per occurrence, aligned with its table's rows: nn, sum, max, min of the row's bucket
        self.parts = [_empty(0, len(p)) for p in self.payload]
        # representatives: per occurrence its buckets (keys) and their partial aggregates
        self.bucket_keys = [np.zeros((0, len(t.cols)), np.int64) for t in self.join.tables]
        self.bucket_parts = [_empty(0, len(p)) for p in self.payload]
        n_aggs = len(a.aggs)
        self.groups: dict[tuple[int, ...], int] = {}
        self.count = np.zeros(0, np.int64)  # join results per group
        self.totals = _empty(0, n_aggs)  # per group and aggregate: nn, sum, max, min
        if not a.keys:
            self._group_ids(np.zeros((1, 0), np.int64))  # the scalar aggregate's one group

    @property
    def columns(self) -> list[list[int]]:
        """Per occurrence, the stream columns a predicate or the grouping reads (NULL: dropped)."""
        return self.join.columns

    @property
    def arguments(self) -> list[list[int]]:
        """Per occurrence, the stream columns aggregated (NULL: not counted)."""
        return [sorted({pos for _, pos in p}) for p in self.payload]

    def units(self) -> int:
        """Memory in the paper's units (one value or count each, as the verdict's bound counts
        them): the bucket synopses, their partial aggregates (COUNT(*) is the bucket's count, AVG
        a sum and a count, the others one value) and the answer (per group its keys and values)."""
        per = {"count": 1, "sum": 1, "avg": 2, "max": 1, "min": 1}
        n = self.join.units()
        for k, pay in enumerate(self.payload):
            buckets = len(self.bucket_keys[k]) if self.representatives else len(self.join.tables[k].keys)
            n += buckets * sum(per[self.funcs[j]] for j, _ in pay)
        return n + len(self.groups) * (len(self.a.keys) + sum(2 if f == "avg" else 1 for f in self.funcs))

    def nbytes(self) -> int:
        n = self.join.nbytes() + sum(sum(v.nbytes for v in x) for x in (*self.parts, *self.bucket_parts))
        n += sum(k.nbytes for k in self.bucket_keys)
        return n + self.count.nbytes + sum(v.nbytes for v in self.totals) + 8 * len(self.groups) * len(self.a.keys)

    def push(self, stream: str, rows: np.ndarray, nulls: np.ndarray) -> set[int]:
        """Add a batch of `stream`'s tuples (rows × the stream's columns, integers; `nulls` marks
        NULLs in the columns read or aggregated); the groups it changed."""
        touched: set[int] = set()
        for i, t in enumerate(self.join.tables):
            if t.occ.stream == stream:
                touched |= self._arrive(i, rows, nulls)
        return touched

    def row(self, g: int) -> tuple[object, ...] | None:
        """Group g's output row, or None while it has no join result (a scalar aggregate always
        has one: count 0, the others NULL)."""
        if self.a.keys and self.count[g] == 0:
            return None
        key = next(k for k, v in self.groups.items() if v == g)
        nn, s, mx, mn = (v[g] for v in self.totals)
        out: list[object] = list(key)
        for j, f in enumerate(self.funcs):
            n = int(nn[j])
            if f == "count":
                out.append(n)
            elif n == 0:
                out.append(None)
            elif f == "sum":
                out.append(int(s[j]))
            elif f == "avg":
                out.append(float(np.float64(s[j]) / np.float64(n)))
            else:
                out.append(int(mx[j] if f == "max" else mn[j]))
        return tuple(out)

    # ------------------------------------------------------------ one batch of one occurrence
    def _arrive(self, i: int, rows: np.ndarray, nulls: np.ndarray) -> set[int]:
        j, t = self.join, self.join.tables[i]
        read = self.columns[i]
        if read:  # a NULL in a column this occurrence reads: the tuple never joins here
            ok = ~nulls[:, read].any(axis=1)
            rows, nulls = rows[ok], nulls[ok]
        values = {a: rows[:, k] for k, a in enumerate(t.occ.attrs)}
        keep = np.ones(len(rows), dtype=bool)
        for f in t.filters:
            keep &= _OPS[f.op](_value(f.left, values), _value(f.right, values))
        rows, nulls = rows[keep], nulls[keep]
        if not len(rows):
            return set()
        stored = rows[:, t.positions]
        keys = np.clip(stored, j.lo, j.hi) if t.bucketed else stored
        if keys.shape[1]:
            keys, first, inverse = np.unique(keys, axis=0, return_index=True, return_inverse=True)
            inverse = inverse.ravel()
        else:  # a stream the join reads no column of: one bucket
            keys, first, inverse = keys[:1], np.zeros(1, np.int64), np.zeros(len(rows), np.int64)
        counts = np.bincount(inverse, minlength=len(keys)).astype(np.int64)
        parts = _empty(len(keys), len(self.payload[i]))
        for col, (_, pos) in enumerate(self.payload[i]):
            ok = ~nulls[:, pos]
            _fold(parts, col, inverse[ok], rows[ok, pos])
        if self.representatives:
            all_keys = np.clip(stored, j.lo, j.hi) if t.bucketed else stored
            rkeys, reps = j.representatives(t, all_keys, stored)
            at = _positions(keys, rkeys)
            touched = self._join(i, reps, np.ones(len(reps), np.int64), tuple(p[at] for p in parts))
            self._keep(i, keys, parts, rkeys, reps)
            return touched
        touched = self._join(i, stored[first], counts, parts)
        self._add(i, keys, stored[first], counts, parts)
        return touched

    def _join(self, i: int, reps: np.ndarray, counts: np.ndarray, parts: tuple[np.ndarray, ...]) -> set[int]:
        """Add the results of stream i's new buckets with the others' buckets to their groups."""
        tables = self.join.tables
        sides = [(reps, counts, parts) if k == i else (t.reps, t.counts, self.parts[k]) for k, t in enumerate(tables)]
        grids = np.meshgrid(*[np.arange(len(c)) for _, c, _ in sides], indexing="ij")
        idx = [g.ravel() for g in grids]
        values: dict[int, np.ndarray] = {}
        for k, (t, (rp, _, _)) in enumerate(zip(tables, sides)):
            for col, attr in enumerate(t.cols):
                values[attr] = rp[idx[k], col]
        ok = np.ones(idx[0].size, dtype=bool)
        for atom in self.join.cross:
            ok &= _OPS[atom.op](_value(atom.left, values), _value(atom.right, values))
        if not ok.any():
            return set()
        idx = [x[ok] for x in idx]
        cnt = [sides[k][1][idx[k]] for k in range(len(sides))]
        total = np.prod(np.stack(cnt), axis=0)
        n = len(total)
        got = _empty(n, len(self.a.aggs))
        for j, term in enumerate(self.a.aggs):
            if term.arg is None:  # count(*)
                got[0][:, j] = total
        for k, pay in enumerate(self.payload):
            others = np.prod(np.stack([c for m, c in enumerate(cnt) if m != k]), axis=0)
            nn, s, mx, mn = sides[k][2]
            for col, (j, _) in enumerate(pay):
                got[0][:, j] = nn[idx[k], col] * others
                got[1][:, j] = s[idx[k], col] * others
                got[2][:, j] = mx[idx[k], col]
                got[3][:, j] = mn[idx[k], col]
        if self.representatives:  # MAX / MIN only: whether a non-NULL value met the group is enough
            np.minimum(got[0], 1, out=got[0])
        keyrows = np.stack([values[a][ok] for a in self.a.keys], axis=1) if self.a.keys else np.zeros((n, 0), np.int64)
        g = self._group_ids(keyrows)
        np.add.at(self.count, g, total)
        for ufunc, total_, part in zip(_MERGE, self.totals, got):
            ufunc.at(total_, g, part)
        return set(np.unique(g).tolist())

    def _group_ids(self, keyrows: np.ndarray) -> np.ndarray:
        out = np.empty(len(keyrows), np.int64)
        for r, key in enumerate(map(tuple, keyrows.tolist())):
            g = self.groups.get(key)
            if g is None:
                g = self.groups[key] = len(self.groups)
                self.count = np.append(self.count, 0)
                grow = _empty(1, len(self.a.aggs))
                self.totals = (
                    np.concatenate([self.totals[0], grow[0]]),
                    np.concatenate([self.totals[1], grow[1]]),
                    np.concatenate([self.totals[2], grow[2]]),
                    np.concatenate([self.totals[3], grow[3]]),
                )
            out[r] = g
        return out

    def _add(
        self, i: int, keys: np.ndarray, reps: np.ndarray, counts: np.ndarray, parts: tuple[np.ndarray, ...]
    ) -> None:
        """Merge the new buckets (with their partial aggregates) into stream i's synopsis."""
        t = self.join.tables[i]
        allk = np.concatenate([t.keys, keys]) if len(t.keys) else keys
        allr = np.concatenate([t.reps, reps]) if len(t.reps) else reps
        if allk.shape[1]:
            t.keys, first, inverse = np.unique(allk, axis=0, return_index=True, return_inverse=True)
            inverse = inverse.ravel()
        else:
            t.keys, first, inverse = allk[:1], np.zeros(1, np.int64), np.zeros(len(allk), np.int64)
        t.reps = allr[first]
        old = self.parts[i]
        c = np.zeros(len(first), np.int64)
        np.add.at(c, inverse, np.concatenate([t.counts, counts]))
        t.counts = c
        merged = _empty(len(first), len(self.payload[i]))
        for ufunc, m, v_old, v_new in zip(_MERGE, merged, old, parts):
            ufunc.at(m, inverse, np.concatenate([v_old, v_new]))
        self.parts[i] = merged

    def _keep(
        self, i: int, keys: np.ndarray, parts: tuple[np.ndarray, ...], rkeys: np.ndarray, reps: np.ndarray
    ) -> None:
        """Representatives: merge a batch's buckets (keys, partial aggregates) and representatives
        (rkeys, reps) into stream i's synopsis; each stored representative then carries its
        bucket's partials."""
        t, j = self.join.tables[i], self.join
        t.keys, t.reps = j.representatives(t, np.concatenate([t.keys, rkeys]), np.concatenate([t.reps, reps]))
        t.counts = np.ones(len(t.keys), np.int64)
        allk = np.concatenate([self.bucket_keys[i], keys])
        if allk.shape[1]:
            self.bucket_keys[i], inverse = np.unique(allk, axis=0, return_inverse=True)
            inverse = inverse.ravel()
        else:
            self.bucket_keys[i], inverse = allk[:1], np.zeros(len(allk), np.int64)
        merged = _empty(len(self.bucket_keys[i]), len(self.payload[i]))
        for ufunc, m, v_old, v_new in zip(_MERGE, merged, self.bucket_parts[i], parts):
            ufunc.at(m, inverse, np.concatenate([v_old, v_new]))
        self.bucket_parts[i] = merged
        at = _positions(self.bucket_keys[i], t.keys)
        self.parts[i] = tuple(p[at] for p in merged)


def _positions(keys: np.ndarray, wanted: np.ndarray) -> np.ndarray:
    """Row of `keys` (sorted, distinct) holding each row of `wanted` (each one of them)."""
    if not keys.shape[1]:
        return np.zeros(len(wanted), np.int64)
    _, inverse = np.unique(np.concatenate([keys, wanted]), axis=0, return_inverse=True)
    return inverse.ravel()[len(keys) :]


def _empty(n: int, width: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(non-NULL counts, sums, maxima, minima) of n entries × width aggregates, nothing added."""
    z = np.zeros((n, width), np.int64)
    return z, z.copy(), np.full((n, width), _LO, np.int64), np.full((n, width), _HI, np.int64)


def _fold(parts: tuple[np.ndarray, ...], col: int, at: np.ndarray, v: np.ndarray) -> None:
    """Add values v to entries `at` of column col of partial aggregates `parts`."""
    for ufunc, part, x in zip(_MERGE, parts, (np.ones(len(at), np.int64), v, v, v)):
        ufunc.at(part[:, col], at, x)
