"""Run a query on the engine and on the reference evaluator with the same input, for comparison.

Inputs use the reference's shape: stream events `(ts, tuple)`, relation events `(ts, sign, tuple)`;
a `None` tuple is a heartbeat. The engine is fed in chunks of `chunk` events per source (round
robin across sources in global ts order), running the scheduler after each chunk.
"""

from __future__ import annotations

from collections import Counter

import numpy as np

from cqlstream.cql.analyzer import AnalyzeOptions
from cqlstream.cql.catalog import Catalog
from cqlstream.cql.ddl import execute_ddl
from cqlstream.cql.frontend import compile_query
from cqlstream.engine.dsms import Dsms
from tests.reference import evaluate
from tests.reference.io import canonical


def net_by_instant(batch) -> dict[int, Counter]:
    """Engine output → {t: Counter(tuple → net count)} without zero entries (reference shape)."""
    out: dict[int, Counter] = {}
    for row, t, s in zip(batch.rows(), batch.ts.tolist(), batch.sign.tolist()):
        c = out.setdefault(t, Counter())
        c[row] += s
    clean = {}
    for t, c in out.items():
        c = Counter({k: v for k, v in c.items() if v})
        if c:
            clean[t] = c
    return clean


def _merge_events(inputs: dict[str, list]):
    """All events in global (ts, source order, arrival) order, tagged with their source."""
    tagged = []
    for si, (name, evs) in enumerate(inputs.items()):
        for k, ev in enumerate(evs):
            tagged.append((ev[0], si, k, name, ev))
    tagged.sort(key=lambda x: (x[0], x[1], x[2]))
    return [(name, ev) for _, _, _, name, ev in tagged]


def _start(ddl: str, query: str, compat: bool, functions_setup=None, **dsms_options):
    """A Dsms with the DDL executed, the query registered and a subscription to it."""
    d = Dsms(compat=compat, **dsms_options)
    if functions_setup:
        functions_setup(d.catalog.functions)
    d.execute(ddl)
    h = d.register_query(query)
    return d, h, d.subscribe(h.id)


def run_engine(
    ddl: str,
    query: str,
    inputs: dict[str, list],
    *,
    chunk: int | None = None,
    compat=False,
    functions_setup=None,
    prepare=None,
    **dsms_options,
):
    """`prepare(h)`: called with the registered query before any input (e.g. to set a knob)."""
    d, h, sub = _start(ddl, query, compat, functions_setup, **dsms_options)
    if prepare is not None:
        prepare(h)
    events = _merge_events(inputs)
    step = chunk or max(len(events), 1)
    parts = []
    for i in range(0, len(events), step):
        group = events[i : i + step]
        # consecutive events of one source go in one push
        j = 0
        while j < len(group):
            name, ev = group[j]
            k = j
            while k < len(group) and group[k][0] == name and group[k][1][-1] is not None:
                k += 1
            if k == j:  # a heartbeat
                d.heartbeat(name, ev[0])
                j += 1
                continue
            evs = [e for _, e in group[j:k]]
            if len(evs[0]) == 3:
                d.push(name, [e[2] for e in evs], ts=[e[0] for e in evs], signs=[e[1] for e in evs])
            else:
                d.push(name, [e[1] for e in evs], ts=[e[0] for e in evs])
            j = k
        d.run()
        parts.append(sub.poll())
    d.end()
    parts.append(sub.poll())
    result: dict[int, Counter] = {}
    for p in parts:
        for t, c in net_by_instant(p).items():
            result.setdefault(t, Counter()).update(c)
    return {t: Counter({k: v for k, v in c.items() if v}) for t, c in result.items() if any(v for v in c.values())}, h


def run_reference(ddl: str, query: str, inputs, *, compat=False, functions_setup=None):
    cat = Catalog()
    if functions_setup:
        functions_setup(cat.functions)
    execute_ddl(cat, ddl)
    q = compile_query(query, cat, options=AnalyzeOptions(stream_compat=compat))
    return evaluate(q.analyzed.plan, inputs, compat=compat, functions=cat.functions)


def round_floats(result: dict[int, Counter], digits: int = 9, zero_below: float = 1e-12) -> dict[int, Counter]:
    """`result` with every float rounded to `digits` significant digits and floats smaller than
    `zero_below` in magnitude taken as 0.0 (per instant, counts of rows that become equal are added
    and zero counts dropped): float aggregates may differ from the reference's exactly rounded ones
    in the last bits (e.g. a compensated sum over 1e16 and -1e16 leaving 1e-18 instead of 0.0)."""
    return canonical(result, digits, zero_below)


