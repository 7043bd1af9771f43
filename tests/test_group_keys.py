"""Group keys of aggregates (engine/aggregates/keys.py): packed keys through one interner, the
layout widened as key ranges grow, the move to chained interners past 62 bits.

Unit tests check `GroupKeys` against a dict model batch by batch (the same key always gets the
same id, ids are dense, `fresh` names exactly the groups a batch created with a row of each);
differential tests run grouped aggregates whose key ranges grow mid-stream, jump past 62 bits,
mix NULLs, strings and floats, and whose groups empty and come back, against the reference
evaluator at 1, 7 and all events per push, over windows and relations with deletes.
"""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cqlstream.cql.types import FLOAT, INT, VARCHAR
from cqlstream.engine.aggregates.keys import GroupKeys, IntInterner
from cqlstream.engine.operators.aggregate import AggregateOp
from tests.engine_harness import assert_same

SETTINGS = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow])
DDL = "register stream S (a int, b int, f float, s varchar(4)); register relation R (a int, b int, f float, s varchar(4));"

small = st.integers(-3, 3)
grown = st.sampled_from([0, 1, 7, 1000, -1000, 70_000, 2**31, -(2**40)])
huge = st.sampled_from([2**62, -(2**62), 2**63 - 1, -(2**63), 5])
int_vals = st.one_of(small, grown, huge, st.just(None))
str_vals = st.one_of(st.sampled_from(["x", "y", "zz", ""]), st.just(None))
float_vals = st.one_of(st.sampled_from([0.5, -0.0, 0.0, 1e300, -2.5]), st.just(None))
COLS = {"int": (INT, int_vals), "str": (VARCHAR, str_vals), "float": (FLOAT, float_vals | st.just(float("nan")))}


def _column(vals: list, kind: str) -> tuple[np.ndarray, np.ndarray | None]:
    m = np.array([v is None for v in vals], bool)
    if kind == "int":
        v = np.array([0 if x is None else x for x in vals], np.int64)
    elif kind == "float":
        v = np.array([0.0 if x is None else x for x in vals], np.float64)
    else:
        v = np.array(["" if x is None else x for x in vals], object)
    return v, (m if m.any() else None)


def _model_key(row: tuple) -> tuple:
    """The key as the engine compares it: -0.0 equals 0.0, NaN equals NaN, NULL is its own."""
    return tuple(
        ("nan",) if isinstance(v, float) and v != v else (0.0 if isinstance(v, float) and v == 0 else v) for v in row
    )


@settings(max_examples=150, **SETTINGS)
@given(st.data())
def test_group_keys_are_a_consistent_dense_map(data):
    kinds = data.draw(st.lists(st.sampled_from(list(COLS)), min_size=1, max_size=4))
    gk = GroupKeys([COLS[k][0] for k in kinds])
    seen: dict[tuple, int] = {}
    for _ in range(data.draw(st.integers(1, 6))):
        n = data.draw(st.integers(0, 12))
        rows = [tuple(data.draw(COLS[k][1]) for k in kinds) for _ in range(n)]
        cols = [_column([r[i] for r in rows], k) for i, k in enumerate(kinds)]
        before = gk.n
        gid = gk.map([c[0] for c in cols], [c[1] for c in cols], n).tolist()
        new_ids, new_rows = (a.tolist() for a in gk.fresh)
        created = {}
        for r, g in zip(rows, gid):
            k = _model_key(r)
            if k not in seen:
                created[k] = g
            assert seen.setdefault(k, g) == g
        assert sorted(new_ids) == sorted(created.values()) == list(range(before, gk.n))
        for g, i in zip(new_ids, new_rows):
            assert created[_model_key(rows[i])] == g  # the row given for a new group has its key
    assert sorted(seen.values()) == list(range(len(seen))) == list(range(gk.n))


def test_layout_widens_in_place_then_moves_to_the_chain_keeping_ids():
    gk = GroupKeys([INT, INT])
    ids = []
    batches = [
        [(0, 1), (1, 1), (0, 2)],
        [(500, 1), (0, 1)],  # outside the first layout: re-packed, ids kept
        [(-(2**40), 9), (1, 1)],
        [(2**62, -(2**62)), (0, 2), (500, 1)],  # past 62 bits: chained interners
        [(3, 3), (2**62, -(2**62)), (-(2**40), 9)],
    ]
    modes = []
    for b in batches:
        a = np.array([r[0] for r in b], np.int64)
        c = np.array([r[1] for r in b], np.int64)
        ids.append(gk.map([a, c], [None, None], len(b)).tolist())
        modes.append(gk.packed is not None)
    assert modes == [True, True, True, False, False]
    assert ids == [[0, 1, 2], [3, 0], [4, 1], [5, 2, 3], [6, 5, 4]]


