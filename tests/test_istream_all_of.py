"""Istream over inserts only / Dstream over deletes only (engine/operators/r2s.py, `_all_of`): every
element is emitted, without the general path's (instant, value) sort.

- against the reference evaluator at 1, 7 and all events per push, paper and compat mode (compat:
  nothing at the last instant), over inputs that are insert-only (stream views: Istream over an
  Unbounded window, which compat mode keeps), delete-only (Dstream over an Unbounded window:
  none) and mixed (windows that expire, relations with deletes), so calls of both kinds meet;
- the same batches, in the same order, as the general path (the fast path switched off);
- the fast path is taken for a compat stream view and not for a batch with deletes.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cqlstream.engine.operators.r2s import RelToStreamOp
from tests.engine_harness import assert_same, engine_raw
from tests.test_stream_join import relation_events, stream_events

DDL = "register stream S (a int, b int); register relation R (a int, b int);"
QUERIES = [
    "Istream(select a, b from S where b <> 1)",
    "Istream(select a from S [Range Unbounded])",
    "Istream(select a * 2, b from S [Rows Unbounded] where a > 0)",
    "Dstream(select a from S [Range Unbounded])",
    "Istream(select a from S [Range 2])",
    "Dstream(select a, b from S [Rows 2])",
    "Istream(select * from R)",
    "Dstream(select a from R where b > 0)",
    "Istream(select distinct a from S [Range 3])",
]


@given(st.sampled_from(QUERIES), stream_events(2), relation_events(), st.booleans())
def test_equals_reference(query, s, r, compat):
    assert_same(DDL, query, {"S": s, "R": r}, compat=compat)


def _rows(batches) -> list[tuple]:
    return [e for b in batches if b is not None for e in b.elements()]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(QUERIES), stream_events(2), relation_events(), st.booleans())
def test_same_batches_as_the_general_path(query, s, r, compat):
    inputs = {"S": s, "R": r}
    for chunk in (1, 7, None):
        new, _, _ = engine_raw(DDL, query, inputs, chunk, compat=compat)
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(RelToStreamOp, "ONE_SIDED", False)
            old, _, _ = engine_raw(DDL, query, inputs, chunk, compat=compat)
        assert _rows(new) == _rows(old), f"chunk={chunk}"


def test_the_fast_path_is_taken_only_for_one_sided_batches(monkeypatch):
    calls: list[int] = []
    real = RelToStreamOp._all_of

    def spy(self, b, bound, final):
        calls.append(len(b))
        return real(self, b, bound, final)

    monkeypatch.setattr(RelToStreamOp, "_all_of", spy)
    s = [(0, (1, 2)), (0, (1, 2)), (1, (3, 4))]
    out, _, _ = engine_raw(DDL, QUERIES[0], {"S": s, "R": []}, None, compat=True)
    assert sum(calls) == 3
    assert _rows(out) == [(0, 1, (1, 2)), (0, 1, (1, 2))]  # compat: nothing at the last instant 1
    calls.clear()
    s = [(0, (1, 2)), (1, (3, 4)), (2, (5, 6)), (3, (7, 8))]
    out, _, _ = engine_raw(DDL, "Istream(select a from S [Now])", {"S": s, "R": []}, None)
    # the window's expiries are deletes: calls holding them take the general path
    assert sum(calls) < 4 + 3
    assert _rows(out) == [(0, 1, (1,)), (1, 1, (3,)), (2, 1, (5,)), (3, 1, (7,))]