def assert_same(
    ddl: str,
    query: str,
    inputs,
    *,
    chunks=(1, 7, None),
    compat=False,
    functions_setup=None,
    float_digits: int | None = None,
    reference_functions_setup=None,
    **dsms_options,
):
    """Engine result equals the reference for every chunking (floats compared to `float_digits`
    significant digits when given)."""
    expected = run_reference(
        ddl, query, inputs, compat=compat, functions_setup=reference_functions_setup or functions_setup
    )
    if float_digits is not None:
        expected = round_floats(expected, float_digits)
    for chunk in chunks:
        got, h = run_engine(
            ddl, query, inputs, chunk=chunk, compat=compat, functions_setup=functions_setup, **dsms_options
        )
        if float_digits is not None:
            got = round_floats(got, float_digits)
        assert got == expected, (
            f"chunk={chunk}\n{h.explain()}\nengine:    {dict(sorted(got.items()))}\n"
            f"reference: {dict(sorted(expected.items()))}"
        )


def engine_raw(ddl: str, query: str, inputs, chunk, compat: bool = False):
    """The engine's raw output batches, one event per push, `chunk` events per scheduler run."""
    d, h, sub = _start(ddl, query, compat)
    out = []
    feed(d, _merge_events(inputs), chunk, after=lambda n: out.append(sub.poll()))
    d.end()
    out.append(sub.poll())
    return out, h, d


def elements_of(batches) -> list[tuple]:
    """Every (ts, sign, row) of raw output batches, in order."""
    return [e for b in batches if b is not None for e in b.elements()]


def per_instant(batches) -> list[tuple[int, list[tuple]]]:
    """Each instant's (sign, row) elements as a sorted list, instants in time order: for plans whose
    order within an instant may differ (it is not part of a result)."""
    by_ts: dict[int, list[tuple]] = {}
    for ts, sign, row in elements_of(batches):
        by_ts.setdefault(ts, []).append((sign, tuple(repr(v) for v in row)))
    return [(ts, sorted(es)) for ts, es in sorted(by_ts.items())]


def assert_same_without(ddl: str, query: str, inputs, compat: bool, took, switch_off, key=elements_of) -> None:
    """A rewrite changes nothing: the raw output with it and with it switched off
    (`switch_off(monkeypatch)`), at 1, 7 and all events per push, compared by `key`; `took(d)` is
    true of an engine whose plan has the rewrite, and must be false with it switched off."""
    import pytest

    with pytest.MonkeyPatch.context() as mp:
        for chunk in (1, 7, None):
            new, h, d = engine_raw(ddl, query, inputs, chunk, compat=compat)
            assert took(d)
            switch_off(mp)
            old, _, d_old = engine_raw(ddl, query, inputs, chunk, compat=compat)
            assert not took(d_old)
            mp.undo()
            assert key(new) == key(old), f"chunk={chunk}\n{h.explain()}"


def feed(d, events, step: int | None = None, after=None):
    """Push `_merge_events`-shaped events into d one event per push, `step` events per scheduler
    run; `after(i)` is called after chunk i (to poll, or to register queries mid-flow)."""
    step = step or max(len(events), 1)
    for n, i in enumerate(range(0, len(events), step)):
        for name, ev in events[i : i + step]:
            if ev[-1] is None:
                d.heartbeat(name, ev[0])
            elif len(ev) == 3:
                d.push(name, [ev[2]], ts=[ev[0]], signs=[ev[1]])
            else:
                d.push(name, [ev[1]], ts=[ev[0]])
        d.run()
        if after is not None:
            after(n)


def random_join_inputs(seed: int, n: int) -> dict[str, list]:
    """Streams S, T, U of `n` rows (three per instant, values 0–2) and relation R's 60 random
    inserts and deletes of the rows it holds."""
    rng = np.random.default_rng(seed)
    inputs: dict[str, list] = {
        name: [(k // 3, (int(rng.integers(0, 3)), int(rng.integers(0, 3)))) for k in range(n)] for name in "STU"
    }
    rel, alive = [], []
    for k in range(60):
        if alive and rng.random() < 0.4:
            row = alive.pop(int(rng.integers(0, len(alive))))
            rel.append((k, -1, row))
        else:
            row = (int(rng.integers(0, 3)), int(rng.integers(0, 3)))
            alive.append(row)
            rel.append((k, 1, row))
    inputs["R"] = rel
    return inputs


def continue_from_checkpoint(d, query_id, tmp_path, step, warm: int, until: int):
    """Run `step(engine, t)` for t < warm, checkpoint the engine (pickled whole, as the server
    does), then step the original and the copy alike up to `until`; return both copies and the
    results each subscriber saw after the checkpoint (equal when the checkpoint is exact)."""
    from cqlstream.server import checkpoint

    sub = d.subscribe(query_id)
    for t in range(warm):
        step(d, t)
    sub.poll()
    path = checkpoint.write(tmp_path, 1, {"dsms": d}, d.catalog.functions)
    copy = checkpoint.load(path, d.catalog.functions)[1]["dsms"]
    copy_sub = copy.queries[query_id].subscriptions[0]
    for t in range(warm, until):
        step(d, t)
        step(copy, t)
    return copy, sub.poll().elements(), copy_sub.poll().elements()
