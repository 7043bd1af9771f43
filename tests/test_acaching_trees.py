"""A-Caching in trees of MJoins (thesis §5.3): a view that is a join, read by a query that joins
it with more inputs, is planned as two MJoins, the lower one's output (a relation whose tuples
leave when a component leaves its window, or is deleted) an input of the upper one. Caches and
A-Greedy probe orders in both joins never change a result: forced and chosen caches give what
caching off gives and what the reference evaluator gives, at push sizes 1, 7, 64 and all, under
shifting keys, window expiry and relation deletes; and for a left-deep tree of binary joins (an
XJoin: every intermediate result materialized) of four inputs. Deliberately broken versions (the
upper join's cache not told of the lower join's deletes) fail."""

from __future__ import annotations

import functools

import numpy as np
import pytest

from cqlstream.engine.adaptive import caching as CA
from cqlstream.engine.adaptive.cache_config import CachingConfig
from cqlstream.engine.adaptive.config import AdaptiveConfig
from cqlstream.engine.control import _query_selections
from cqlstream.engine.operators.join import JoinOp
from tests.engine_harness import run_engine, run_reference
from tests.test_acaching import CHUNKS, EAGER, FIXED, NO_SELECTION

# V = R ⋈ S ⋈ W (W a relation with deletes), Q = V ⋈ T ⋈ U
TREE_DDL = (
    "register stream R (a int); register stream S (a int, b int); register relation W (b int, c int);"
    " register stream T (c int, d int); register stream U (d int);"
    " register view V as select r.a as a, s.b as b, W.c as c from R [Rows 8] as r, S [Rows 8] as s, W"
    " where r.a = s.a and s.b = W.b;"
)
TREE_Q = "select * from V, T [Rows 8] as t, U [Range 3] as u where V.c = t.c and t.d = u.d"

# an XJoin of four inputs: ((A ⋈ B) ⋈ C) ⋈ D, each intermediate result a view
XJOIN_DDL = (
    "register stream A (k int); register stream B (k int, x int); register stream C (x int, y int);"
    " register stream D (y int);"
    " register view AB as select a.k as k, b.x as x from A [Rows 6] as a, B [Rows 6] as b where a.k = b.k;"
    " register view ABC as select AB.k as k, AB.x as x, c.y as y from AB, C [Range 3] as c where AB.x = c.x;"
)
XJOIN_Q = "select * from ABC, D [Rows 5] as d where ABC.y = d.y"
# the same join as one MJoin
MJOIN4_Q = (
    "select a.k, b.x, c.y, d.y from A [Rows 6] as a, B [Rows 6] as b, C [Range 3] as c, D [Rows 5] as d"
    " where a.k = b.k and b.x = c.x and c.y = d.y"
)


def _key(rng, k, n, lo=(0, 4), hi=(2, 7)):
    """A key over lo in the first half of the run, over hi in the second (a shift)."""
    a, b = lo if k < n // 2 else hi
    return int(rng.integers(a, b))


