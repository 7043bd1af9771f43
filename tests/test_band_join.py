"""The band join: `Rstream(S [Now] ⋈ S' [Range N])` with the window's stream read directly
(`StreamJoin.window`, engine/operators/band_join.py; chosen by cql/logical/rewrites/stream_join.py).

- against the reference evaluator (the plan without rewrites) at 1, 7 and all events per push,
  paper and compat mode: self-joins and joins of two streams, S first or second, Range 0 (Now),
  1, 2 and 5, equi keys with NULLs and duplicates, several tuples per instant, gaps longer than
  the window (expiries across pushes), non-equi conjuncts, cross products, two equi keys,
  self-joins whose non-equi conjuncts reject each tuple paired with itself (pairs never made);
- the output order: the same batches, element for element, as the stream–relation join over the
  window (the plan before the band join), at every push size;
- the band's bounds at their edges in both modes, the plan (EXPLAIN, operator, the shapes that
  keep the window), and a checkpoint continuing exactly.
"""

from __future__ import annotations

import importlib

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cqlstream.engine.dsms import Dsms
from cqlstream.engine.operators import band_join
from cqlstream.engine.operators.band_join import BandJoinOp
from cqlstream.engine.operators.stream_join import StreamJoinOp
from tests.engine_harness import assert_same, continue_from_checkpoint, elements_of, engine_raw

DDL = "register stream S (a int, b int, c int); register stream T (a int, b int);"
QUERIES = [
    # Linear Road's SegChangeStr shape
    "Rstream(select I.a, P.b from S [Now] as I, S [Range 2] as P where I.a = P.a and I.b != P.b)",
    "Rstream(select I.c, P.c from S [Now] as I, S [Range 1] as P where I.a = P.a)",
    "Rstream(select P.b, I.c from S [Range 5] as P, S [Now] as I where I.a = P.a)",
    "Rstream(select S.c, T.b from S [Now], T [Range 3] where S.a = T.a and S.b >= T.b)",
    "Rstream(select S.c, T.b from T [Range 2], S [Now] where S.a = T.a and S.b = T.b)",
    "Rstream(select S.c, T.a from S [Now], T [Now] where S.a = T.a)",
    "Rstream(select S.c, T.a, T.b from S [Now], T [Range 2])",
    "Rstream(select S.a + T.b from S [Now], T [Range 4] where S.a = T.a and T.b > 0 and S.c < 3)",
    # self-joins with one-side conjuncts: equal on both sides (S's tuples are X's new rows) or not
    "Rstream(select I.c, P.c from S [Now] as I, S [Range 2] as P where I.a = P.a and I.b > 0 and P.b > 0)",
    "Rstream(select I.c, P.b from S [Now] as I, S [Range 3] as P where I.a = P.a and P.b > 1)",
    "Rstream(select I.c, P.b from S [Now] as I, S [Range 1] as P where I.a = P.a and I.b = P.b)",
    # self-joins whose two-side conjunct rejects every tuple paired with itself (those pairs are
    # never made), and one where it holds for some (they are)
    "Rstream(select I.c, P.c from S [Now] as I, S [Range 3] as P where I.a = P.a and I.c <> P.c)",
    "Rstream(select I.b, P.c from S [Now] as I, S [Range 2] as P where I.a = P.a and I.b < P.b)",
    "Rstream(select I.c, P.b from S [Now] as I, S [Range 2] as P where I.a = P.a and I.b >= P.c)",
]

# the rule's module (the package re-exports the rule function under the module's name)
rule = importlib.import_module("cqlstream.cql.logical.rewrites.stream_join")
small = st.one_of(st.integers(0, 3), st.just(None))


@st.composite
def stream_events(draw, width):
    """Several tuples per instant (duplicates likely), and gaps, some longer than the windows."""
    events, t = [], draw(st.integers(0, 2))
    for _ in range(draw(st.integers(0, 18))):
        t += draw(st.sampled_from([0, 0, 0, 1, 1, 2, 3, 6]))
        events.append((t, tuple(draw(small) for _ in range(width))))
    return events


def _band(d: Dsms) -> bool:
    return any(isinstance(o, BandJoinOp) for o in d.plan.operators)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(QUERIES), stream_events(3), stream_events(2), st.booleans(), st.booleans(), st.booleans())
