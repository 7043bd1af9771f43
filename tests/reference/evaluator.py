"""The reference evaluator: CQL by definition, instant by instant, brute force.

The oracle for differential tests against the engine (docs/semantics.md). Nothing here is clever:
every relation-valued node is recomputed from scratch at every instant from its inputs' values at
that instant; a stream is the list of all its elements (ts, tuple) in arrival order.

    evaluate(plan, inputs, compat=False, end=None, functions=None) -> {t: Counter(tuple -> net count)}

`inputs` maps a source name (StreamSource.name / RelationSource.name) to its events in arrival
order: `(ts, tuple)` for a stream, `(ts, sign, tuple)` for a relation (sign +1 / -1); a heartbeat is
`(ts, None)` / `(ts, 0, None)` and only says "time reached ts".

Instants: t0 = the smallest first ts (element or heartbeat) over the sources the plan reads;
L = `end` if given, else the largest ts over all of `inputs`. Every integer instant t0..L is
evaluated. The result maps each instant with a change to the net change at it: for a stream plan
the elements with that timestamp (all positive), for a relation plan R(t) − R(t−1), R(t0−1) = ∅.

Tie order. Rows/Partition windows and Sample over a *derived* stream (an Istream/Dstream/Rstream
output) see the order of the elements emitted at one instant; that order is defined by
cql/logical/instant_order.py (docs/semantics.md, "Stream output order"). The reference keeps each
relation as an ordered bag (a list with one entry per occurrence) in a provenance order: a window
lists its elements in arrival order (a Partition window partition by partition); Filter, Project
and SemiJoin keep their input's order; a Join is nested loops with the first input outermost;
Aggregate and Distinct list groups/tuples by first appearance; the bag UNION is left then right. Istream emits, for each surplus tuple, its newest (last) occurrences; Dstream the
oldest (first) occurrences of R(t−1); Rstream all of R(t); each in list order when the relation is
arrival-ordered (a Range/Rows window's contents or a stored relation, filtered or projected), else sorted by
value (`value_order_key`). So Istream over an Unbounded window, and Rstream over Now, emit elements
in the underlying stream's arrival order, as the equivalent rewritten plans do.
"""

from __future__ import annotations

import itertools
import math
from collections import Counter

from cqlstream.cql.logical import nodes as L
from cqlstream.cql.logical.instant_order import by_value

from .exprs import ExprEval, conform

_MASK = (1 << 64) - 1


def splitmix64(i: int) -> int:
    """Java SplittableRandom's mix of seed i (docs/semantics.md, Sample)."""
    z = (i + 0x9E3779B97F4A7C15) & _MASK
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK
    return z ^ (z >> 31)


def sample_keeps(i: int, percent: float) -> bool:
    """Whether element number i (0-based) of a sampled stream is kept by Sample(percent)."""
    return (splitmix64(i) >> 11) * 2.0**-53 < percent / 100


def evaluate(
    plan: L.Plan, inputs: dict, *, compat: bool = False, end: int | None = None, functions=None
) -> dict[int, Counter]:
    return _Reference(plan, inputs, compat, end, functions).run()


def evaluate_all(
    plans: list[L.Plan], inputs: dict, *, compat: bool = False, end: int | None = None, functions=None
) -> list[dict[int, Counter]]:
    """`evaluate` of several plans over the same inputs, computing each common subplan once (the
    queries of a script inline the same view plans). Each result is what `evaluate` gives."""
    if not plans:
        return []
    ref = _Reference(plans[0], inputs, compat, end, functions)
    out = []
    for plan in plans:
        ref.plan, ref.t0 = plan, ref.t0_of(plan)
        out.append(ref.run())
    return out


