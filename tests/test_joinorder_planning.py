"""Probe orders from the multi-join cost model: chosen at plan build from the windows, kept when
inputs look alike, switchable by the `join_order` knob, re-evaluated on observed rates when asked,
reported by EXPLAIN — and never changing a result (differential against the reference evaluator
and across orders)."""

from __future__ import annotations

import itertools
from collections import Counter

import numpy as np
import pytest

from cqlstream.cql.logical import nodes as L
from cqlstream.engine.dsms import Dsms
from cqlstream.engine.errors import KnobError
from cqlstream.engine.joinorder.estimates import DEFAULT_RELATION_TUPLES, equality_classes, input_stats
from tests.engine_harness import _merge_events, feed, net_by_instant, run_reference

DDL = "register stream S1 (k int, v int); register stream S2 (k int, v int); register stream S3 (k int, v int);"
CHAIN = "where S1.k = S2.k and S2.k = S3.k"


def start(query: str) -> tuple[Dsms, int, dict]:
    d = Dsms()
    d.execute(DDL + " register relation R (k int, w int);")
    h = d.register_query(query)
    (join,) = [t for t in d.control_tables() if t.get("type") == "join"]
    return d, h.id, join


def test_alike_inputs_keep_the_default_order():
    _d, _q, join = start(f"istream(select * from S1 [Range 10], S2 [Range 10], S3 [Range 10] {CHAIN})")
    assert join["knobs"]["probe_orders"] == [[1, 2], [0, 2], [1, 0]]
    assert join["knobs"]["join_order"] == "cost"


def test_small_windows_are_probed_first():
    d, _q, join = start(f"istream(select * from S1 [Range 1000], S2 [Range 10], S3 [Range 10] {CHAIN})")
    # new S2 tuples probe the small S3 window before the large S1 one
    assert join["knobs"]["probe_orders"] == [[1, 2], [2, 0], [1, 0]]
    d.set_knob(join["id"], "join_order", "fixed")
    assert d.control_table(join["id"])["knobs"]["probe_orders"] == [[1, 2], [0, 2], [1, 0]]
    d.set_knob(join["id"], "join_order", "cost")
    assert d.control_table(join["id"])["knobs"]["probe_orders"] == [[1, 2], [2, 0], [1, 0]]
    with pytest.raises(KnobError):
        d.set_knob(join["id"], "join_order", "fastest")


def test_explain_reports_the_orders_and_estimate():
    d, _q, join = start(f"istream(select * from S1 [Range 1000], S2 [Rows 5], S3 [Range 10] {CHAIN})")
    text = d.explain_plan()
    assert isinstance(text, str)
    line = next(x for x in text.splitlines() if "probe orders by" in x)
    assert "probe orders by cost model: S1→S2→S3, S2→S3→S1, S3→S2→S1" in line
    assert "probes per time unit" in line and "default rates" in line
    d.set_knob(join["id"], "join_order", "fixed")
    assert "probe orders by fixed order: S1→S2→S3, S2→S1→S3" in d.explain_plan()


def test_plan_estimates():
    s = input_stats(L.RelationSource("R", ()))
    assert s.tuples == DEFAULT_RELATION_TUPLES
    # S1.k = S2.k and S2.k = S3.k: one attribute class over all three inputs; S1.v = S3.v another
    assert equality_classes(3, [(0, "k", 1, "k"), (1, "k", 2, "k")]) == (frozenset({0, 1, 2}),)
    assert sorted(map(sorted, equality_classes(3, [(0, "k", 1, "k"), (0, "v", 2, "v")]))) == [[0, 1], [0, 2]]


