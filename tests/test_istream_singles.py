"""Istream/Dstream's general path (engine/operators/r2s.py): one sort by (instant, value, wanted)
and, when no (instant, value) holds two rows of one sign (`_singles`: Linear Road's SegEntryStr
Istream over `[Range 30]`), a wanted row is emitted iff it is alone in its group.

- process against a per-row model of the rule (Istream at t: the newest max(0, #ins − #del)
  inserts of each (instant, value), Dstream the oldest deletes, in batch order; compat: nothing
  at the last instant), batch by batch, with repeats, NULLs and floats, element for element,
  the sort whole or in runs of whole instants;
- queries against the reference evaluator at 1, 7 and all events per push, paper and compat;
- the same batches (ids included) with the shortcut switched off, and which path a batch takes.
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cqlstream.engine.batch import Batch
from cqlstream.engine.operators import valuecount
from cqlstream.engine.operators.r2s import RelToStreamOp
from tests.engine_harness import assert_same, engine_raw
from tests.test_stream_join import relation_events, stream_events

DDL = "register stream S (a int, b int); register relation R (a int, b int);"
QUERIES = [
    "Istream(select a, b from S [Range 2])",
    "Istream(select a from S [Range 3])",
    "Dstream(select a, b from S [Range 2])",
    "Istream(select a, b from S [Rows 2])",
    "Dstream(select b from S [Rows 3])",
    "Istream(select a from S [Now])",
    "Istream(select * from R)",
    "Dstream(select a from R)",
    "Istream(select S.a, R.b from S [Range 2], R where S.a = R.a)",
]


class _Ids:
    def __init__(self) -> None:
        self.next = 100

    def take(self, n: int) -> np.ndarray:
        out = np.arange(self.next, self.next + n, dtype=np.uint64)
        self.next += n
        return out


def _op(kind: str, final: bool) -> RelToStreamOp:
    op = object.__new__(RelToStreamOp)
    op.op, op.compat, op.ids, op.by_value = kind, final, _Ids(), False
    op._final = lambda bound: final  # type: ignore[method-assign]
    return op


def _model(kind: str, rows: list[tuple], ts: list[int], sign: list[int], bound: int, final: bool) -> list[int]:
    """Positions emitted by the rule, in batch order (the reference's tie order)."""
    groups: dict[tuple, list[int]] = defaultdict(list)
    for i, (t, r) in enumerate(zip(ts, rows)):
        groups[(t, r)].append(i)
    keep = []
    for (t, _), pos in groups.items():
        ins = [i for i in pos if sign[i] > 0]
        dels = [i for i in pos if sign[i] < 0]
        if final and t >= bound:
            continue
        if kind == "istream":
            copies = max(0, len(ins) - len(dels))
            keep += ins[len(ins) - copies :]
        else:
            copies = max(0, len(dels) - len(ins))
            keep += dels[:copies]
    return sorted(keep)


@st.composite
def batches(draw):
    n = draw(st.integers(1, 40))
    ts = sorted(draw(st.lists(st.integers(0, 4), min_size=n, max_size=n)))
    sign = draw(st.lists(st.sampled_from([1, -1]), min_size=n, max_size=n))
    vals = draw(st.integers(1, 6))  # few values: repeats within an instant; many: singles
    a = draw(st.lists(st.integers(0, vals), min_size=n, max_size=n))
    b = draw(st.lists(st.sampled_from([0.5, -1.0, 2.0]), min_size=n, max_size=n))
    null = draw(st.lists(st.booleans(), min_size=n, max_size=n))
    return ts, sign, a, b, null


def _batch(ts, sign, a, b, null) -> Batch:
    m = np.array(null)
    return Batch(
        [np.array(a, np.int64), np.array(b, np.float64)],
        [None, m if m.any() else None],
        np.array(ts, np.int64),
        np.array(sign, np.int8),
        np.arange(len(ts), dtype=np.uint64) + 7,
    )


@settings(max_examples=300, deadline=None)
@given(batches(), st.sampled_from(["istream", "dstream"]), st.booleans(), st.booleans(), st.sampled_from([0, 1, 3]))
def test_process_against_a_row_model(data, kind, final, singles, chunk):
    """`chunk`: the sort in runs of whole instants of about that many rows (0: one sort)."""
    ts, sign, a, b, null = data
    bound = ts[-1]
    rows = [(x, None if z else y) for x, y, z in zip(a, b, null)]
    want = _model(kind, rows, ts, sign, bound, final)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(RelToStreamOp, "SINGLES", singles)
        mp.setattr(RelToStreamOp, "ONE_SIDED", False)
        mp.setattr(valuecount, "SORT_CHUNK", chunk)
        out = _op(kind, final).process([_batch(*data)], bound)
    got_rows = [
        (x, None if z else y) for x, y, z in zip(out.cols[0].tolist(), out.cols[1].tolist(), out.null_mask(1).tolist())
    ]
    assert got_rows == [rows[i] for i in want]
    assert out.ts.tolist() == [ts[i] for i in want]
    assert out.sign.tolist() == [1] * len(want)
    assert out.id.tolist() == list(range(100, 100 + len(want)))


def _singles_calls(monkeypatch) -> list[int]:
    calls: list[int] = []
    real = RelToStreamOp._singles

    def spy(skey):
        calls.append(len(skey))
        return real(skey)

    monkeypatch.setattr(RelToStreamOp, "_singles", staticmethod(spy))
    return calls


def test_which_path_a_batch_takes(monkeypatch):
    calls = _singles_calls(monkeypatch)
    # one report per value and instant; [Range 2] holds 3 instants, so a value reported again 3
    # instants later meets its own expiry and they cancel: groups of at most one row per sign
    s = [(t, (v, t % 3)) for t in range(6) for v in (1, 2)] + [(6, (1, 0)), (6, (3, 0))]
    out, _, _ = engine_raw(DDL, "Istream(select a, b from S [Range 2])", {"S": s, "R": []}, None)
    assert calls
    rows = [e for o in out if o is not None for e in o.elements()]
    assert rows == [(t, 1, (v, t % 3)) for t in range(3) for v in (1, 2)] + [(6, 1, (3, 0))]
    calls.clear()
    # two inserts of one value at one instant: the general path
    s = [(0, (1, 1)), (0, (1, 1)), (1, (2, 2)), (2, (1, 1)), (3, (4, 4))]
    out, _, _ = engine_raw(DDL, "Istream(select a, b from S [Range 2])", {"S": s, "R": []}, None)
    assert not calls
    rows = [e for o in out if o is not None for e in o.elements()]
    assert rows == [(0, 1, (1, 1)), (0, 1, (1, 1)), (1, 1, (2, 2)), (2, 1, (1, 1)), (3, 1, (4, 4))]


@given(st.sampled_from(QUERIES), stream_events(2), relation_events(), st.booleans())
def test_equals_reference(query, s, r, compat):
    assert_same(DDL, query, {"S": s, "R": r}, compat=compat)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(QUERIES), stream_events(2), relation_events(), st.booleans())
def test_same_batches_without_the_shortcut(query, s, r, compat):
    inputs = {"S": s, "R": r}
    for chunk in (1, 7, None):
        new, _, _ = engine_raw(DDL, query, inputs, chunk, compat=compat)
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(RelToStreamOp, "SINGLES", False)
            old, _, _ = engine_raw(DDL, query, inputs, chunk, compat=compat)
        for x, y in zip(new, old):
            assert (x is None) == (y is None)
            if x is not None:
                assert x.elements() == y.elements() and x.id.tolist() == y.id.tolist(), f"chunk={chunk}"
        assert len(new) == len(old)
