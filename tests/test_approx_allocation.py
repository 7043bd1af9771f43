"""Precision model and memory allocator: the composition rules on cases with known answers, the
allocator against brute force on multi-query fixtures, and incremental re-runs against runs from
scratch after every kind of change."""

from __future__ import annotations

import copy
import math

import numpy as np
import pytest

from cqlstream.engine.approx.allocator import Allocator, Query, brute_force, uniform
from cqlstream.engine.approx.precision import (
    EXACT,
    Node,
    Plan,
    Rates,
    bloom_bytes_for,
    bloom_fp_rate,
    chain,
    counting_bloom_fp_rate,
    own_rates,
)


def fixture_plan() -> Plan:
    """Four queries over shared subplans: Q1 = σ(R ⋈ S), Q2 = (R ⋈ S) ⋈ T, Q3 = distinct U,
    Q4 = A except B. Needs are in bytes."""
    p = Plan()
    for s in "RSTUAB":
        p.add(Node(s, "source"))
    p.add(Node("RS", "join", ("R", "S"), need=40, need_right=24))
    p.add(Node("sel", "select", ("RS",)))
    p.add(Node("RST", "join", ("RS", "T"), need=20, need_right=12))
    p.add(Node("dU", "distinct", ("U",), need=24, items=40))
    p.add(Node("AB", "except", ("A", "B"), need=16, items=30, overlap=0.3))
    return p


QUERIES = [Query("q1", "sel", 1.0), Query("q2", "RST", 2.0), Query("q3", "dU", 1.5), Query("q4", "AB", 0.5)]


def make(budget: int, unit: int = 4) -> Allocator:
    a = Allocator(fixture_plan(), budget, unit)
    for q in QUERIES:
        a.queries[q.name] = q
    return a


# ---------------------------------------------------------------- the precision model
def test_full_memory_is_exact_and_none_is_not():
    p = fixture_plan()
    full = {k: p.nodes[k].need + p.nodes[k].need_right for k in p.stateful()}
    for root in ("sel", "RST", "dU", "AB"):
        assert p.rates(full, root) == EXACT
        assert p.rates({}, root).precision < 1.0


def test_join_window_keeps_the_fraction_it_can_hold():
    n = Node("j", "join", ("a", "b"), need=100, need_right=100)
    assert own_rates(n, 100).fn == pytest.approx(0.5)  # each side keeps half
    assert own_rates(n, 50).fn == pytest.approx(0.75)


def test_bloom_rate_formula_and_its_inverse():
    # m = 8·1000 bits, n = 1000, k = round(8 ln 2) = 6: (1 − e^(−6/8))^6
    assert bloom_fp_rate(1000, 1000) == pytest.approx((1 - math.exp(-0.75)) ** 6)
    for fp in (0.1, 0.01, 0.001):
        assert bloom_fp_rate(bloom_bytes_for(fp, 5000), 5000) <= fp * 1.05


def test_errors_compose_through_a_chain_and_a_join():
    r = chain(Rates(0.1, 0.2), Rates(0.0, 0.5))
    assert (r.fp, r.fn) == (pytest.approx(0.1), pytest.approx(0.6))
    p = Plan()
    p.add(Node("a", "source"))
    p.add(Node("b", "source"))
    p.add(Node("sa", "sample", ("a",), need=10))
    p.add(Node("j", "join", ("sa", "b")))
    assert p.rates({"sa": 5}, "j").fn == pytest.approx(0.5)  # half of a's tuples → half of the pairs


def test_except_turns_right_misses_into_false_positives_by_simulation():
    """Monte Carlo: L − R over sets where R's input is sampled at rate p; the measured output
    (fp, fn) matches the formula."""
    rng = np.random.default_rng(7)
    q, pr = 0.4, 0.6
    p = Plan()
    p.add(Node("L", "source"))
    p.add(Node("R0", "source"))
    p.add(Node("R", "sample", ("R0",), need=100))
    p.add(Node("E", "except", ("L", "R"), overlap=q))
    want = p.rates({"R": 100 * pr}, "E")
    L = np.arange(200_000)
    in_r = rng.random(len(L)) < q
    kept_r = in_r & (rng.random(len(L)) < pr)
    truth, out = ~in_r, ~kept_r
    fp = (out & ~truth).sum() / out.sum()
    fn = (truth & ~out).sum() / truth.sum()
    assert fp == pytest.approx(want.fp, abs=0.005) and fn == pytest.approx(want.fn, abs=0.005)