def random_inputs(seed: int, n: int = 60) -> dict[str, list]:
    rng = np.random.default_rng(seed)
    out: dict[str, list] = {}
    for name, rate in (("S1", 3), ("S2", 1), ("S3", 1)):
        ts = np.sort(rng.integers(0, n, size=rate * n))
        out[name] = [(int(t), (int(rng.integers(0, 4)), int(rng.integers(0, 9)))) for t in ts]
    out["R"] = [(0, 1, (k, k * 10)) for k in range(4)] + [(n // 2, -1, (1, 10))]
    return out


def run(query: str, data: dict[str, list], knobs: dict, step: int) -> dict[int, Counter]:
    d, qid, join = start(query)
    for k, v in knobs.items():
        d.set_knob(join["id"], k, v)
    sub = d.subscribe(qid)
    got: dict[int, Counter] = {}

    def poll(_n: int = 0) -> None:
        for t, c in net_by_instant(sub.poll()).items():
            got.setdefault(t, Counter()).update(c)

    feed(d, _merge_events(data), step, after=poll)
    d.end()
    poll()
    return {t: Counter({k: v for k, v in c.items() if v}) for t, c in got.items() if any(c.values())}


QUERIES = [
    f"istream(select * from S1 [Range 20], S2 [Rows 3], S3 [Range 5] {CHAIN})",
    "select * from S1 [Range 8], S2 [Range 2], S3 [Now], R where S1.k = S2.k and S2.k = R.k and S3.v > S1.v",
    "select * from S1 [Rows 4], S2 [Range 3], S3 [Range 6] where S1.k = S2.k and S1.v = S3.v",
]


@pytest.mark.parametrize("query", QUERIES)
def test_probe_orders_never_change_results(query):
    data = random_inputs(7)
    ddl = DDL + " register relation R (k int, w int);"
    expected = run_reference(ddl, query, data)
    assert expected  # the workload produces results
    n = 4 if " R " in query else 3
    perms = [list(itertools.permutations([j for j in range(n) if j != i])) for i in range(n)]
    rng = np.random.default_rng(1)
    settings = [{"join_order": "fixed"}, {"join_order": "cost"}, {"join_order": "rates"}]
    for _ in range(4):  # random per-input orders, cross products included
        settings.append({"probe_orders": [list(p[int(rng.integers(len(p)))]) for p in perms]})
    for knobs in settings:
        for step in (5, None):
            assert run(query, data, knobs, step) == expected, (knobs, step)


def test_observed_rates_reorder_the_probes():
    # equal windows: the default orders; then S1 arrives 20× faster than S2 and S3, so its window
    # holds 20× more tuples and new S2 tuples should probe S3 before S1
    query = f"istream(select * from S1 [Range 10], S2 [Range 10], S3 [Range 10] {CHAIN})"
    rng = np.random.default_rng(3)
    data = {
        "S1": [(t, (int(rng.integers(0, 50)), 0)) for t in range(120) for _ in range(20)],
        "S2": [(t, (int(rng.integers(0, 50)), 0)) for t in range(120)],
        "S3": [(t, (int(rng.integers(0, 50)), 0)) for t in range(120)],
    }
    d, qid, join = start(query)
    assert join["knobs"]["probe_orders"] == [[1, 2], [0, 2], [1, 0]]
    d.set_knob(join["id"], "join_order", "rates")
    sub = d.subscribe(qid)
    got: dict[int, Counter] = {}

    def poll(_n: int = 0) -> None:
        for t, c in net_by_instant(sub.poll()).items():
            got.setdefault(t, Counter()).update(c)

    feed(d, _merge_events(data), 200, after=poll)
    d.end()
    poll()
    assert d.control_table(join["id"])["knobs"]["probe_orders"] == [[1, 2], [2, 0], [1, 0]]
    assert "run-time change" in d.explain_plan() and "observed rates S1 20" in d.explain_plan()
    expected = run_reference(DDL, query, data)
    assert {t: c for t, c in got.items() if any(c.values())} == expected


def test_rates_are_not_observed_by_default():
    query = f"istream(select * from S1 [Range 10], S2 [Range 10], S3 [Range 10] {CHAIN})"
    data = {
        "S1": [(t, (t % 7, 0)) for t in range(120) for _ in range(20)],
        "S2": [(t, (t % 7, 0)) for t in range(120)],
        "S3": [(t, (t % 7, 0)) for t in range(120)],
    }
    d, _qid, join = start(query)
    feed(d, _merge_events(data), 200)
    d.end()
    assert d.control_table(join["id"])["knobs"]["probe_orders"] == [[1, 2], [0, 2], [1, 0]]


def test_large_joins_use_the_heuristic_order():
    from cqlstream.engine.joinorder.cost import EXACT, JoinShape, WindowStats, plan_cost
    from cqlstream.engine.joinorder.ordering import EXHAUSTIVE_INPUTS, LOOKUP, choose_orders

    n = EXHAUSTIVE_INPUTS + 2
    ws = [WindowStats(1.0, size, 50.0, EXACT) for size in (400, 10, 300, 20, 200, 30, 100, 40)[:n]]
    shape = JoinShape.common(ws)
    default = [[j for j in range(n) if j != i] for i in range(n)]
    orders, cost = choose_orders(shape, default)
    assert all(sorted(o) == d for o, d in zip(orders, default))
    assert cost == plan_cost(shape, orders, lookup=LOOKUP) < plan_cost(shape, default, lookup=LOOKUP)
    assert orders[0][0] == 1  # the smallest window is probed first


def test_a_band_condition_thins_the_partial_results():
    """The costly-probe join of bench.acaching: R joins S only by a band, S joins T by equality.
    New S tuples probe R first (one scan of R's window keeps few rows) rather than T first (each
    of T's matches would scan R's window); T's pipeline keeps the equality first. Before the
    band counted, R looked like a Cartesian product keeping every row and S probed T first."""
    d = Dsms()
    d.execute("register stream R (a int); register stream S (a int, b int); register stream T (b int);")
    d.register_query(
        "select * from R [Rows 1000] as r, S [Rows 1000] as s, T [Rows 5000] as t "
        "where s.b = t.b and r.a between s.a - 1 and s.a + 1"
    )
    (join,) = [t for t in d.control_tables() if t.get("type") == "join"]
    assert join["knobs"]["probe_orders"] == [[1, 2], [0, 2], [1, 0]]


def test_condition_estimates():
    from cqlstream.cql import types as T
    from cqlstream.cql.logical import expr as X
    from cqlstream.engine.joinorder.conditions import DEFAULT_INEQ, DEFAULT_RANGE, condition_estimates
    from cqlstream.engine.joinorder.cost import JoinShape, WindowStats, result_size

    ra, sa, tb = (X.ColRef(k, T.INT, n) for k, n in ((0, "r.a"), (1, "s.a"), (2, "t.b")))
    band = [(X.Op(">=", (ra, sa), T.BOOL), frozenset({0, 1})), (X.Op("<=", (ra, sa), T.BOOL), frozenset({0, 1}))]
    assert condition_estimates(band, 100) == ((frozenset({0, 1}), DEFAULT_RANGE),)
    one = [(X.Op("<", (ra, tb), T.BOOL), frozenset({0, 2})), (X.Op("<>", (sa, tb), T.BOOL), frozenset({1, 2}))]
    assert condition_estimates(one, 100) == ((frozenset({0, 2}), DEFAULT_INEQ), (frozenset({1, 2}), 0.99))
    w = WindowStats(1.0, 0.0, 10.0, rows=100.0)
    shape = JoinShape((w, w, w), (), condition_estimates(band, 100))
    assert result_size(shape, (0, 1)) == 100 * 100 * DEFAULT_RANGE and result_size(shape, (0, 2)) == 100 * 100