def _pairs(n: int, big: bool) -> list:
    """Stream events whose key `a` grows in range over time (and past 62 bits when `big`)."""
    out = []
    for t in range(n):
        a = (t * 37) % 11 * 10 ** (t // 6)
        if big and t > n // 2 and t % 3 == 0:
            a = -(2**63) if t % 2 else 2**63 - 1
        out.append((t // 2, (a, None if t % 5 == 0 else t % 3, float(t % 4) / 4, "k" + str(t % 2))))
    return out + [(n, None)]


@settings(max_examples=30, **SETTINGS)
@given(st.integers(5, 40), st.booleans(), st.sampled_from(["[Range 3]", "[Rows 4]", "[Now]", "[Range Unbounded]"]))
def test_aggregates_over_growing_and_huge_keys(n, big, win):
    for q in [
        f"select a, b, count(*), sum(f) from S {win} group by a, b",
        f"select b, a, s, max(f), count(distinct a) from S {win} group by b, a, s",
        f"select f, a, count(*) from S {win} group by f, a",
    ]:
        assert_same(DDL, q, {"S": _pairs(n, big)}, float_digits=9)


@st.composite
def relation_events(draw):
    """Inserts and deletes over keys from small to huge: groups empty and come back."""
    events, live, t = [], [], 0
    for _ in range(draw(st.integers(0, 30))):
        t += draw(st.sampled_from([0, 1, 1, 2]))
        if live and draw(st.booleans()):
            r = live.pop(draw(st.integers(0, len(live) - 1)))
            events.append((t, -1, r))
            if draw(st.integers(0, 2)) == 0:  # back at the same instant or later
                t += draw(st.integers(0, 1))
                live.append(r)
                events.append((t, +1, r))
        else:
            r = (draw(int_vals), draw(st.one_of(small, st.just(None))), draw(float_vals), draw(str_vals))
            live.append(r)
            events.append((t, +1, r))
    return events


@settings(max_examples=60, **SETTINGS)
@given(relation_events(), st.sampled_from(["a, b", "b, s, a", "s, f", "a"]))
def test_aggregates_over_relations_with_deletes(events, keys):
    q = f"select {keys}, count(*), count(b), min(s) from R group by {keys}"
    assert_same(DDL, q, {"R": events}, float_digits=9)


def test_compaction_after_the_move_to_the_chain(monkeypatch):
    """Short-lived groups with huge keys: compaction renumbers groups held by chained keys."""
    monkeypatch.setattr(AggregateOp, "COMPACT_MIN", 8)
    s = [(t, ((t % 30) * 2**57 + t if t % 4 else -(t % 30) * 2**57, t % 3, 0.5, "x")) for t in range(1, 60)]
    s += [(70, None)]
    for q in [
        "select a, b, count(*) from S [Range 2] group by a, b",
        "select b, a, max(a) from S [Rows 3] group by b, a",
    ]:
        assert_same(DDL, q, {"S": s})


@settings(max_examples=150, **SETTINGS)
@given(st.data())
def test_int_interner_ids_equal_a_model_with_releases(data):
    """IntInterner batch by batch against a dict model: a batch's new keys get ids in key order,
    released ids first (in release order), then fresh ones; released keys are forgotten. Keys
    drawn from a moving range land before, among and past the known ones (block copy, append
    and merge); narrow and wide ranges take the direct table and the sorted search."""
    it = IntInterner()
    model: dict[int, int] = {}
    free: list[int] = []
    n = 0
    scale = data.draw(st.sampled_from([1, 1000, 2**40]))
    for step in range(data.draw(st.integers(1, 8))):
        base = data.draw(st.integers(-3, 3)) + step
        x = [scale * (base + data.draw(st.integers(-2, 4))) for _ in range(data.draw(st.integers(0, 20)))]
        got = it.map(np.array(x, np.int64)).tolist()
        for k in sorted(set(x) - set(model)):
            if free:
                model[k] = free.pop(0)
            else:
                model[k], n = n, n + 1
        assert got == [model[k] for k in x]
        live = sorted(model)
        gone = data.draw(st.lists(st.sampled_from(live), unique=True)) if live else []
        it.release(np.array([model[k] for k in gone], np.int64))
        free += [model.pop(k) for k in gone]
    assert it.n == n
