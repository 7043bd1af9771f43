"""Shared subresult caches (thesis §5.5.4, Def 5.5.1): candidates of different pipelines over the
same windows with the same key are one store, supplied and maintained once and probed by every
pipeline using it. Results with shared caches forced in use equal those with caching off and the
reference evaluator's, at push sizes 1, 7, 64 and all, under shifting keys, window expiry on the
streams and deletes on the relation; and each check fails on a deliberately broken version.
The selection (greedy, Theorem 5.5.3) and the thesis's fixture (Ex 5.5.1/5.5.2) are checked on
the candidate enumeration of cache_share.py."""

from __future__ import annotations

import dataclasses
import functools

import numpy as np
import pytest

from cqlstream.engine.adaptive import cache_share as SH
from cqlstream.engine.adaptive import caching as CA
from cqlstream.engine.adaptive.cache_config import CachingConfig
from cqlstream.engine.adaptive.cache_store import SegmentCache
from cqlstream.engine.adaptive.caching import ACaching
from tests.engine_harness import run_reference
from tests.test_acaching import CHUNKS, EAGER, _run
from tests.test_adaptive_mjoin import _join

DDL = (
    "register stream S (a int, b int); register stream T (a int, b int); "
    "register stream U (a int, b int); register relation R (a int, b int);"
)
# a star on a through T: every pipeline's conjunct into a segment holding T reads t.a
Q = "select * from S [Rows 6] as s, T [Range 3] as t, U [Rows 5] as u, R where s.a = t.a and t.a = u.a and t.a = R.a"
# (orders, the caches forced: (pipeline, prefix length)) — S⋈T shared by U and R; T⋈R (the
# relation, with deletes, in the segment) shared by S and U
SHARED = [
    ([[1, 2, 3], [0, 2, 3], [1, 0, 3], [0, 1, 2]], [(2, 2), (3, 2)]),
    ([[1, 3, 2], [3, 0, 2], [1, 3, 0], [1, 0, 2]], [(0, 2), (2, 2)]),
]


