"""The constant-size synopsis of a bounded query, described: what is kept per stream and a bound
in memory units (one unit holds one value or one count).

Filters are applied on arrival and cost nothing. When every attribute of a stream that a join
predicate or the result reads is bounded, the stream's synopsis is a count (or, under duplicate
elimination, presence) per distinct combination of those attributes' values; otherwise its
tuples are grouped in buckets (each attribute the query reads placed below, at each integer
between, or above the query's smallest and largest constants), each bucket keeping its first
tuple and a count, or under duplicate elimination at most two representative tuples.
"""

from __future__ import annotations

from math import prod

from cqlstream.cql.boundedness.closure import Closure
from cqlstream.cql.boundedness.normal_form import HOLISTIC, Aggregation, Occurrence, Spj


def _ranges(q: Spj, c: Closure, attrs: list[int]) -> str:
    return ", ".join(f"{q.names[i]} in {c.lower(i)}..{c.upper(i)}" for i in attrs)


def _stream(q: Spj, c: Closure, o: Occurrence, counted: bool) -> tuple[str, int, int]:
    """(description, units, entries) of one stream's part."""
    kept = [i for i in o.attrs if i in q.joined() or i in q.projected]
    cols = "(" + ", ".join(q.names[i] for i in kept) + ")"
    width = len(kept) + (1 if counted else 0)
    if not kept:
        what = "a count of its tuples that pass its filters" if counted else "whether a tuple passed its filters"
        return f"{o.label}: {what} (1 unit)", 1, 1
    values = [c.values(i) for i in kept]
    if all(v is not None for v in values):
        n = prod(v for v in values if v is not None)
        what = "a count per distinct" if counted else "the set of distinct"
        return f"{o.label}: {what} {cols} ({_ranges(q, c, kept)}): ≤ {n} entries, {n * width} units", n * width, n
    # buckets over every attribute the query reads of this stream (filters included): tuples of
    # one bucket are then interchangeable in every join
    kept = [i for i in o.attrs if i in q.referenced()]
    cols = "(" + ", ".join(q.names[i] for i in kept) + ")"
    width = len(kept) + (1 if counted else 0)
    ks = q.constants()
    buckets = ((ks[-1] - ks[0] + 3) if ks else 1) ** len(kept)
    cut = f"the constants {ks[0]}..{ks[-1]}" if ks else "no constants"
    if counted:
        what, units = "its first tuple and a count", buckets * width
    else:
        what, units = (
            "at most 2 representative tuples (extreme on the inequality-joined attributes)",
            buckets * 2 * len(kept),
        )
    return f"{o.label}: per bucket of {cols} cut at {cut} (≤ {buckets} buckets), {what}: {units} units", units, buckets


def spj(q: Spj, c: Closure) -> tuple[tuple[str, ...], int]:
    """Synopsis of a bounded select-project-join query."""
    if len(q.occurrences) == 1 and not q.distinct:
        return ("nothing: each tuple is filtered and projected as it arrives",), 0
    lines, units = [], 0
    if q.distinct:
        n = prod(c.values(i) or 1 for i in q.projected)
        lines.append(f"the distinct results emitted so far: ≤ {n} tuples, {n * len(q.projected)} units")
        units += n * len(q.projected)
    if len(q.occurrences) > 1:
        for o in q.occurrences:
            text, u, _ = _stream(q, c, o, counted=not q.distinct)
            lines.append(text)
            units += u
    return tuple(lines), units


def _agg_units(func: str, values: int | None) -> int:
    if func in HOLISTIC or func == "median":
        return 2 * (values or 1)  # a count per value
    return 2 if func.startswith("avg") else 1


def aggregation(a: Aggregation, c: Closure) -> tuple[tuple[str, ...], int]:
    """Synopsis of a bounded aggregate query: the answer (a bounded number of groups) and, over
    several streams, the reduced characteristic query's synopsis with partial aggregates."""
    q = a.spj
    groups = prod(c.values(i) or 1 for i in a.keys)
    per_group = len(a.keys) + sum(_agg_units(t.func, None if t.arg is None else c.values(t.arg)) for t in a.aggs)
    keys = ", ".join(q.names[i] for i in a.keys)
    lines = [f"the answer: ≤ {groups} groups" + (f" of ({keys})" if keys else "") + f", {groups * per_group} units"]
    units = groups * per_group
    if any(t.func in HOLISTIC for t in a.aggs):
        lines.append("per group, a count per value of each COUNT DISTINCT / MEDIAN attribute (bounded)")
    if len(q.occurrences) > 1:
        for o in q.occurrences:
            text, u, entries = _stream(q, c, o, counted=not q.distinct)
            extra = entries * len(a.aggs)
            lines.append(f"{text}, plus a partial aggregate per entry ({extra} units)")
            units += u + extra
    return tuple(lines), units
