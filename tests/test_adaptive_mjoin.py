"""Adaptive MJoin probe orders never change a result: a 4-way join whose selective input flips
half way is re-ordered mid-stream (asserted from the log) and gives what it gives with adaptation
off and what the reference evaluator gives, at every batch size; plus the spanning tree and the
no-Cartesian-product mapping of filter orders to probe orders."""

from __future__ import annotations

import numpy as np
import pytest

from cqlstream.engine.adaptive.config import AdaptiveConfig
from cqlstream.engine.adaptive.mjoin import linearize, spanning_tree
from cqlstream.engine.control import _query_selections
from cqlstream.engine.operators.join import Equi, JoinOp
from tests.engine_harness import random_join_inputs, run_engine, run_reference

DDL = "register stream S (a int, v int); register stream T (a int, w int); register stream U (a int, x int); register stream V (a int, y int);"
QUERY = (
    "select * from S [Rows 6] as s, T [Rows 6] as t, U [Rows 6] as u, V [Rows 6] as v "
    "where s.a = t.a and s.a = u.a and s.a = v.a"
)
EAGER = {"probability": 1.0, "window": 40, "profile_batch": 4}


def _flipping(n=800, seed=5):
    """S probes T, U, V: in the first half T's keys rarely meet S's and V's always do; in the
    second half the reverse (U in between)."""
    rng = np.random.default_rng(seed)
    out: dict[str, list] = {"S": [], "T": [], "U": [], "V": []}
    for k in range(n):
        late = k >= n // 2
        ts = k // 4
        out["S"].append((ts, (int(rng.integers(0, 4)), k)))
        rare, common = (int(rng.integers(4, 40)), int(rng.integers(0, 4)))
        out["T"].append((ts, (common if late else rare, k)))
        out["V"].append((ts, (rare if late else common, k)))
        out["U"].append((ts, (int(rng.integers(0, 8)), k)))
    return out


def _join(h) -> JoinOp:
    (op,) = [op for op in _query_selections(h) if isinstance(op, JoinOp)]
    return op


@pytest.mark.parametrize("chunk", [1, 7, 64, None])
def test_flipping_join_same_results(chunk):
    inputs = _flipping()
    expected = run_reference(DDL, QUERY, inputs)
    off, _ = run_engine(DDL, QUERY, inputs, chunk=chunk, adaptive=AdaptiveConfig(policy="off"))
    got, h = run_engine(DDL, QUERY, inputs, chunk=chunk, adaptive=AdaptiveConfig(**EAGER))
    assert got == expected == off
    op = _join(h)
    if chunk is not None:  # one batch: the order can only change after it
        assert any(0 < r.at < p.seen for p in op.adaptive.pipes for r in p.log), "no re-ordering mid-stream"


def test_order_follows_the_flip():
    """S's pipeline probes T (input 1, selective) first in the first half, V (input 3) after the
    flip (S's events are its inserts and its window's deletes: about 800 by the flip)."""
    _got, h = run_engine(DDL, QUERY, _flipping(), chunk=7, adaptive=AdaptiveConfig(**EAGER))
    pipe = _join(h).adaptive.pipes[0]
    assert all(r.new[0] != 3 for r in pipe.log if r.at < 700)
    assert _join(h).probe_orders[0][0] == 3 and pipe.log[-1].at > 800


def test_off_never_reorders_and_knobs():
    _got, h = run_engine(DDL, QUERY, _flipping(), chunk=7, adaptive=AdaptiveConfig(policy="off"))
    op = _join(h)
    assert op.adaptive.reorders == 0
    assert op.control_table()["knobs"]["adaptive"] == "off"
    op.set_knob("adaptive", "a-greedy")
    assert op.adaptive.active and op.control_table()["adaptive"]["policy"] == "a-greedy"


def test_control_table_explain_and_events():
    _got, h = run_engine(DDL, QUERY, _flipping(), chunk=7, adaptive=AdaptiveConfig(**EAGER))
    op = _join(h)
    t = op.control_table()
    assert t["counters"]["reorders"] == op.adaptive.reorders > 0
    pipe = t["adaptive"]["pipelines"][0]
    assert pipe["order"] == op.probe_orders[0]
    assert {f["input"] for f in pipe["filters"]} == {1, 2, 3}
    assert t["adaptive"]["log"] and "invariant broken" in t["adaptive"]["log"][-1]["reason"]
    (line,) = [x for x in op.explain_detail() if x.startswith("probe orders (")]  # beside the cost model's line
    assert line.startswith("probe orders (a-greedy,") and "0: [" in line
    ev = op.events()
    assert ("reorder", float(op.adaptive.reorders)) in ev and op.events() == []