def test_band_join_equals_reference(query, s, t, compat, sorted_needles, ts_ranks):
    """`sorted_needles`: S sorted by key before the searches (what a large X takes) or not;
    `ts_ranks`: the band found on ranks of X's distinct instants (what a wide ts span takes)
    or on ts − X's first ts."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(band_join, "SORTED_NEEDLES", 0 if sorted_needles else 1 << 40)
        mp.setattr(band_join, "DIRECT_TS_SPAN", 0 if ts_ranks else 1 << 31)
        assert_same(DDL, query, {"S": s, "T": t}, compat=compat)


def _window_kept(mp: pytest.MonkeyPatch) -> None:
    mp.setattr(rule, "band_window", lambda x: None)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(QUERIES), stream_events(3), stream_events(2), st.booleans())
def test_output_order_is_the_stream_joins(query, s, t, compat):
    """Element for element, in order, what the stream–relation join over the window gives."""
    inputs = {"S": s, "T": t}
    with pytest.MonkeyPatch.context() as mp:
        for chunk in (1, 7, None):
            mp.setattr(band_join, "SORTED_NEEDLES", 0 if chunk == 7 else 1 << 40)
            new, h, d = engine_raw(DDL, query, inputs, chunk, compat=compat)
            assert _band(d)
            _window_kept(mp)
            old, _, d_old = engine_raw(DDL, query, inputs, chunk, compat=compat)
            assert not _band(d_old) and any(isinstance(o, StreamJoinOp) for o in d_old.plan.operators)
            mp.undo()
            assert elements_of(new) == elements_of(old), f"chunk={chunk}\n{h.explain()}"


@pytest.mark.parametrize("compat", [False, True])
@pytest.mark.parametrize("chunk", [1, 7, None])
def test_the_band_edges(chunk, compat):
    """Range 3: a T tuple at τ joins S at t for τ ≤ t ≤ τ + 3 (paper) or τ + 2 (compat); NULL
    keys never match; same-instant tuples do."""
    query = "Rstream(select S.c, T.b from S [Now], T [Range 3] where S.a = T.a)"
    s = [(t, (1, 0, t)) for t in range(10, 16)] + [(16, (None, 0, 16)), (17, (1, 0, 17))]
    t = [(10, (1, 100)), (10, (None, 101)), (11, (2, 102)), (12, (1, 103)), (12, (1, 103))]
    out, _, _ = engine_raw(DDL, query, {"S": s, "T": t}, chunk, compat=compat)
    got = [(ts, row) for ts, _, row in elements_of(out)]
    hi = 3 if not compat else 2
    want = [(ts, (ts, 100)) for ts in range(10, 11 + hi)]
    want += [(ts, (ts, 103)) for ts in range(12, 13 + hi) for _ in range(2)]
    assert sorted(got) == sorted(want)
    assert_same(DDL, query, {"S": s, "T": t}, compat=compat)


def _register(query: str, compat: bool = False):
    d = Dsms(compat=compat)
    d.execute(DDL)
    return d, d.register_query(query)


def test_explain_and_operator():
    d, h = _register(QUERIES[0])
    text = h.explain()
    assert (
        "RSTREAM JOIN [NOW] of input 1 ON ((I.a = P.a) AND (I.b <> P.b)); input 2 read as [RANGE 2] by lifetimes (band join)"
        in text
    )
    assert "WINDOW" not in text
    op = next(o for o in d.plan.operators if isinstance(o, BandJoinOp))
    assert op.control_table()["type"] == "band join"
    assert not any(type(o).__name__ == "WindowOp" for o in d.plan.operators)


@pytest.mark.parametrize(
    "query",
    [
        "Rstream(select S.c, T.b from S [Now], T [Rows 2] where S.a = T.a)",
        "Rstream(select S.c, T.b from S [Now], T [Range 4 Slide 2] where S.a = T.a)",
        "Rstream(select S.c, T.b from S [Now], T [Range Unbounded] where S.a = T.a)",
        "Rstream(select S.c, T.b from S [Now], T [Partition By T.a Rows 1] where S.a = T.a)",
    ],
)
def test_other_windows_keep_the_window(query):
    d, h = _register(query)
    assert "band join" not in h.explain()
    assert not _band(d) and any(isinstance(o, StreamJoinOp) for o in d.plan.operators)


@pytest.mark.parametrize("compat", [False, True])
def test_state_holds_only_live_tuples(compat):
    d, _ = _register("Rstream(select I.c, P.c from S [Now] as I, S [Range 5] as P where I.a = P.a)", compat)
    for t in range(0, 40, 2):
        d.push("S", [(t % 3, 0, t)], ts=[t])
    d.heartbeat("S", 40)
    d.run()
    op = next(o for o in d.plan.operators if isinstance(o, BandJoinOp))
    life = 5 if compat else 6
    # complete through 39: kept are the tuples alive at 39 or later (τ + life > 39)
    assert op.state.ts.tolist() == [t for t in range(0, 40, 2) if t + life > 39]


def test_a_checkpoint_continues_exactly(tmp_path):
    d, h = _register("Rstream(select I.c, P.c from S [Now] as I, S [Range 3] as P where I.a = P.a)")

    def step(e: Dsms, t: int) -> None:
        r = np.random.default_rng(t)
        e.push("S", [(int(x), 0, t) for x in r.integers(0, 4, 3)], ts=[t] * 3)
        e.heartbeat("T", t)
        e.run()

    copy, a, b = continue_from_checkpoint(d, h.id, tmp_path, step, warm=5, until=12)
    assert a == b and len(a) > 0
    ops = [next(o for o in e.plan.operators if isinstance(o, BandJoinOp)) for e in (d, copy)]
    assert ops[0].state.rows() == ops[1].state.rows() and len(ops[0].state) > 0
