"""The window join's `summary` = reservoir mode (engine/operators/join_summary.py): at `exact`
the results equal the reference evaluator's; with a small `summary_bytes` the result is a sub-bag
of the exact join at every instant, independent of batching, its size tracks the reported sampling
fraction, the state stays within its bytes, and once the tuples left out have expired the join is
exact again."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cqlstream.engine import control
from cqlstream.engine.errors import KnobError
from tests.engine_harness import _merge_events, _start, feed, net_by_instant, run_reference
from tests.summary_harness import nonzero, run_with_knobs, states, sub_bag

DDL = "register stream S (a int, b int); register stream T (a int, c int); register relation R (a int, d int);"
QUERY = "select S.a, S.b, T.c from S [Range 8], T [Range 6] where S.a = T.a"


def events(n: int, keys: int, seed: int, per_instant: int = 5) -> dict:
    rng = np.random.default_rng(seed)
    out = {}
    for name in ("S", "T"):
        a = rng.integers(0, keys, n)
        v = rng.integers(0, 1000, n)
        out[name] = [(i // per_instant, (int(x), int(y))) for i, (x, y) in enumerate(zip(a, v))]
    return out


@pytest.mark.parametrize("chunk", [1, 11, 10_000])
def test_exact_summary_equals_the_reference(chunk):
    inp = events(150, 6, 1)
    want = nonzero(run_reference(DDL, QUERY, inp))
    got, *_ = run_with_knobs(DDL, QUERY, inp, "join", {"summary": "exact"}, chunk)
    assert got == want


def test_reservoir_is_a_sub_bag_at_every_instant_within_its_bytes():
    inp = events(3000, 10, 2)
    exact, *_ = run_with_knobs(DDL, QUERY, inp, "join", {}, 400)
    got, _d, _h, table = run_with_knobs(DDL, QUERY, inp, "join", {"summary": "reservoir", "summary_bytes": 2048}, 400)
    instants = set(exact) | set(got)
    se, sg = states(exact, instants), states(got, instants)
    missing = 0
    for t in sorted(instants):
        assert sub_bag(sg[t], se[t]), t
        missing += sum((se[t] - sg[t]).values())
    assert missing > 0  # 2 KiB holds a fraction of ~40 live tuples per side: the bound is not vacuous
    c = table["counters"]
    assert c["state_bytes"] <= 2048
    assert 0 < c["summary_sample_fraction"] < 1 and sum(c["summary_evicted"]) > 0


def test_reservoir_results_do_not_depend_on_batching():
    inp = events(800, 8, 3)
    knobs = {"summary": "reservoir", "summary_bytes": 1500}
    runs = [run_with_knobs(DDL, QUERY, inp, "join", knobs, c)[0] for c in (1, 29, 10_000)]
    assert runs[0] == runs[1] == runs[2]


def test_result_size_tracks_the_sampling_fraction():
    """Steady input: after the first window the thresholds settle; the result's size over the
    last instants against the exact size times the reported fraction. A row is present iff both
    its tuples are sampled; rows sharing a tuple are correlated, so the relative spread is about
    √(1/n_S + 1/n_T) for n sampled tuples per side per instant (~25 here: ~0.28), and averaging
    over 100 instants (each window spans ~8) shrinks it by √(100/8): tolerance 3 × 0.28/3.5 ≈ 0.25."""
    q = "select S.a, S.b, T.c from S [Range 8], T [Range 8] where S.a = T.a"
    inp = events(6000, 20, 4, per_instant=20)
    exact, *_ = run_with_knobs(DDL, q, inp, "join", {}, 2000)
    got, _d, _h, table = run_with_knobs(DDL, q, inp, "join", {"summary": "reservoir", "summary_bytes": 2400}, 2000)
    last = sorted(set(exact))[-100:]
    se, sg = states(exact, last), states(got, last)
    frac = table["counters"]["summary_sample_fraction"]
    ratio = sum(sum(sg[t].values()) for t in last) / sum(sum(se[t].values()) for t in last)
    assert 0.01 < frac < 0.5
    assert abs(ratio / frac - 1) < 0.25, (ratio, frac)
    for wf, tau in zip(table["counters"]["summary_window_fraction"], table["counters"]["summary_tau"]):
        assert abs(wf - tau) < 0.1  # the sampled share of each window is its τ


def test_exact_again_once_the_left_out_tuples_expire():
    busy = events(1500, 10, 5, per_instant=15)  # instants 0..99, heavy
    calm = events(60, 10, 6, per_instant=1)  # then one tuple per instant, well under the cap
    inp = {k: busy[k] + [(200 + t, row) for t, row in calm[k]] for k in busy}
    exact, *_ = run_with_knobs(DDL, QUERY, inp, "join", {}, 500)
    got, _d, _h, table = run_with_knobs(DDL, QUERY, inp, "join", {"summary": "reservoir", "summary_bytes": 3000}, 500)
    se, sg = states(exact, [99, 259]), states(got, [99, 259])
    assert se[99] != sg[99]  # sampled while busy
    assert se[259] == sg[259]  # everything left out expired: exact again
    assert table["counters"]["summary_tau"] == [1.0, 1.0]


def test_refused_once_its_shared_state_holds_data_and_reported():
    d, _h, _sub = _start(DDL, "select S.a, R.d from S [Range 3], R where S.a = R.a", False)
    d.push("R", [(1, 10), (2, 20)], ts=[0, 0], signs=[1, 1])
    d.push("S", [(1, 5)], ts=[0])
    d.heartbeat("R", 4)
    d.heartbeat("S", 4)
    d.run()
    h2 = d.register_query("select S.b, R.d from S [Range 5], R where S.a = R.a")
    (eid,) = [t["id"] for t in control.tables(d) if t.get("type") == "join" and h2.id in t.get("queries", [])]
    with pytest.raises(KnobError):  # the relation's shared store already holds rows it would need
        control.set_knob(d, eid, "summary", "reservoir")
    inp = events(600, 5, 7)
    _g, d2, h3, _t = run_with_knobs(DDL, QUERY, inp, "join", {"summary": "reservoir", "summary_bytes": 1024}, 600)
    (info,) = control.table(d2, f"query:{h3.id}")["summaries"]
    assert info["summary"] == "reservoir" and 0 < info["sample_fraction"] < 1
    assert "Summaries:" in h3.explain() and "uniform sample of each input's window" in h3.explain()


def test_a_sampled_join_leaves_a_query_sharing_its_windows_exact():
    inp = events(1500, 8, 8)
    d, _h, sub = _start(DDL, QUERY, False)
    h2 = d.register_query("select S.a, T.c from S [Range 8], T [Range 6] where S.a = T.a and S.b > 100")
    (eid,) = [t["id"] for t in control.tables(d) if t.get("type") == "join" and h2.id in t.get("queries", [])]
    control.set_knob(d, eid, "summary", "reservoir")
    control.set_knob(d, eid, "summary_bytes", 1024)
    feed(d, _merge_events(inp), 300)
    d.end()
    got = nonzero(net_by_instant(sub.poll()))
    assert got == nonzero(run_reference(DDL, QUERY, inp))
    assert control.table(d, eid)["counters"]["summary_sample_fraction"] < 1


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 10_000),
    nbytes=st.sampled_from([64, 200, 600, 1500]),
    ranges=st.tuples(st.integers(0, 6), st.integers(0, 6)),
    chunk=st.sampled_from([1, 7, 1000]),
)
def test_property_sub_bag_of_the_reference_at_every_instant(seed, nbytes, ranges, chunk):
    """Random windows, keys, bytes and batching: every instant's sampled result is a sub-bag of
    the reference evaluator's."""
    q = f"select S.a, S.b, T.c from S [Range {ranges[0]}], T [Range {ranges[1]}] where S.a = T.a"
    inp = events(120, 4, seed, per_instant=3)
    want = nonzero(run_reference(DDL, q, inp))
    got, *_ = run_with_knobs(DDL, q, inp, "join", {"summary": "reservoir", "summary_bytes": nbytes}, chunk)
    instants = set(want) | set(got)
    sw, sg = states(want, instants), states(got, instants)
    assert all(sub_bag(sg[t], sw[t]) for t in instants)