def _equi(pairs):
    return [Equi(k, a, None, b, None) for k, (a, b) in enumerate(pairs)]


def test_spanning_tree_and_precedence():
    # chain 0-1-2-3 plus a cycle edge 3-0; and an input 4 with no equi link
    equi = _equi([(0, 1), (1, 2), (2, 3), (3, 0)])
    visit, parent = spanning_tree(5, equi, 1)
    assert visit[0] == 1 and parent[0] == 1 and parent[2] == 1 and parent[3] in (0, 2) and parent[4] is None
    # a filter order that puts a deep filter first still probes a linked input at every step
    order = linearize([3, 4, 0, 2], parent, 1)
    assert sorted(order) == [0, 2, 3, 4]
    bound = {1}
    for j in order:
        if j != 4:
            assert parent[j] in bound
        bound.add(j)
    assert order.index(4) > order.index(3)


def test_three_way_cyclic_same_results():
    ddl = "register stream S (a int, b int); register stream T (b int, c int); register stream U (c int, a int);"
    q = "select * from S [Rows 5] as s, T [Rows 5] as t, U [Rows 5] as u where s.b = t.b and t.c = u.c and u.a = s.a"
    rng = np.random.default_rng(3)
    inputs = {
        name: [(k // 3, (int(rng.integers(0, 3)), int(rng.integers(0, 3)))) for k in range(300)]
        for name in ("S", "T", "U")
    }
    expected = run_reference(ddl, q, inputs)
    for chunk in (1, 7, None):
        got, _ = run_engine(ddl, q, inputs, chunk=chunk, adaptive=AdaptiveConfig(**EAGER))
        assert got == expected


def test_query_and_engine_switches_reach_the_join():
    from cqlstream.engine import control
    from cqlstream.engine.dsms import Dsms

    d = Dsms(sys_stream=False)
    d.execute(DDL)
    h = d.register_query(QUERY)
    op = _join(h)
    assert op.adaptive.active  # the engine's default policy applies to new joins
    control.set_knob(d, f"query:{h.id}", "adaptive", "off")
    assert not op.adaptive.active
    control.set_knob(d, "engine", "adaptive", "a-greedy")
    assert op.adaptive.active and op.control_table()["knobs"]["adaptive"] == "a-greedy"
    op.set_knob("probe_orders", [[3, 2, 1], [0, 3, 2], [0, 3, 1], [0, 2, 1]])
    assert any("0: [3, 2, 1]" in line for line in op.explain_detail())


RANDOM_DDL = (
    "register stream S (a int, b int); register stream T (a int, b int); "
    "register stream U (a int, b int); register relation R (a int, b int);"
)
RANDOM_QUERIES = [
    # chain, star with a theta conjunct, a cycle, and a relation with deletes
    "select * from S [Rows 4] as s, T [Range 3] as t, U [Rows 5] as u where s.a = t.a and t.b = u.b",
    "select * from S [Range 2] as s, T [Rows 3] as t, U [Range 4] as u where s.a = t.a and s.a = u.a and t.b < u.b",
    "select * from S [Rows 4] as s, T [Rows 4] as t, U [Rows 4] as u where s.a = t.a and t.b = u.b and u.a = s.b",
    "select * from S [Rows 3] as s, T [Range 3] as t, R where s.a = t.a and t.b = R.b and R.a = s.b",
]


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("qi", range(len(RANDOM_QUERIES)))
def test_random_joins_same_results(seed, qi):
    inputs = random_join_inputs(seed, 120)
    q = RANDOM_QUERIES[qi]
    expected = run_reference(RANDOM_DDL, q, inputs)
    config = AdaptiveConfig(probability=1.0, window=8, profile_batch=2, alpha=1.0)
    for chunk in (1, 5, None):
        got, _ = run_engine(RANDOM_DDL, q, inputs, chunk=chunk, adaptive=config)
        assert got == expected


# ------------------------------------------------------------------ non-equality join conditions

BAND_DDL = "register stream S (a int, b int); register stream T (b int, w int); register stream R (a int, x int);"
BAND_QUERY = (
    "select * from S [Rows 12] as s, T [Rows 12] as t, R [Rows 12] as r "
    "where s.b = t.b and r.a between s.a - 1 and s.a + 1"
)
T_FIRST = [[1, 2], [0, 2], [0, 1]]  # S probes T (the equality) before R (the band)


def _band(n=900, seed=9, flip=True):
    """S ⋈ T on b, S ⋈ R by the band |r.a − s.a| ≤ 1. In the first half T holds every key S
    probes (drops nothing, 3 partners a probe) while R's values lie far from S's (the band drops
    nearly every S event); with `flip`, in the second half R's values meet S's and T's keys
    rarely do (the equality is the selective one)."""
    rng = np.random.default_rng(seed)
    out: dict[str, list] = {"S": [], "T": [], "R": []}
    for k in range(n):
        late = flip and k >= n // 2
        ts = k // 3
        out["S"].append((ts, (int(rng.integers(0, 20)), int(rng.integers(0, 4)))))
        near, far = int(rng.integers(0, 20)), int(rng.integers(100, 400))
        rare, common = int(rng.integers(4, 400)), int(rng.integers(0, 4))
        out["T"].append((ts, (rare if late else common, k)))
        out["R"].append((ts, (near if late or rng.random() < 0.01 else far, k)))
    return out


def _t_first(h) -> None:
    _join(h).set_knob("probe_orders", T_FIRST)


@pytest.mark.parametrize("chunk", [1, 7, 64, None])
def test_band_join_shifting_same_results(chunk):
    """A band and an equality whose selectivities swap half way, A-Greedy on from the equality's
    order: the same result as adaptation off and as the reference, at every batch size."""
    inputs = _band()
    expected = run_reference(BAND_DDL, BAND_QUERY, inputs)
    off, _ = run_engine(
        BAND_DDL, BAND_QUERY, inputs, chunk=chunk, prepare=_t_first, adaptive=AdaptiveConfig(policy="off")
    )
    got, h = run_engine(BAND_DDL, BAND_QUERY, inputs, chunk=chunk, prepare=_t_first, adaptive=AdaptiveConfig(**EAGER))
    assert got == expected == off
    if chunk is not None:
        assert any(0 < r.at < p.seen for p in _join(h).adaptive.pipes for r in p.log), "no re-ordering mid-stream"


def test_selective_band_is_probed_first():
    """S's pipeline starts T-first; the profiler sees the band into R drop nearly every S event
    (the old profiler, whose logical filters came from equalities only, saw R as a Cartesian step
    that never drops and kept T first)."""
    _got, h = run_engine(
        BAND_DDL, BAND_QUERY, _band(flip=False), chunk=7, prepare=_t_first, adaptive=AdaptiveConfig(**EAGER)
    )
    op = _join(h)
    assert op.probe_orders[0] == [2, 1]
    pipe = op.adaptive.pipes[0]
    assert pipe.parent[2] == 0  # R hangs off S by the band, not by a Cartesian step
    f = {x["input"]: x for x in op.control_table()["adaptive"]["pipelines"][0]["filters"]}
    assert f[2]["drop_rate"] > 0.9 and f[1]["drop_rate"] < 0.1
    assert f[2]["candidates"] > f[2]["fan_out"]  # the band examines the whole window, keeps few


def test_band_order_follows_the_flip():
    """After the flip the equality into T is the selective one: S's pipeline ends T-first."""
    _got, h = run_engine(BAND_DDL, BAND_QUERY, _band(), chunk=7, prepare=_t_first, adaptive=AdaptiveConfig(**EAGER))
    op = _join(h)
    pipe = op.adaptive.pipes[0]
    assert any(r.new[0] == 2 for r in pipe.log if r.at < 900)  # the band first, before the flip
    assert op.probe_orders[0][0] == 1


def test_spanning_tree_prefers_equalities_then_conditions():
    # 0-1 equality, 1-2 and 0-2 conditions, 3 linked to nothing: 2 hangs off 0 (reached first)
    visit, parent = spanning_tree(4, _equi([(0, 1)]), 0, _equi([(1, 2), (0, 2)]))
    assert visit == [0, 1, 2, 3] and parent == {0: None, 1: 0, 2: 0, 3: None}
    # an equality reaching 2 later wins over the condition
    visit, parent = spanning_tree(4, _equi([(0, 1), (1, 2)]), 0, _equi([(0, 2)]))
    assert parent[2] == 1