def _tree_inputs(n: int = 120, seed: int = 2) -> dict[str, list]:
    rng = np.random.default_rng(seed)
    inputs: dict[str, list] = {
        "R": [(k // 3, (_key(rng, k, n),)) for k in range(n)],
        "S": [(k // 3, (_key(rng, k, n), _key(rng, k, n))) for k in range(n)],
        "T": [(k // 3, (_key(rng, k, n), _key(rng, k, n))) for k in range(n)],
        "U": [(k // 3, (_key(rng, k, n),)) for k in range(n)],
    }
    rel: list[tuple] = []
    alive: list[tuple] = []
    for t in range(n // 3):
        if alive and rng.random() < 0.4:
            rel.append((t, -1, alive.pop(int(rng.integers(0, len(alive))))))
        else:
            row = (_key(rng, 3 * t, n), _key(rng, 3 * t, n))
            alive.append(row)
            rel.append((t, 1, row))
    inputs["W"] = rel
    return inputs


def _xjoin_inputs(n: int = 120, seed: int = 3) -> dict[str, list]:
    rng = np.random.default_rng(seed)
    return {
        "A": [(k // 3, (_key(rng, k, n),)) for k in range(n)],
        "B": [(k // 3, (_key(rng, k, n), _key(rng, k, n))) for k in range(n)],
        "C": [(k // 3, (_key(rng, k, n), _key(rng, k, n))) for k in range(n)],
        "D": [(k // 3, (_key(rng, k, n),)) for k in range(n)],
    }


@functools.cache
def _expected_tree() -> dict:
    return run_reference(TREE_DDL, TREE_Q, _tree_inputs())


def joins(h) -> list[JoinOp]:
    """The query's joins, the top one first (a walk down from the query's plan node)."""
    return [op for op in _query_selections(h) if isinstance(op, JoinOp)]


def _run_tree(ddl, q, inputs, chunk, act=None, caching=NO_SELECTION, adaptive=FIXED):
    """run_engine with `act(upper, lower)` called on the query's joins before any input."""

    def prepare(h):
        if act is not None:
            act(*joins(h))

    return run_engine(
        ddl,
        q,
        inputs,
        chunk=chunk,
        prepare=prepare,
        adaptive=AdaptiveConfig(**{**adaptive.__dict__, "caching": caching}),
    )


def _force(upper=None, lower=None):
    """Force (orders, pipeline, segment length) in the upper and/or the lower join."""

    def act(up: JoinOp, low: JoinOp) -> None:
        for op, spec in ((up, upper), (low, lower)):
            if spec is not None:
                orders, i, s = spec
                op.set_knob("probe_orders", orders)
                op.caching.force(i, s)

    return act


# (orders, pipeline, segment length) of a 3-input join: input 0 is V in the upper join (R in the
# lower): T's pipeline caching V alone (its entries are V tuples, killed by V's deletes), U's
# caching T ⋈ V and V's caching T ⋈ U
TREE_FORCED = [
    ([[1, 2], [0, 2], [1, 0]], 1, 1),
    ([[1, 2], [0, 2], [1, 0]], 2, 2),
    ([[1, 2], [2, 0], [1, 0]], 0, 2),
]
TREE_CASES = [(u, None) for u in range(3)] + [(None, lo) for lo in range(3)] + [(1, 2), (2, 0)]


def _tree_case(ci: int, chunk):
    u, lo = TREE_CASES[ci]
    act = _force(None if u is None else TREE_FORCED[u], None if lo is None else TREE_FORCED[lo])
    return _run_tree(TREE_DDL, TREE_Q, _tree_inputs(), chunk, act)


def test_a_view_join_read_by_a_join_is_a_tree_of_two_mjoins():
    _, h = _run_tree(TREE_DDL, TREE_Q, {"R": [], "S": [], "T": [], "U": [], "W": []}, None)
    up, low = joins(h)
    assert (up.n, low.n) == (3, 3)
    assert up.caching.active and low.caching.active


@pytest.mark.parametrize("chunk", CHUNKS)
@pytest.mark.parametrize("ci", range(len(TREE_CASES)))
def test_forced_caches_in_a_tree_same_results(chunk, ci):
    expected = _expected_tree()
    off, _ = _run_tree(TREE_DDL, TREE_Q, _tree_inputs(), chunk, caching=CachingConfig())
    got, h = _tree_case(ci, chunk)
    assert got == expected == off
    up, low = joins(h)
    u, lo = TREE_CASES[ci]
    for op, spec in ((up, u), (low, lo)):
        used = op.caching.used()
        if spec is None:
            assert not used
        else:
            (c,) = used
            _orders, i, s = TREE_FORCED[spec]
            assert (c.i, len(c.seg)) == (i, s)
            if chunk == 1:
                assert c.total_hits > 0 and c.maintained > 0
    if chunk is not None and u == 0:
        # V's deletes (window expiry below, W's deletes) killed combos of the upper join's cache
        assert up.caching.used()[0].maintained > 0


@pytest.mark.parametrize("chunk", CHUNKS)
def test_caches_chosen_in_both_joins_of_a_tree(chunk):
    """The re-optimizer of each join picks its caches while A-Greedy re-orders the pipelines."""
    adaptive = AdaptiveConfig(probability=1.0, window=8, profile_batch=2, alpha=1.0)
    got, h = _run_tree(TREE_DDL, TREE_Q, _tree_inputs(), chunk, caching=EAGER, adaptive=adaptive)
    assert got == _expected_tree()
    if chunk == 1:
        up, low = joins(h)
        assert up.caching.selections > 0 and low.caching.selections > 0


@functools.cache
def _expected_xjoin() -> dict:
    return run_reference(XJOIN_DDL, XJOIN_Q, _xjoin_inputs())


def test_an_xjoin_is_a_left_deep_tree_of_binary_joins():
    _, h = _run_tree(XJOIN_DDL, XJOIN_Q, {k: [] for k in "ABCD"}, None, caching=EAGER)
    assert [op.n for op in joins(h)] == [2, 2, 2]
    assert not any(op.caching.active for op in joins(h))  # a binary join has nothing to cache


@pytest.mark.parametrize("chunk", CHUNKS)
def test_xjoin_and_mjoin_same_results(chunk):
    """The XJoin, the single MJoin of the same four inputs with caches forced (the bench's X: every
    pipeline caching its longest prefix that holds the invariant) and chosen (P) agree."""
    inputs = _xjoin_inputs()
    expected = _expected_xjoin()
    assert run_reference(XJOIN_DDL, MJOIN4_Q, inputs) == expected
    xjoin, _ = _run_tree(XJOIN_DDL, XJOIN_Q, inputs, chunk, caching=CachingConfig())
    assert xjoin == expected

    def prepare(h):
        (op,) = joins(h)
        op.set_knob("probe_orders", [[1, 2, 3], [0, 2, 3], [0, 1, 3], [0, 1, 2]])
        op.caching.force(2, 2)  # C's pipeline caches A ⋈ B (the XJoin's first intermediate)
        op.caching.force(3, 3)  # D's caches A ⋈ B ⋈ C (its second)

    x, _ = run_engine(
        XJOIN_DDL,
        MJOIN4_Q,
        inputs,
        chunk=chunk,
        prepare=prepare,
        adaptive=AdaptiveConfig(**{**FIXED.__dict__, "caching": NO_SELECTION}),
    )
    assert x == expected
    adaptive = AdaptiveConfig(probability=1.0, window=8, profile_batch=2, alpha=1.0, caching=EAGER)
    p, _ = run_engine(XJOIN_DDL, MJOIN4_Q, inputs, chunk=chunk, adaptive=adaptive)
    assert p == expected


# deliberately broken versions: each must make some push size give a wrong result
def _inserts_not_told(monkeypatch):
    # the upper join's cache over V alone is not told of the lower join's new result tuples
    orig = CA.supply

    def supply(ac, tables, c, i, idx, seq):
        if not (seq is None and i == 0 and "V.c" in repr(ac.op.node)):
            orig(ac, tables, c, i, idx, seq)

    monkeypatch.setattr(CA, "supply", supply)


def _deletes_in_call_ignored(monkeypatch):
    # stored combos are taken as alive at the probe's position, whatever deleted a component
    # earlier in the same call
    monkeypatch.setattr(CA, "_hi_of_rows", lambda t, rows: np.full(len(rows), np.iinfo(np.int64).max))


@pytest.mark.parametrize("broken", [_inserts_not_told, _deletes_in_call_ignored])
def test_the_differential_check_catches_broken_tree_caches(monkeypatch, broken):
    broken(monkeypatch)
    wrong = [chunk for chunk in CHUNKS if _tree_case(0, chunk)[0] != _expected_tree()]
    assert wrong, "the broken version went unnoticed"