def _inputs(n: int = 150, seed: int = 3) -> dict[str, list]:
    """Streams S, T, U (keys 0..3 in the first half, 2..6 in the second: entries come and go)
    and relation R's random inserts and deletes."""
    rng = np.random.default_rng(seed)

    def key(k: int) -> int:
        return int(rng.integers(0, 4)) if k < n // 2 else int(rng.integers(2, 7))

    out: dict[str, list] = {name: [(k // 3, (key(k), k)) for k in range(n)] for name in "STU"}
    rel, alive = [], []
    for k in range(n // 3):
        if alive and rng.random() < 0.35:
            rel.append((k, -1, alive.pop(int(rng.integers(0, len(alive))))))
        else:
            row = (key(3 * k), k)
            alive.append(row)
            rel.append((k, 1, row))
    out["R"] = rel
    return out


@functools.cache
def _expected() -> dict:
    return run_reference(DDL, Q, _inputs())


def _force_shared(orders, forced):
    def act(op):
        op.set_knob("probe_orders", orders)
        for i, s in forced:
            op.caching.force(i, s)

    return act


def _case(fi: int, chunk):
    orders, forced = SHARED[fi]
    return _run(DDL, Q, _inputs(), chunk, {0: _force_shared(orders, forced)})


@pytest.mark.parametrize("chunk", CHUNKS)
@pytest.mark.parametrize("fi", range(len(SHARED)))
def test_shared_caches_same_results(chunk, fi):
    orders, _forced = SHARED[fi]
    off, _ = _run(
        DDL, Q, _inputs(), chunk, {0: lambda op: op.set_knob("probe_orders", orders)}, caching=CachingConfig()
    )
    got, h = _case(fi, chunk)
    assert got == _expected() == off
    ac = _join(h).caching
    a, b = ac.used()
    assert a.store is b.store and a.share == b.share, "one store for both pipelines"
    assert ac.stores() == [a]
    # both pipelines hit the one store: the second finds entries the first created
    assert a.total_hits > 0 and b.total_hits > 0


def test_shared_cache_shows_in_explain_and_control_table():
    _got, h = _case(0, 7)
    op = _join(h)
    rows = [c for c in op.control_table()["caching"]["candidates"] if c["state"] == "used"]
    assert sorted(r["pipeline"] for r in rows) == [2, 3] and all(r["shared_by"] == [2, 3] for r in rows)
    (line,) = [x for x in op.explain_detail() if x.startswith("caches (")]
    assert "2: [1, 0]" in line and "shared with pipeline 3" in line and "shared with pipeline 2" in line


# deliberately broken versions: each must make some push size give a wrong result
def _per_pipeline_deltas(monkeypatch):
    # this call's new combos gathered per pipeline: the second pipeline misses them
    monkeypatch.setattr(ACaching, "delta_key", staticmethod(lambda c: (c.i, c.seg)))


def _maintained_by_each(monkeypatch):
    # every pipeline using the store maintains it: new combos go in twice
    monkeypatch.setattr(ACaching, "stores", lambda self: self.used())


def _one_window_inserts_ignored(monkeypatch):
    # the shared store is not maintained by the inserts of its first segment input (in input
    # order): the combos they form never reach it. (Its deletes cannot be left out unnoticed
    # this way: a stored combo whose component left the window is caught at lookup and the
    # store emptied, which is slower, never wrong.)
    orig = CA.supply

    def supply(ac, tables, c, i, idx, seq):
        if i != c.cols[0]:
            orig(ac, tables, c, i, idx, seq)

    monkeypatch.setattr(CA, "supply", supply)


@pytest.mark.parametrize("fi", range(len(SHARED)))
@pytest.mark.parametrize("broken", [_per_pipeline_deltas, _maintained_by_each, _one_window_inserts_ignored])
def test_the_differential_check_catches_broken_sharing(monkeypatch, fi, broken):
    broken(monkeypatch)
    wrong = [chunk for chunk in CHUNKS if _case(fi, chunk)[0] != _expected()]
    assert wrong, "the broken version went unnoticed"


# ------------------------------------------------------------------ selection


def test_selection_chooses_a_shared_cache_that_only_pays_shared():
    """The reoptimizer's selection (rows cost model) with two pipelines' candidates over S⋈T:
    each alone costs more than it saves, together they pay (cost once, benefits summed)."""
    _got, h = _case(0, 7)
    ac = _join(h).caching
    a, b = ac.used()
    for c in ac.cands.values():
        c.state, c.store, c.pinned = "unused", None, False
        c.benefit = c.cost = c.net = 0.0
    for c, benefit in ((a, 0.6), (b, 0.7)):
        c.benefit, c.cost, c.net = benefit, 1.0, benefit - 1.0
    chosen = ac._choose([a, b])
    assert sorted(chosen) == [2, 3]
    # without the peer (or under another key) neither is chosen
    assert ac._choose([a]) == {}


def test_greedy_against_exhaustive():
    """Greedy (Theorem 5.5.3) on random instances: feasible, never above the exhaustive optimum,
    and equal to it when nothing is shared (each pipeline's best)."""
    rng = np.random.default_rng(0)
    for _ in range(200):
        n_opt = int(rng.integers(1, 6))
        options = []
        for o in range(n_opt):
            pipes = rng.choice(4, size=int(rng.integers(1, 4)), replace=False)
            options.append(
                SH.Option(o, float(rng.uniform(0, 2)), [((o, int(p)), float(rng.uniform(-0.5, 1.5))) for p in pipes])
            )

        def compatible(m, taken):
            return all(t[1] != m[1] for t in taken)

        got, value = SH.greedy(options, compatible)
        best, opt = SH.exhaustive(options, compatible)
        picked = [m for _o, ms in best for m in ms]
        assert len({m[1] for m in picked}) == len(picked)
        assert abs(opt - sum(sum(dict(o.members)[m] for m in ms) - o.cost for o, ms in best)) < 1e-9
        used = [m for _o, ms in got for m in ms]
        assert len({m[1] for m in used}) == len(used)
        assert value <= opt + 1e-9
        assert abs(value - sum(sum(dict(o.members)[m] for m in ms) - o.cost for o, ms in got)) < 1e-9
        if all(len(o.members) == 1 for o in options):
            assert abs(value - opt) < 1e-9


# ------------------------------------------------------------------ the thesis's fixture

EX551 = {
    1: [2, 3, 4, 5, 6],
    2: [1, 3, 5, 4, 6],
    3: [2, 1, 4, 5, 6],
    4: [5, 1, 2, 3, 6],
    5: [4, 2, 3, 1, 6],
    6: [2, 1, 4, 5, 3],
}


def test_thesis_example_5_5_1_candidates_and_shared_caches():
    f = frozenset
    assert SH.prefix_sets(EX551) == [f({1, 2}), f({4, 5}), f({1, 2, 3}), f({1, 2, 3, 4, 5})]
    segs = SH.segment_candidates(EX551)
    of = lambda i: sorted((s.j, s.k, sorted(s.windows)) for s in segs if s.pipeline == i)  # noqa: E731
    # ΔR4: R1,R2 inside R1,R2,R3 (a tree of two); ΔR6: three
    assert of(4) == [(1, 3, [1, 2]), (1, 4, [1, 2, 3])]
    assert of(6) == [(0, 2, [1, 2]), (0, 5, [1, 2, 3, 4, 5]), (2, 4, [4, 5])]
    groups = SH.shared_groups(segs)
    # Ex 5.5.2: R1R2 shared by ΔR3, ΔR4, ΔR6; R1R2R3 by ΔR4, ΔR5 (by Def 5.5.1 R4R5 is shared
    # too, by ΔR1, ΔR2, ΔR3 and ΔR6: the example names two of the groups)
    assert groups == {f({1, 2}): [3, 4, 6], f({1, 2, 3}): [4, 5], f({4, 5}): [1, 2, 3, 6]}
    # selection with sharing: R1R2 pays only shared; R1R2R3 would overlap it in ΔR4
    options = []
    for w, pipes in groups.items():
        members = [(s, 1.0 if w == f({1, 2}) else 0.4) for s in segs if s.windows == w and s.pipeline in pipes]
        options.append(SH.Option(w, 2.5, members))

    def fits(s, taken):
        return not any(s.overlaps(t) for t in taken)

    got, value = SH.greedy(options, fits)
    assert [(o.name, sorted(s.pipeline for s in ms)) for o, ms in got] == [(f({1, 2}), [3, 4, 6])]
    assert value == pytest.approx(0.5)
    assert SH.exhaustive(options, fits)[1] == pytest.approx(0.5)


def test_shared_candidates_need_the_same_key():
    """Same windows, different segment-side keys: two caches, not one."""
    _got, h = _case(0, 7)
    op = _join(h)
    ac = op.caching
    a = ac._candidate(2, (1, 0))
    b = ac._candidate(3, (0, 1))
    assert a is not None and b is not None and a.share == b.share
    # U's conjunct read from S's side instead: the same windows, another key
    other = SH.share_key([op.equi[0]], (1, 0))
    assert other[0] == a.share[0] and other != a.share


# ------------------------------------------------------------------ globally consistent caches

# (orders, pipeline, X's length, Y): Ex 5.7.1's shape. R's pipeline probes T, U, then S: {T, U}
# fails the prefix invariant (T's pipeline starts with S) but {S, T, U} holds it, so R's pipeline
# caches (T⋈U)⋉S. Then U's pipeline caching (R⋈T)⋉S, the relation (deletes) inside X.
CONSISTENT = [
    ([[1, 2, 3], [0, 2, 3], [1, 0, 3], [1, 2, 0]], 3, 2, (0,)),
    ([[1, 3, 2], [0, 3, 2], [3, 1, 0], [0, 1, 2]], 2, 2, (0,)),
]


def _consistent_case(fi: int, chunk):
    orders, i, s, y = CONSISTENT[fi]

    def act(op):
        op.set_knob("probe_orders", orders)
        with pytest.raises(ValueError):  # X alone fails the prefix invariant: no plain cache
            op.caching.force(i, s)
        op.caching.force(i, s, partners=y)

    return _run(DDL, Q, _inputs(), chunk, {0: act})


@pytest.mark.parametrize("chunk", CHUNKS)
@pytest.mark.parametrize("fi", range(len(CONSISTENT)))
def test_globally_consistent_caches_same_results(chunk, fi):
    got, h = _consistent_case(fi, chunk)
    assert got == _expected()
    (c,) = _join(h).caching.used()
    assert c.partners == CONSISTENT[fi][3] and c.total_hits > 0
    assert c.store is not None and c.store.rows > 0
    if chunk == 1:
        assert c.total_hits > 0.5 * c.total_probes


def test_globally_consistent_cache_in_explain_and_control_table():
    """The store's columns are X's windows (T, U), its suppliers X ∪ Y's; EXPLAIN and the
    control table show X and Y."""
    _got, h = _consistent_case(0, 1)
    op = _join(h)
    (c,) = op.caching.used()
    assert c.cols == (1, 2) and c.union == (0, 1, 2)
    rows = [r for r in op.control_table()["caching"]["candidates"] if r["state"] == "used"]
    assert rows[0]["segment"] == [1, 2] and rows[0]["partners"] == [0]
    (line,) = [x for x in op.explain_detail() if x.startswith("caches (")]
    assert "3: [1, 2]⋉[0]" in line


def _partner_inserts_ignored(monkeypatch):
    # Y's pipeline does not supply: combos whose partner arrives later never reach the cache
    orig = CA.supply

    def supply(ac, tables, c, i, idx, seq):
        if i not in c.partners:
            orig(ac, tables, c, i, idx, seq)

    monkeypatch.setattr(CA, "supply", supply)


def _repeats_kept(monkeypatch):
    # an X-combo with two partners (or already stored) is kept and returned once per partner
    monkeypatch.setattr(SegmentCache, "_new_combos", lambda self, at, ids, take: take)
    monkeypatch.setattr(CA, "distinct_pairs", lambda q, rows, n_stored=0: (q, rows))


def _store_repeats(monkeypatch):
    # maintenance adds an X-combo the entry already holds (another partner): a hit returns it twice
    monkeypatch.setattr(SegmentCache, "_new_combos", lambda self, at, ids, take: take)


def _hits_repeated(monkeypatch):
    # the store keeps each X-combo once, but a hit takes it from the store and again from this
    # call's new combos
    monkeypatch.setattr(CA, "distinct_pairs", lambda q, rows, n_stored=0: (q, rows))


@pytest.mark.parametrize("fi", range(len(CONSISTENT)))
@pytest.mark.parametrize("broken", [_partner_inserts_ignored, _repeats_kept, _store_repeats, _hits_repeated])
def test_the_differential_check_catches_broken_consistency(monkeypatch, fi, broken):
    broken(monkeypatch)
    wrong = [chunk for chunk in CHUNKS if _consistent_case(fi, chunk)[0] != _expected()]
    assert wrong, "the broken version went unnoticed"


def test_thesis_example_5_7_1_and_the_cap():
    ex = {**EX551, 6: [2, 3, 4, 5, 1]}
    f = frozenset
    cands = SH.consistent_candidates(ex, cap=100)
    # (R2⋈R3)⋉R1 in ΔR6's pipeline: R2,R3 fails the prefix invariant, R1,R2,R3 holds it
    assert SH.Consistent(6, 0, 2, f({2, 3}), f({1})) in cands
    assert not SH.prefix_ok(ex, f({2, 3})) and SH.prefix_ok(ex, f({1, 2, 3}))
    plain = [c for c in cands if not c.y]
    assert {c.x for c in plain} == {f({1, 2}), f({4, 5}), f({1, 2, 3}), f({1, 2, 3, 4, 5})}
    # after the p plain ones, X = all but one window (a whole pipeline) first, then all but two
    sizes = [len(c.x) for c in cands[len(plain) :]]
    assert sizes == sorted(sizes, reverse=True) and sizes[0] == 5
    for c in cands:
        assert not (c.x & c.y) and SH.prefix_ok(ex, c.x | c.y) and c.pipeline not in c.x
    # the cap m: p < m, the plain ones then the largest X up to m; p ≥ m: the plain ones alone
    assert len(plain) == 9
    capped = SH.consistent_candidates(ex, cap=12)
    assert capped == cands[:12] and len(capped) == 12 and capped[:9] == plain
    assert SH.consistent_candidates(ex, cap=6) == plain


@pytest.mark.parametrize("fi", range(len(CONSISTENT)))
def test_reoptimizer_with_consistent_candidates(fi):
    """The re-optimizer (rows cost model) over a candidate list holding globally consistent
    candidates (fewer than m prefix-invariant ones): exhaustive selection; results unchanged."""
    orders = CONSISTENT[fi][0]
    # this join's orders give six prefix-invariant candidates (single windows included): m = 8
    # leaves room for two globally consistent ones
    cfg = dataclasses.replace(EAGER, candidates_cap=8)
    got, h = _run(DDL, Q, _inputs(), 7, {0: lambda op: op.set_knob("probe_orders", orders)}, caching=cfg)
    assert got == _expected()
    ac = _join(h).caching
    current = ac._current()
    assert any(c.partners for c in current) and len(current) <= 8
    assert ac.selections >= 1


def test_cached_pipelines_give_no_flows_to_the_shift_detector():
    """A pipeline using a cache hands A-Greedy's shift detector no per-step counts (its hits
    skip the segment's steps, so the counts would move with the hit rate); the others do."""
    _got, h = _consistent_case(0, 7)
    ac = _join(h).caching
    flows = {i: [10, 5, 5, 5] for i in range(4)}
    assert sorted(ac.flows(flows)) == [0, 1, 2]
    ac.drop(3)
    assert sorted(ac.flows(flows)) == [0, 1, 2, 3]
