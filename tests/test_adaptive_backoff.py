"""The profilers' back-off (engine/adaptive/backoff.py): on stable data the interval between
A-Greedy's profiling passes and A-Caching's re-profiling grows geometrically up to its cap, and
goes back to the base at once when the data shifts (each checked against a deliberately broken
reset, which must fail the timeline); results never depend on it (the differential tests of
test_adaptive_differential.py and test_acaching.py run with it on and off); the knobs show in the
control tables and EXPLAIN."""

from __future__ import annotations

import numpy as np
import pytest

from cqlstream.engine.adaptive import backoff as B
from cqlstream.engine.adaptive.cache_config import CachingConfig
from cqlstream.engine.adaptive.caching import ACaching
from cqlstream.engine.adaptive.config import AdaptiveConfig
from cqlstream.engine.control import _query_selections
from cqlstream.engine.errors import KnobError
from tests.engine_harness import run_engine, run_reference
from tests.test_acaching import DDL3, FIXED, Q3, _join, _run

DDL = "register stream S (a int, b int, c int);"
QUERY = "select a, c from S where a > 5 and b < 3 and c <> 1 and a + b > 2"
SHIFT = 3000  # tuples before the selection's data shift


def _selection_data(n=6000, seed=5):
    """`a > 5` keeps everything and `b < 3` ~30 % until SHIFT; then `a > 5` keeps ~15 % and
    `b < 3` everything-but-a-quarter: the first conjunct's share moves."""
    rng = np.random.default_rng(seed)
    ev = []
    for k in range(n):
        late = k >= SHIFT
        a = int(rng.integers(0, 7)) if late else int(rng.integers(6, 10))
        b = int(rng.integers(0, 4)) if late else int(rng.integers(0, 10))
        ev.append((k // 100, (a, b, int(rng.integers(0, 4)))))
    return {"S": ev}


SEL = AdaptiveConfig(probability=0.2, window=50, profile_pass=20, profile_batch=8, backoff=8)


def _selection(h):
    (op,) = [o for o in _query_selections(h) if o.kind == "select"]
    return op


def _selection_timeline() -> None:
    """Steady data: the stretch doubles up to the cap (2, 4, 8) before the shift and passes are
    skipped; the shift resets it in its first push, which is profiled at once: the order
    follows in that push, as it does with no back-off (a pass every push here)."""
    _got, h = run_engine(DDL, QUERY, _selection_data(), chunk=100, adaptive=SEL)
    ad = _selection(h).adaptive
    log = ad.backoff.log
    before = [e for e in log if e["at"] <= SHIFT]
    assert [e["stretch"] for e in before] == [2, 4, 8]
    assert ad.backoff.skipped > 20  # of ~60 due passes
    resets = [e for e in log if e["stretch"] == 1]
    assert resets and SHIFT < resets[0]["at"] <= SHIFT + 100 and resets[0]["reason"] == "selectivity drifted"
    assert any(SHIFT < r.at <= SHIFT + 100 for r in ad.log), "re-ordered late after the shift"


def test_selection_interval_grows_then_resets_on_a_shift():
    _selection_timeline()


def test_selection_timeline_fails_with_a_broken_reset(monkeypatch):
    monkeypatch.setattr(B.Backoff, "reset", lambda self, at, reason: None)
    with pytest.raises(AssertionError):
        _selection_timeline()


@pytest.mark.parametrize("backoff", [1, 8])
@pytest.mark.parametrize("chunk", [1, 100, None])
def test_selection_same_results_with_backoff(backoff, chunk):
    inputs = {"S": _selection_data(1200)["S"]}
    expected = run_reference(DDL, QUERY, inputs)
    got, _h = run_engine(
        DDL, QUERY, inputs, chunk=chunk, adaptive=AdaptiveConfig(probability=0.2, window=50, backoff=backoff)
    )
    assert got == expected


def test_no_backoff_is_the_thesis_pace():
    """cap 1: every due pass is taken, nothing stretched, the same passes as before."""
    _got, h = run_engine(
        DDL, QUERY, _selection_data(), chunk=100, adaptive=AdaptiveConfig(**{**SEL.__dict__, "backoff": 1})
    )
    ad = _selection(h).adaptive
    assert ad.backoff.stretch == 1 and ad.backoff.skipped == 0 and not ad.backoff.log
    assert ad.statistics()["passes"] == ad.passes.passes == 60  # p × 6000 / pass of 20


def _join_data(n=3000, seed=2):
    """R, S, T keyed over 0..4; half way T's keys move to 100..104: R's and S's events stop
    finding partners (their result rows per event fall to 0)."""
    rng = np.random.default_rng(seed)
    out: dict[str, list] = {"R": [], "S": [], "T": []}
    for k in range(n):
        out["R"].append((k // 30, (int(rng.integers(0, 5)),)))
        out["S"].append((k // 30, (int(rng.integers(0, 5)), int(rng.integers(0, 5)))))
        out["T"].append((k // 30, (int(rng.integers(100, 105)) if k >= n // 2 else int(rng.integers(0, 5)),)))
    return out


# selections in step counts (independent of timing) where no cache pays (a lookup costs more
# than any segment): every selection keeps "none", so the interval only stretches
NOTHING_PAYS = CachingConfig(
    enabled=True, interval_seconds=0, interval_tuples=300, window=2, distinct_window=8, probe_cost=1e6,
    costs="rows", profile_every=1, backoff=8,
)  # fmt: skip


def _caching_timeline() -> None:
    _got, h = _run(DDL3, Q3, _join_data(), 300, {}, caching=NOTHING_PAYS, adaptive=FIXED)
    ac = _join(h).caching
    assert not ac.used()
    half = ac.events_seen / 2
    log = ac.backoff.log
    grows = [e["stretch"] for e in log if e["at"] < half]
    assert grows[:3] == [2, 4, 8], grows
    resets = [e for e in log if e["stretch"] == 1]
    assert resets and half < resets[0]["at"] < half + 1500 and resets[0]["reason"].startswith("rows of pipeline")


def test_caching_interval_grows_then_resets_on_a_shift():
    _caching_timeline()


def test_caching_timeline_fails_with_a_broken_reset(monkeypatch):
    monkeypatch.setattr(B.Backoff, "reset", lambda self, at, reason: None)
    with pytest.raises(AssertionError):
        _caching_timeline()


def test_caching_backoff_stretches_only_the_wait(monkeypatch):
    """Over the same steady stream, the back-off profiles candidates' keys in fewer calls; with
    it off nothing is stretched."""
    seen: list[int] = []
    orig = ACaching.observe_keys
    monkeypatch.setattr(ACaching, "observe_keys", lambda self, *a: (seen.append(1), orig(self, *a))[1])
    runs, keyed = {}, {}
    for cap in (1, 8):
        seen.clear()
        cfg = CachingConfig(**{**NOTHING_PAYS.__dict__, "backoff": cap})
        data = {k: v[: len(v) // 2] for k, v in _join_data().items()}  # steady part only
        _got, h = _run(DDL3, Q3, data, 300, {}, caching=cfg, adaptive=FIXED)
        runs[cap], keyed[cap] = _join(h).caching, len(seen)
    assert runs[1].backoff.stretch == 1 and not runs[1].backoff.log
    assert runs[8].backoff.stretch == 8
    assert keyed[8] < 0.7 * keyed[1], keyed


def test_knobs_control_tables_and_explain():
    _got, h = run_engine(DDL, QUERY, _selection_data(1000), chunk=100, adaptive=SEL)
    op = _selection(h)
    t = op.control_table()
    assert t["knobs"]["profile_backoff"] == 8
    assert t["adaptive"]["backoff"]["cap"] == 8 and t["adaptive"]["backoff"]["stretch"] >= 2
    (line,) = op.explain_detail()
    assert f"back-off x{t['adaptive']['backoff']['stretch']} of 8" in line
    op.set_knob("profile_backoff", 1)
    assert op.adaptive.backoff.cap == 1 and "back-off" not in op.explain_detail()[0]
    for bad in (0, 3, 2048, True, "8"):
        with pytest.raises(KnobError):
            op.set_knob("profile_backoff", bad)

    _got, h = _run(DDL3, Q3, _join_data(600), 300, {}, caching=NOTHING_PAYS, adaptive=FIXED)
    j = _join(h)
    t = j.control_table()
    assert t["knobs"]["cache_backoff"] == 8 and t["caching"]["backoff"]["cap"] == 8
    (line,) = [x for x in j.explain_detail() if x.startswith("caches (")]
    assert f"back-off x{j.caching.backoff.stretch} of 8" in line
    j.set_knob("cache_backoff", 1)
    assert j.caching.backoff.cap == 1
    with pytest.raises(KnobError):
        j.set_knob("cache_backoff", 5)


def test_backoff_unit():
    b = B.Backoff(4)
    assert [b.skip() for _ in range(3)] == [False] * 3  # stretch 1: every pass
    b.quiet(10)
    b.quiet(20)
    b.quiet(30)  # capped
    assert b.stretch == 4 and b.grows == 2
    assert [b.skip() for _ in range(8)] == [True, True, True, False] * 2
    b.skip()
    b.reset(40, "x")
    assert b.stretch == 1 and not b.skip()  # the next due pass is taken at once
    assert [e["stretch"] for e in b.log] == [2, 4, 1]


def test_rate_drift():
    d = B.RateDrift(0.1)
    assert not d.moved(1000, [1000, 300])
    assert not d.moved(1000, [990, 310])
    assert not d.moved(10, [0, 0])  # too few tuples to judge
    assert d.moved(1000, [150, 100])
