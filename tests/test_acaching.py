"""A-Caching never changes a result: joins with subresult caches (forced, added and dropped in
the middle of the stream, or chosen by the re-optimizer) give what they give with caching off and
what the reference evaluator gives, at push sizes 1, 7, 64 and all, under shifting key
distributions, with relation deletes and window expiry; and the caches are maintained (hits
stay high while the windows slide), not emptied on every update."""

from __future__ import annotations

import functools

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tests.engine_harness as H
from cqlstream.engine.adaptive import cache_store as CS
from cqlstream.engine.adaptive.cache_config import CachingConfig
from cqlstream.engine.adaptive.cache_store import SegmentCache
from cqlstream.engine.adaptive.caching import stable_codes
from cqlstream.engine.adaptive.config import AdaptiveConfig
from cqlstream.engine.errors import KnobError
from cqlstream.engine.operators.join import JoinOp
from tests.engine_harness import run_engine, run_reference
from tests.test_adaptive_mjoin import _join

CHUNKS = [1, 7, 64, None]
FIXED = AdaptiveConfig(policy="a-greedy", probability=1e-9)  # orders stay as set (profiling never fires)
NO_SELECTION = CachingConfig(enabled=True, interval_seconds=0, interval_tuples=10**9, window=10**6)

DDL3 = "register stream R (a int); register stream S (a int, b int); register stream T (b int);"
Q3 = "select * from R [Rows 8] as r, S [Rows 8] as s, T [Range 4] as t where r.a = s.a and s.b = t.b"