class _Reference:
    def __init__(self, plan, inputs, compat, end, functions):
        self.plan = plan
        self.inputs = inputs
        self.compat = compat
        self.ev = ExprEval(functions)
        self._streams: dict[int, list] = {}
        self._relations: dict[tuple[int, int], list] = {}
        self._keep = []  # keeps memoized nodes alive, so their ids stay unique

        for name, evs in inputs.items():
            for prev, ev in itertools.pairwise(evs):
                if ev[0] < prev[0]:
                    raise ValueError(f"input {name}: timestamp {ev[0]} arrives after {prev[0]}")
        read = {n.name for n in L.walk(plan) if isinstance(n, (L.StreamSource, L.RelationSource))}
        firsts = [evs[0][0] for name, evs in inputs.items() if name in read and evs]
        lasts = [ev[0] for evs in inputs.values() for ev in evs]
        self.t0 = min(firsts) if firsts else None
        self.L = end if end is not None else (max(lasts) if lasts else None)

    def t0_of(self, node) -> int | None:
        """A subplan's first instant: the smallest first event over the sources it reads
        (docs/semantics.md: time starts per subplan, so a shared subplan means one thing)."""
        key = ("t0", id(node))
        if key not in self._relations:
            self._keep.append(node)
            names = {n.name for n in L.walk(node) if isinstance(n, (L.StreamSource, L.RelationSource))}
            firsts = [evs[0][0] for name, evs in self.inputs.items() if name in names and evs]
            self._relations[key] = min(firsts) if firsts else None
        return self._relations[key]

    # ------------------------------------------------------------ driver
    def run(self) -> dict[int, Counter]:
        out: dict[int, Counter] = {}
        if self.t0 is None or self.L is None or self.t0 > self.L:
            return out
        if self.plan.is_stream:
            for ts, row in self.stream(self.plan):
                if self.t0 <= ts <= self.L:
                    out.setdefault(ts, Counter())[row] += 1
            return dict(sorted(out.items()))
        for t in range(self.t0, self.L + 1):
            now, before = self.bag(self.plan, t), self.bag(self.plan, t - 1)
            change = Counter({row: now[row] - before[row] for row in set(now) | set(before) if now[row] != before[row]})
            if change:
                out[t] = change
        return out

    # ------------------------------------------------------------ streams: all elements, arrival order
    def stream(self, node) -> list[tuple[int, tuple]]:
        key = id(node)
        if key not in self._streams:
            self._keep.append(node)
            self._streams[key] = self._stream(node)
        return self._streams[key]

    def stream_upto(self, node, t: int) -> list[tuple[int, tuple]]:
        return [(ts, row) for ts, row in self.stream(node) if ts <= t]

    def _stream(self, n) -> list[tuple[int, tuple]]:
        if isinstance(n, L.StreamSource):
            out = []
            for ts, row in self.inputs.get(n.name, []):
                if row is not None and ts <= self.L:
                    out.append((ts, self._row(row, n.attrs, n.name)))
            return out
        if isinstance(n, L.Filter):
            return [(ts, r) for ts, r in self.stream(n.input) if self.ev(n.predicate, r) is True]
        if isinstance(n, L.Project):
            return [(ts, tuple(self.ev(e, r) for e in n.exprs)) for ts, r in self.stream(n.input)]
        if isinstance(n, L.Sample):
            return [el for i, el in enumerate(self.stream(n.input)) if sample_keeps(i, n.percent)]
        if isinstance(n, L.RelToStream):
            return self._rel_to_stream(n.op, n.input, by_value=by_value(n))
        if isinstance(n, L.StreamJoin):  # by definition: Rstream(S [Now] ⋈ X)
            now = L.Window(n.inputs_[n.now], L.RangeSpec(0))
            x = n.relation_input  # a band join's stream read as its window
            join = L.Join(tuple(now if k == n.now else x for k in range(2)), n.predicate)
            # (the order of the join's list, S's elements in arrival order, when X is arrival-
            # ordered; else each instant by the value of the plan's output columns, `order`)
            out = self._rel_to_stream("rstream", join, by_value=False)
            if n.order is not None:
                order = n.order
                out.sort(key=lambda el: (el[0], value_order_key(tuple(self.ev(e, el[1]) for e in order))))
            return out
        raise TypeError(f"{type(n).__name__} is not a stream operator")

    def _rel_to_stream(self, op: str, rel, by_value: bool) -> list[tuple[int, tuple]]:
        """Istream/Dstream/Rstream of the relation `rel`, each instant's rows in R's list order or,
        `by_value`, sorted by value (cql/logical/instant_order.py)."""
        out = []
        start = self.t0_of(rel)
        for t in range(start if start is not None else self.L + 1, self.L + 1):
            if self.compat and t == self.L:
                break  # STREAM 0.6: nothing at the last instant
            now, before = self.relation(rel, t), self.relation(rel, t - 1)
            if op == "istream":  # R(t) − R(t−1): the newest occurrences of each surplus tuple
                emitted = _last_occurrences(now, Counter(now) - Counter(before))
            elif op == "dstream":  # R(t−1) − R(t): the oldest occurrences leave
                emitted = _first_occurrences(before, Counter(before) - Counter(now))
            else:
                emitted = now
            if by_value:
                emitted = sorted(emitted, key=value_order_key)
            out.extend((t, row) for row in emitted)
        return out

    @staticmethod
    def _row(row, attrs, name) -> tuple:
        row = tuple(row)
        if len(row) != len(attrs):
            raise ValueError(f"{name}: tuple {row!r} has {len(row)} values, schema has {len(attrs)}")
        return tuple(conform(v, a.type) for v, a in zip(row, attrs))

    # ------------------------------------------------------------ relations: the bag at instant t
    def bag(self, node, t: int) -> Counter:
        return Counter(self.relation(node, t))

    def relation(self, node, t: int) -> list[tuple]:
        """The bag R(t) as a list with one entry per tuple occurrence, in provenance order."""
        start = self.t0_of(node)
        if start is None or t < start:
            return []  # R(t0 − 1) is empty, whatever the operator (t0 of this subplan's sources)
        key = (id(node), t)
        if key not in self._relations:
            self._keep.append(node)
            self._relations[key] = self._relation(node, t)
        return self._relations[key]

    def _relation(self, n, t: int) -> list[tuple]:
        ev = self.ev
        if isinstance(n, L.RelationSource):
            rows: list[tuple] = []
            for ts, sign, row in self.inputs.get(n.name, []):
                if ts > t:
                    break
                if row is None:
                    continue  # heartbeat
                row = self._row(row, n.attrs, n.name)
                if sign > 0:
                    rows.append(row)
                elif row in rows:
                    rows.remove(row)  # the oldest occurrence
                else:
                    raise ValueError(f"relation {n.name}: delete of {row!r} at {ts}, which it does not hold")
            return rows

        if isinstance(n, L.Window):
            return [row for _, row in self._window(n, t)]

        if isinstance(n, L.Filter):
            return [r for r in self.relation(n.input, t) if ev(n.predicate, r) is True]

        if isinstance(n, L.Project):
            return [tuple(ev(e, r) for e in n.exprs) for r in self.relation(n.input, t)]

        if isinstance(n, L.Join):
            rows = [()]
            for i in n.inputs_:  # nested loops, first input outermost
                rows = [r + s for r in rows for s in self.relation(i, t)]
            return [r for r in rows if n.predicate is None or ev(n.predicate, r) is True]

        if isinstance(n, L.Aggregate):
            rows = self._aggregate(n, self.relation(n.input, t))
            return rows if n.having is None else [r for r in rows if ev(n.having, r) is True]  # HAVING: a selection

        if isinstance(n, L.Distinct):  # (a window read by last-seen instants: by definition, the window)
            return list(dict.fromkeys(self.relation(n.relation_input, t)))

        if isinstance(n, L.SetOp):
            a, b = self.relation(n.left, t), self.relation(n.right, t)
            if not n.all:  # DISTINCT: SQL's set versions
                right = set(b)
                keep = {"union": lambda r: True, "except": lambda r: r not in right, "intersect": lambda r: r in right}[
                    n.op
                ]
                return [r for r in dict.fromkeys(a + b if n.op == "union" else a) if keep(r)]
            # CQL's bag operators (plain or ALL)
            if n.op == "union":
                return a + b  # counts add
            bc = Counter(b)
            if n.op == "except":  # max(0, a − b): the first b occurrences of each tuple are cancelled
                return _skip_first(a, bc)
            return _first_occurrences(a, bc)  # intersect: min(a, b)

        if isinstance(n, L.SemiJoin):
            right = self.relation(n.right, t)
            out = []
            for lrow in self.relation(n.left, t):
                verdicts = [ev(n.predicate, lrow + rrow) for rrow in right]
                if not n.anti:
                    keep = any(v is True for v in verdicts)
                else:
                    keep = not any(v is True for v in verdicts)
                    if n.null_aware and any(v is None for v in verdicts):
                        keep = False  # NOT IN: an unknown comparison keeps no row
                if keep:
                    out.append(lrow)
            return out

        raise TypeError(f"{type(n).__name__} is not a relation operator")

    # ------------------------------------------------------------ windows
    def _window(self, n: L.Window, t: int) -> list[tuple[int, tuple]]:
        """The elements of the input stream in the window at t."""
        spec = n.spec
        elems = self.stream_upto(n.input, t)  # every element with τ ≤ t, in arrival order
        if isinstance(spec, L.RangeSpec):
            N, M = spec.size, spec.slide
            if M is not None:
                b = (t // M) * M
                return [(ts, r) for ts, r in elems if (N is None or b - N < ts) and ts <= b]
            if N is None:
                return elems
            if N == 0:
                return [(ts, r) for ts, r in elems if ts == t]
            if self.compat:
                return [(ts, r) for ts, r in elems if t - N < ts]
            return [(ts, r) for ts, r in elems if t - N <= ts]
        if isinstance(spec, L.RowsSpec):
            if spec.slide is not None:
                elems = elems[: len(elems) // spec.slide * spec.slide]
            return elems if spec.size is None else elems[max(0, len(elems) - spec.size) :]
        if isinstance(spec, L.PartitionSpec):
            parts: dict[tuple, list] = {}
            for ts, r in elems:
                parts.setdefault(tuple(r[k] for k in spec.keys), []).append((ts, r))
            return [el for p in parts.values() for el in p[max(0, len(p) - spec.rows) :]]
        raise TypeError(f"unknown window {spec!r}")

    # ------------------------------------------------------------ aggregation
    def _aggregate(self, n: L.Aggregate, rows: list[tuple]) -> list[tuple]:
        groups: dict[tuple, list] = {}  # in order of first appearance
        for r in rows:
            groups.setdefault(tuple(self.ev(k, r) for k in n.keys), []).append(r)
        if not n.keys and not groups and not self.compat:
            groups[()] = []  # a scalar aggregate over no rows is one row
        return [key + tuple(conform(self._agg(a, rows), a.type) for a in n.aggs) for key, rows in groups.items()]

    def _agg(self, a, rows):
        if a.arg is None:  # count(*)
            return len(rows)
        vals = [self.ev(a.arg, r) for r in rows]
        vals = [v for v in vals if v is not None]
        if a.distinct:
            vals = list(set(vals))
        f = a.func.lower()
        if f == "count":
            return len(vals)
        if not vals:
            return None
        if f == "sum":
            return _exact_sum(vals)
        if f == "avg":
            if all(isinstance(v, int) for v in vals):
                return sum(vals) / len(vals)  # exact integer sum, one correctly rounded division
            return _exact_sum(vals) / len(vals)
        if f == "min":
            return min(vals)
        if f == "max":
            return max(vals)
        raise KeyError(f"unknown aggregate {a.func}() (the reference knows count, sum, avg, min, max)")


def value_order_key(row: tuple) -> tuple:
    """Sort key of a tuple in the value order of relation-to-stream output (instant_order.py):
    column by column ascending, NULL first, NaN after every other float."""
    return tuple(
        (0,) if v is None else (1, 1, 0.0) if isinstance(v, float) and math.isnan(v) else (1, 0, v) for v in row
    )


def _first_occurrences(rows: list[tuple], counts: Counter) -> list[tuple]:
    """For each tuple value r, its first counts[r] occurrences in `rows`, in list order."""
    left, out = Counter(counts), []
    for r in rows:
        if left[r] > 0:
            left[r] -= 1
            out.append(r)
    return out


def _last_occurrences(rows: list[tuple], counts: Counter) -> list[tuple]:
    """For each tuple value r, its last counts[r] occurrences in `rows`, in list order."""
    return _first_occurrences(rows[::-1], counts)[::-1]


def _skip_first(rows: list[tuple], counts: Counter) -> list[tuple]:
    """`rows` without the first counts[r] occurrences of each tuple value r."""
    skip, out = Counter(counts), []
    for r in rows:
        if skip[r] > 0:
            skip[r] -= 1
        else:
            out.append(r)
    return out


def _exact_sum(vals):
    """Sum: exact for ints, NULL when that is outside int64 (an INTEGER cannot hold it); for floats
    the correctly rounded sum (math.fsum), independent of order."""
    if all(isinstance(v, int) for v in vals):
        total = sum(vals)
        return total if -(1 << 63) <= total < (1 << 63) else None
    return math.fsum(vals)