def test_intersect_bloom_admits_false_partners():
    n = Node("i", "intersect", ("a", "b"), need=100, items=100, overlap=0.5)
    f = counting_bloom_fp_rate(50, 100)  # one-byte counters: the right side takes deletes
    assert f == pytest.approx(bloom_fp_rate(50 / 8, 100))
    assert own_rates(n, 50).fp == pytest.approx(0.5 * f / (0.5 * f + 0.5))


# ---------------------------------------------------------------- the allocator
@pytest.mark.parametrize("budget", [16, 40, 64, 100, 140, 200])
def test_allocator_finds_the_brute_force_optimum(budget):
    a = make(budget)
    best, _ = brute_force(a)
    a.solve()
    assert a.objective() == pytest.approx(best, abs=1e-9)
    assert sum(a.bytes().values()) <= budget


@pytest.mark.parametrize("weights", [(1, 1, 1, 1), (5, 0.1, 0.1, 0.1), (0.1, 0.1, 0.1, 5), (0.2, 3, 1, 0)])
def test_the_optimum_follows_the_weights(weights):
    a = make(72)
    for q, w in zip(QUERIES, weights):
        a.queries[q.name] = Query(q.name, q.root, w)
    best, _ = brute_force(a)
    a.solve()
    assert a.objective() == pytest.approx(best, abs=1e-9)


def test_allocator_beats_uniform_split():
    a = make(100)
    a.solve()
    units_uniform = {k: v // a.unit for k, v in uniform(a).items()}
    assert a.objective() > a.objective(units_uniform) + 0.01


def test_enough_memory_makes_every_query_exact():
    a = make(10_000)
    a.solve()
    assert all(a.precision(q.name) == 1.0 for q in QUERIES)


def test_inactive_and_zero_weight_queries_get_nothing():
    a = make(200)
    a.solve()
    assert "dU" in a.bytes()
    a.set_active("q3", False)
    assert "dU" not in a.bytes()
    a.set_weight("q4", 0)
    assert "AB" not in a.bytes()


def _scratch(a: Allocator) -> float:
    fresh = Allocator(copy.deepcopy(a.plan), a.budget, a.unit)
    fresh.queries = dict(a.queries)
    fresh.solve()
    best, _ = brute_force(fresh)
    assert fresh.objective() == pytest.approx(best, abs=1e-9)
    return fresh.objective()


def test_incremental_reruns_equal_runs_from_scratch():
    a = Allocator(fixture_plan(), 80, 4)
    steps = [
        lambda: a.add_query(QUERIES[0]),
        lambda: a.add_query(QUERIES[2]),
        lambda: a.add_query(QUERIES[1]),
        lambda: a.add_query(QUERIES[3]),
        lambda: a.set_active("q2", False),
        lambda: a.set_node("dU", items=120),  # the distinct input's rate went up
        lambda: a.set_active("q2", True),
        lambda: a.set_weight("q4", 4.0),
        lambda: a.set_node("RS", need=24, need_right=8),  # smaller windows needed
        lambda: a.set_budget(52),
        lambda: a.drop_query("q1"),
        lambda: a.set_budget(120),
    ]
    for step in steps:
        step()
        assert sum(a.bytes().values()) <= a.budget
        assert a.objective() == pytest.approx(_scratch(a), abs=1e-9)


def test_an_incremental_rerun_costs_less_than_a_fresh_one():
    a = make(100)
    a.solve()
    before = a.evaluations
    a.set_weight("q4", 0.6)
    incremental = a.evaluations - before
    fresh = make(100)
    fresh.solve()
    assert incremental < fresh.evaluations