def _shifting3(n=150, seed=1):
    """R, S, T with keys over 0..4 in the first half and 3..9 in the second."""
    rng = np.random.default_rng(seed)

    def key(k):
        return int(rng.integers(0, 5)) if k < n // 2 else int(rng.integers(3, 10))

    return {
        "R": [(k // 3, (key(k),)) for k in range(n)],
        "S": [(k // 3, (key(k), key(k))) for k in range(n)],
        "T": [(k // 3, (key(k),)) for k in range(n)],
    }


_EXPECTED: dict[str, object] = {}


def _expected(ddl, q, inputs):
    """The reference's result, computed once per test module run (it is the slow part)."""
    key = repr((ddl, q, inputs))
    if key not in _EXPECTED:
        _EXPECTED[key] = run_reference(ddl, q, inputs)
    return _EXPECTED[key]


@functools.cache
def _expected3(n: int = 150):
    return run_reference(DDL3, Q3, _shifting3(n))


def _run(ddl, q, inputs, chunk, actions, caching=NO_SELECTION, adaptive=FIXED):
    """run_engine with `actions[k](join)` called before the k-th scheduler run (0: at start)."""
    orig = H._start

    def start(*a, **kw):
        d, h, sub = orig(*a, **kw)
        op = _join(h)
        calls = [0]
        run = d.run

        def run_and_act(*ra, **rk):
            act = actions.get(calls[0])
            if act is not None:
                act(op)
            calls[0] += 1
            return run(*ra, **rk)

        d.run = run_and_act
        if 0 in actions:
            actions[0](op)
            calls[0] = 1
        return d, h, sub

    H._start = start
    try:
        return run_engine(
            ddl, q, inputs, chunk=chunk, adaptive=AdaptiveConfig(**{**adaptive.__dict__, "caching": caching})
        )
    finally:
        H._start = orig


def _orders(orders):
    return lambda op: op.set_knob("probe_orders", orders)


def _force(i, s, orders=None):
    def act(op):
        if orders is not None:
            op.set_knob("probe_orders", orders)
        op.caching.force(i, s)

    return act


# (orders, pipeline, segment length): R's pipeline caching S, and S⋈T (prefix invariant:
# S's pipeline starts with T, T's with S); T's pipeline caching S and S⋈R
FORCED = [
    ([[1, 2], [2, 0], [1, 0]], 0, 2),
    ([[1, 2], [0, 2], [1, 0]], 0, 1),
    ([[1, 2], [0, 2], [1, 0]], 2, 2),
    ([[1, 2], [0, 2], [1, 0]], 1, 1),
]


@pytest.mark.parametrize("chunk", CHUNKS)
@pytest.mark.parametrize("fi", range(len(FORCED)))
def test_forced_caches_same_results(chunk, fi):
    orders, i, s = FORCED[fi]
    inputs = _shifting3()
    expected = _expected3()
    off, _ = _run(DDL3, Q3, inputs, chunk, {0: _orders(orders)}, caching=CachingConfig())
    got, h = _run(DDL3, Q3, inputs, chunk, {0: _force(i, s, orders)})
    assert got == expected == off
    (c,) = _join(h).caching.used()
    assert (c.i, len(c.seg)) == (i, s)
    if chunk == 1:
        # maintained entries: nearly every probe after the first few hits, though every push
        # changes a window the segment covers
        assert c.total_hits > 0.8 * c.total_probes and c.maintained > 0


@pytest.mark.parametrize("chunk", CHUNKS)
def test_add_and_drop_in_the_middle(chunk):
    ddl = DDL3 + " register stream U (b int, c int);"
    q = (
        "select * from R [Rows 10] as r, S [Rows 10] as s, T [Rows 12] as t, U [Range 5] as u "
        "where r.a = s.a and s.b = t.b and t.b = u.b"
    )
    rng = np.random.default_rng(4)
    n = 100
    inputs = {
        "R": [(k // 4, (int(rng.integers(0, 4 if k < n // 2 else 8)),)) for k in range(n)],
        "S": [(k // 4, (int(rng.integers(0, 4)), int(rng.integers(0, 4)))) for k in range(n)],
        "T": [(k // 4, (int(rng.integers(0, 4)),)) for k in range(n)],
        "U": [(k // 4, (int(rng.integers(0, 4)), k)) for k in range(n)],
    }
    orders = [[1, 2, 3], [2, 3, 0], [1, 3, 0], [2, 1, 0]]
    runs = len(inputs["R"]) * 4 // (chunk or 10**9) + 1
    third = max(runs // 3, 1)
    actions = {
        0: _force(3, 1, orders),  # U's pipeline caches T
        third: lambda op: (op.caching.drop(3), op.caching.force(0, 3)),  # then R's caches S⋈T⋈U
        2 * third: lambda op: (op.caching.drop(0), op.caching.force(3, 2)),  # then U's caches T⋈S
    }
    expected = _expected(ddl, q, inputs)
    got, h = _run(ddl, q, inputs, chunk, actions)
    assert got == expected
    log = list(_join(h).caching.log)
    if chunk is not None:
        assert [e["cache"] for e in log if e.get("to") == "used"] == ["3:[2]", "0:[1, 2, 3]", "3:[2, 1]"]
        assert sum(e.get("reason") == "dropped by hand" for e in log) == 2


RANDOM_DDL = (
    "register stream S (a int, b int); register stream T (a int, b int); "
    "register stream U (a int, b int); register relation R (a int, b int);"
)
RANDOM_QUERIES = [
    # chain, star, a cycle, and a relation with deletes
    "select * from S [Rows 4] as s, T [Range 3] as t, U [Rows 5] as u where s.a = t.a and t.b = u.b",
    "select * from S [Range 2] as s, T [Rows 3] as t, U [Range 4] as u where s.a = t.a and s.a = u.a",
    "select * from S [Rows 4] as s, T [Rows 4] as t, U [Rows 4] as u where s.a = t.a and t.b = u.b and u.a = s.b",
    "select * from S [Rows 3] as s, T [Range 3] as t, R where s.a = t.a and t.b = R.b",
    "select * from S [Rows 3] as s, R, T [Rows 5] as t where s.a = R.a and R.b = t.b",
]
EAGER = CachingConfig(
    enabled=True,
    interval_seconds=0,
    interval_tuples=40,
    window=2,
    distinct_window=8,
    probe_cost=0.0,
    hit_row_cost=0.0,
    update_cost=0.01,
    threshold=0.0,
    costs="rows",  # the step-count model: selections independent of timing
    profile_every=1,
)


def _random_inputs(seed, n=90):
    return H.random_join_inputs(seed, n)


def _force_any(op: JoinOp) -> None:
    """Force the longest eligible cache of the first pipeline that has one."""
    for i in range(op.n):
        for s in range(op.n - 1, 0, -1):
            try:
                op.caching.force(i, s)
                return
            except ValueError:
                continue


@pytest.mark.parametrize("backoff", [1, 8])  # A-Caching's back-off (engine/adaptive/backoff.py)
@pytest.mark.parametrize("seed", range(2))
@pytest.mark.parametrize("qi", range(len(RANDOM_QUERIES)))
def test_random_joins_with_deletes_and_expiry(seed, qi, backoff):
    inputs = _random_inputs(seed)
    q = RANDOM_QUERIES[qi]
    expected = run_reference(RANDOM_DDL, q, inputs)
    adaptive = AdaptiveConfig(probability=1.0, window=8, profile_batch=2, alpha=1.0)
    for chunk in (1, 7, None):
        forced, _ = _run(RANDOM_DDL, q, inputs, chunk, {0: _force_any}, adaptive=FIXED)
        assert forced == expected, f"forced cache, chunk {chunk}"
        # caches chosen by the re-optimizer while A-Greedy re-orders the pipelines (orders that
        # break a segment drop its cache)
        eager = CachingConfig(**{**EAGER.__dict__, "backoff": backoff})
        chosen, _h = _run(RANDOM_DDL, q, inputs, chunk, {}, caching=eager, adaptive=adaptive)
        assert chosen == expected, f"selected caches, chunk {chunk}"


def test_reoptimizer_selects_caches():
    inputs = _shifting3(n=400)
    expected = _expected3(400)
    got, h = _run(DDL3, Q3, inputs, 1, {}, caching=EAGER, adaptive=FIXED)
    assert got == expected
    ac = _join(h).caching
    assert ac.selections >= 2
    used = ac.used()
    assert used and all(c.total_hits > 0.5 * c.total_probes for c in used)
    assert any(c.state in ("unused", "profiled") for c in ac.cands.values())


def test_thesis_fixture_entries_are_maintained():
    """Ex 5.4.1–5.4.4: R1(A) ⋈ R2(A, B) ⋈ R3(B), the R2⋈R3 segment cached in ΔR1's pipeline.
    ⟨1⟩ misses and creates (⟨1⟩, {⟨1,2,2⟩}); ⟨3⟩ into R3 adds ⟨1,3,3⟩ under key ⟨1⟩ (key ⟨2⟩
    is absent: ignored); the next ⟨1⟩ hits and outputs both."""
    ddl = "register stream R1 (a int); register relation R2 (a int, b int); register relation R3 (b int);"
    q = "select * from R1 [Now] as r1, R2, R3 where r1.a = R2.a and R2.b = R3.b"
    # heartbeats let the join run at every instant (else it waits for the relations' time)
    inputs = {
        "R1": [(2, (1,)), (3, (1,)), (5, (1,)), (6, None)],
        "R2": [(0, 1, (1, 2)), (0, 1, (1, 3)), (0, 1, (2, 3))] + [(t, 0, None) for t in range(1, 7)],
        "R3": [(1, 1, (2,)), (2, 0, None), (3, 0, None), (4, 1, (3,)), (5, 0, None), (6, 0, None)],
    }
    expected = run_reference(ddl, q, inputs)
    got, h = _run(ddl, q, inputs, 1, {0: _force(0, 2, [[1, 2], [2, 0], [1, 0]])})
    assert got == expected
    assert got[5] == {(1, 1, 2, 2): 1, (1, 1, 3, 3): 1}
    (c,) = _join(h).caching.used()
    assert c.store is not None and len(c.store) == 1 and c.store.rows == 2
    # probes: the three inserts and the [Now] window's deletes; only the first insert misses
    assert (c.total_probes, c.total_hits) == (6, 5)


def test_store_operations():
    st = SegmentCache(2, 1, capacity=10**6)
    k = lambda *v: np.array([[0, x] for x in v], np.int64)  # noqa: E731
    assert st.create(k(1, 2), k(1, 1), np.array([[10], [11]], np.uint64)) == 2
    present, q, ids = st.lookup(k(1, 3, 2))
    assert present.tolist() == [True, False, True] and sorted(zip(q.tolist(), ids[:, 0].tolist())) == [(0, 10), (0, 11)]
    # a dead combo leaves, a new combo under a present key joins, one under an absent key is ignored
    assert st.invalidate(0, np.array([10], np.uint64)) == 1
    assert st.maintain(k(1, 3), np.array([[12], [13]], np.uint64)) == 1
    assert st.contents() == {(0, 1): [(11,), (12,)], (0, 2): []} and len(st) == 2
    # key 2 has no combos now but stays present (an empty result is a result)
    assert st.lookup(k(2))[0].tolist() == [True]
    st.capacity = st.nbytes() - 1  # over budget: the oldest entry goes
    st.create(k(5), k(5), np.array([[20]], np.uint64))
    assert (0, 1) not in st.contents() and st.evicted >= 1
    # key 1 back under a new entry: its old (orphaned) combos are not returned
    st.capacity = 10**6
    assert st.create(k(1), k(1), np.array([[30]], np.uint64)) == 1
    assert st.lookup(k(1))[2][:, 0].tolist() == [30]


_KEY, _ID = st.integers(0, 2), st.integers(0, 4)
_STORE_OPS = st.lists(
    st.one_of(
        st.tuples(st.just("create"), st.lists(_KEY, max_size=4), st.lists(st.tuples(_KEY, _ID), max_size=8)),
        st.tuples(st.just("add"), st.lists(st.tuples(_KEY, _ID), max_size=12)),
        st.tuples(st.just("kill"), st.integers(0, 1), st.lists(_ID, max_size=4)),
        st.tuples(st.just("cap"), st.integers(0, 2000)),
    ),
    max_size=40,
)


@given(_STORE_OPS, st.booleans())
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_store_against_a_dict_model(ops, collide):
    """The run-based store against a dict key → combos: after any sequence of entry creations,
    combo additions, deletions (by component id) and capacity cuts (evicting oldest entries),
    every present key's lookup returns exactly the model's combos for it; a key the store
    dropped (eviction, hash clash) is simply absent. `collide`: every third key shares a hash,
    so clashes and hash confirmation are exercised."""
    orig = CS.key_hash
    if collide:
        CS.key_hash = lambda keys: orig(keys // np.array([1, 3], np.int64))  # type: ignore[assignment]
    try:
        store = SegmentCache(2, 2, capacity=10**6)
        store.COMPACT_MIN = 4  # compactions happen within a short sequence too
        model: dict[int, list[tuple[int, int]]] = {}  # key → combos (ids), for the keys present
        nxt = [0]

        def combos(pairs):
            ids = []
            for _k, _v in pairs:
                nxt[0] += 1
                ids.append((nxt[0] % 5, _v))
            return ids

        k2 = lambda v: np.array([[0, x] for x in v], np.int64).reshape(-1, 2)  # noqa: E731
        for op in ops:
            if op[0] == "create":
                keys = sorted(set(x for x in op[1] if x not in model))
                ids = combos(op[2])
                ck = [kk for kk, _ in op[2]]
                store.create(k2(keys), k2(ck), np.array(ids, np.uint64).reshape(-1, 2))
                for x in keys:
                    if (0, x) in store.contents():
                        model[x] = [i for kk, i in zip(ck, ids) if kk == x]
            elif op[0] == "add":
                ids = combos(op[1])
                ck = [kk for kk, _ in op[1]]
                store.maintain(k2(ck), np.array(ids, np.uint64).reshape(-1, 2))
                for kk, i in zip(ck, ids):
                    if kk in model:
                        model[kk].append(i)
            elif op[0] == "kill":
                pos, gone = op[1], sorted(set(op[2]))
                store.invalidate(pos, np.array(gone, np.uint64))
                for kk in model:
                    model[kk] = [i for i in model[kk] if i[pos] not in gone]
            else:
                store.capacity = op[1]
                nxt[0] += 1
                fresh = 1000 + 3 * nxt[0]  # a new key (its own hash class when colliding)
                store.create(k2([fresh]), k2([]), np.zeros((0, 2), np.uint64))
                model[fresh] = []
            got = store.contents()
            for x in list(model):
                if (0, x) not in got:
                    del model[x]  # evicted (or never admitted): absent, which is allowed
            assert set(got) == {(0, x) for x in model}
            assert got == {(0, x): sorted(v) for x, v in model.items()}
            assert store.rows == sum(len(v) for v in model.values())
            q = sorted(model) + [3, 4]
            present, rep, ids = store.lookup(k2(q))
            assert present.tolist() == [x in model for x in q]
            found = sorted((q[r], tuple(i)) for r, i in zip(rep.tolist(), ids.tolist()))
            assert found == sorted((x, i) for x in model for i in model[x])
            if op[0] == "cap" and op[1] > 0:  # a creation fits the store to its capacity
                assert store.nbytes() <= op[1]
    finally:
        CS.key_hash = orig


@given(
    st.lists(st.tuples(st.integers(0, 3), st.integers(-2, 2)), max_size=30),
    st.lists(st.tuples(st.integers(0, 3), st.integers(-2, 2)), max_size=30),
)
@settings(max_examples=60, deadline=None)
def test_key_matching_helpers_against_brute_force(qs, ds):
    """match_keys pairs exactly the equal key rows; key_hash is equal on equal rows; in_sorted is
    membership; first_per_key keeps one row per distinct key."""
    q = np.array(qs, np.int64).reshape(-1, 2)
    d = np.array(ds, np.int64).reshape(-1, 2)
    qh, dh = CS.key_hash(q), CS.key_hash(d)
    i, j = CS.match_keys(qh, q, dh, d)
    want = sorted((a, b) for a in range(len(q)) for b in range(len(d)) if qs[a] == ds[b])
    assert sorted(zip(i.tolist(), j.tolist())) == want
    for a in range(len(q)):
        for b in range(len(d)):
            if qs[a] == ds[b]:
                assert qh[a] == dh[b]
    first = CS.first_per_key(qh)
    assert sorted({qs[k] for k in first.tolist()}) == sorted(set(qs)) and len(first) == len(set(qs))
    ids = np.array([x for x, _ in ds], np.uint64)
    gone = np.array(sorted({x for x, _ in qs}), np.uint64)
    assert CS.in_sorted(ids, gone).tolist() == np.isin(ids, gone).tolist()


def test_colliding_hashes_are_confirmed_on_the_key(monkeypatch):
    """Every key hashing alike: a lookup never takes another key's combos, a second colliding
    key is not cached (a miss), and a present key still finds its own combos."""
    monkeypatch.setattr(CS, "key_hash", lambda keys: np.zeros(len(keys), np.uint64))
    st_ = SegmentCache(2, 1, capacity=10**6)
    k = lambda *v: np.array([[0, x] for x in v], np.int64)  # noqa: E731
    assert st_.create(k(1, 2), k(1, 2), np.array([[10], [11]], np.uint64)) == 0  # two keys, one hash
    assert st_.create(k(1), k(1, 2), np.array([[10], [11]], np.uint64)) == 1
    present, q, ids = st_.lookup(k(2, 1))
    assert present.tolist() == [False, True] and ids[:, 0].tolist() == [10] and q.tolist() == [1]
    assert st_.create(k(2), k(2), np.array([[11]], np.uint64)) == 0  # clashes with key 1's hash
    assert st_.invalidate(0, np.array([10], np.uint64)) == 1
    assert st_.maintain(k(1, 2), np.array([[12], [13]], np.uint64)) == 1
    # key 2's combo (same hash) was never stored under key 1's entry
    present, q, ids = st_.lookup(k(1))
    assert present.tolist() == [True] and ids[:, 0].tolist() == [12]


def test_stable_codes():
    ci, _vi = stable_codes(np.array([3, -1], np.int64), None)
    cf, vf = stable_codes(np.array([3.0, -0.0, 2.5, np.nan]), None)
    assert (ci[0] == cf[0]).all() and (cf[1] == stable_codes(np.array([0]), None)[0][0]).all()
    assert not (cf[2] == ci[0]).all() and vf.tolist() == [True, True, True, False]
    assert stable_codes(np.array(["a"], object), None) is None


def test_knobs_control_table_explain_events_and_off():
    inputs = _shifting3()
    _got, h = _run(DDL3, Q3, inputs, 7, {0: _force(0, 2, [[1, 2], [2, 0], [1, 0]])})
    op = _join(h)
    t = op.control_table()
    assert t["knobs"]["caching"] is True and t["knobs"]["cache_memory"] == NO_SELECTION.memory
    (used,) = [c for c in t["caching"]["candidates"] if c["state"] == "used"]
    assert used["segment"] == [1, 2] and used["entries"] > 0 and used["hits"] > 0
    assert used["runs"] >= 1 and used["rows_held"] >= used["rows"]
    (line,) = [x for x in op.explain_detail() if x.startswith("caches (")]
    assert "0: [1, 2]" in line
    ev = op.events()
    assert ("cache_used", 0.0) in ev and op.events() == []
    op.set_knob("cache_memory", 4096)
    assert not op.caching.used() and ("cache_dropped", 0.0) in op.events()
    op.set_knob("adaptive", "off")
    assert not op.caching.active
    op.set_knob("adaptive", "a-greedy")
    op.set_knob("caching", "off")
    assert not op.caching.active and op.control_table()["knobs"]["caching"] is False
    with pytest.raises(KnobError):
        op.set_knob("cache_memory", -1)
    with pytest.raises(KnobError):
        op.set_knob("caching", "maybe")
    op.set_knob("cache_interval_tuples", 500)
    assert op.caching.config.interval_tuples == 500


def test_string_keys_are_not_cached():
    ddl = "register stream R (a varchar); register stream S (a varchar, b int); register stream T (b int);"
    q = "select * from R [Rows 5] as r, S [Rows 5] as s, T [Rows 5] as t where r.a = s.a and s.b = t.b"
    rng = np.random.default_rng(2)
    inputs = {
        "R": [(k, (str(int(rng.integers(0, 3))),)) for k in range(40)],
        "S": [(k, (str(int(rng.integers(0, 3))), int(rng.integers(0, 3)))) for k in range(40)],
        "T": [(k, (int(rng.integers(0, 3)),)) for k in range(40)],
    }
    got, h = _run(ddl, q, inputs, 1, {0: _force(0, 1)})
    assert got == run_reference(ddl, q, inputs)
    assert not _join(h).caching.used()


# ------------------------------------------------------------------ partial hits (Hypothesis)


@st.composite
def _partial_hit_case(draw):
    """A 3-way join's inputs over a key domain small enough that keys repeat (so calls mix hits
    and misses), a forced cache, a push size, and the instant at which the cache is forced."""
    n = draw(st.integers(6, 60))
    dom = draw(st.integers(1, 6))
    per = draw(st.integers(1, 4))  # events per instant
    keys = draw(st.lists(st.integers(0, dom - 1), min_size=3 * n, max_size=3 * n))
    inputs = {
        "R": [(k // per, (keys[k],)) for k in range(n)],
        "S": [(k // per, (keys[n + k], keys[(n + 3 * k) % (3 * n)])) for k in range(n)],
        "T": [(k // per, (keys[2 * n + k],)) for k in range(n)],
    }
    fi = draw(st.integers(0, len(FORCED) - 1))
    chunk = draw(st.sampled_from([1, 2, 3, 7, 64, None]))
    at = draw(st.integers(0, 4))
    return inputs, fi, chunk, at


def test_partial_hit_calls_happen_and_agree():
    """At push sizes 3 and 7 over shifting keys, many calls mix hits and misses (the hits skip the
    segment, the misses run it): the result is still caching off's and the reference's."""
    orders, i, s = FORCED[0]
    for chunk in (3, 7):
        got, h = _run(DDL3, Q3, _shifting3(), chunk, {0: _force(i, s, orders)})
        assert got == _expected3()
        (c,) = _join(h).caching.used()
        assert c.calls_partial >= 3 and c.total_hits > c.calls_partial, chunk


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_partial_hit_case())
def test_partial_hits_same_results(case):
    """Calls where some events hit and others miss: the hits take the cached combos, the misses
    run the segment, and the merged result equals caching off and the reference evaluator."""
    inputs, fi, chunk, at = case
    orders, i, s = FORCED[fi]
    off, _ = _run(DDL3, Q3, inputs, chunk, {0: _orders(orders)}, caching=CachingConfig())
    forced = []

    def force(op):
        _force(i, s, orders)(op)
        forced.append(op)

    acts = {0: _orders(orders)} if at else {}
    acts[at] = force
    got, h = _run(DDL3, Q3, inputs, chunk, acts)
    assert got == off == _expected(DDL3, Q3, inputs)
    if forced:  # the cache stays (forced) and counts its hits among its probes
        (c,) = _join(h).caching.used()
        assert (c.i, len(c.seg)) == (i, s) and c.total_hits <= c.total_probes


Q_BAND = (
    "select * from R [Rows 6] as r, S [Rows 6] as s, T [Rows 12] as t "
    "where s.b = t.b and r.a >= s.a - 1 and r.a <= s.a + 1"
)


@functools.cache
def _band_inputs(n: int = 240):
    """The bench's costly-probe shape in small: T's keys over 3 values, so T's cache over S ⋈ R
    (joined by a band no index serves) holds many combinations per key, and its store runs are
    merged and its dead combinations dropped many times over the stream."""
    rng = np.random.default_rng(11)
    return {
        "R": [(k // 4, (int(rng.integers(0, 4)),)) for k in range(n // 4)],
        "S": [(k // 4, (int(rng.integers(0, 4)), int(rng.integers(0, 3)))) for k in range(n // 4)],
        "T": [(k // 8, (int(rng.integers(0, 3)),)) for k in range(n // 2)],
    }


@pytest.mark.parametrize("chunk", CHUNKS)
def test_cache_over_a_band_segment_same_results(chunk):
    """T's pipeline caching S ⋈ R (S probes R first, T probes S then R: the prefix invariant)
    gives the reference's result and caching off's at every push size, with the store's runs
    merged and compacted while the windows slide."""
    inputs = _band_inputs()
    expected = _expected(DDL3, Q_BAND, inputs)
    orders = [[1, 2], [0, 2], [1, 0]]
    off, _ = _run(DDL3, Q_BAND, inputs, chunk, {0: _orders(orders)}, caching=CachingConfig())
    got, h = _run(DDL3, Q_BAND, inputs, chunk, {0: _force(2, 2, orders)})
    assert got == expected == off and sum(len(v) for v in expected.values()) > 50
    (c,) = _join(h).caching.used()
    assert c.store is not None and c.total_hits > 0 and c.maintained > 0
    if chunk == 1:
        assert c.store.merged_rows > 0  # runs were merged (the store's LSM path ran)
