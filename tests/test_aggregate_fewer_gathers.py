"""Two AggregateOp paths that spare gathers and scatters (engine/operators/aggregate.py,
engine/aggregates/group_state.py), each checked against the reference evaluator at 1, 7 and all
events per push, and the first also element for element, ids included, against the path it
replaces:

- unchanged cells kept among the changed ones (`AggregateOp.UNCHANGED_KEPT`): when nearly every
  cell changes its group's row, all cells stay, the few unchanged ones with neither a `−` nor a
  `+`; a cell after one (or after a run of them) deletes the row id that cell kept;
- count(x) sharing the row count's carried totals while x was never NULL
  (`GroupState.rows_counts`), until a NULL x comes (`GroupState.unshare`), in the first batch
  or later, for count(x) and for the counts under sum(x) and avg(x);
- a released group's reset writing its totals only (`GroupState.reset`): with ids reused
  (COMPACT_MIN lowered) the output, ids included, is that of the full reset.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cqlstream.engine.aggregates.group_state import GroupState
from cqlstream.engine.aggregates.quantities import Quantity
from cqlstream.engine.operators.aggregate import AggregateOp
from tests.engine_harness import assert_same, engine_raw

SETTINGS = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow])
DDL = "register relation R (a int, b int); register stream S (a int, b int);"
KEPT_QUERIES = [
    "select a, count(*) from R group by a",
    "select a, sum(b), count(b) from R group by a",
    "select a, avg(b) from R group by a having count(*) > 1",
    "select a, count(*) from S [Range 2] group by a",
]


@st.composite
def updates(draw):
    """Inserts, deletes and updates of a relation over few groups: an update within a group at
    one instant leaves its row unchanged (a cell that does not change), often several instants
    in a row; values may be NULL."""
    events, held, t = [], [], 0
    for _ in range(draw(st.integers(0, 30))):
        t += draw(st.sampled_from([0, 1, 1, 2]))
        kind = draw(st.sampled_from(["insert", "delete", "update", "update", "same"]))
        if kind != "insert" and held:
            row = held.pop(draw(st.integers(0, len(held) - 1)))
            events.append((t, -1, row))
            if kind == "delete":
                continue
            if kind == "same":  # the same row back: its group's row unchanged
                held.append(row)
                events.append((t, +1, row))
                continue
        row = (draw(st.integers(0, 2)), draw(st.one_of(st.integers(0, 3), st.just(None))))
        held.append(row)
        events.append((t, +1, row))
    return events


@st.composite
def windowed(draw):
    events, t = [], 0
    for _ in range(draw(st.integers(0, 24))):
        t += draw(st.sampled_from([0, 0, 1, 2]))
        events.append((t, (draw(st.integers(0, 2)), draw(st.integers(0, 3)))))
    return events


def _inputs(query: str, r, s) -> dict:
    return {"S": s} if " S " in query else {"R": r}


def _with_ids(batches) -> list[tuple]:
    return [
        (t, sg, i, row)
        for b in batches
        if b is not None
        for t, sg, i, row in zip(b.ts.tolist(), b.sign.tolist(), b.id.tolist(), b.rows())
    ]


def _ids_consistent(out: list[tuple]) -> None:
    """Every `−` retracts a live row by its id, with that row's values; ids never reused while live."""
    live: dict[int, tuple] = {}
    for _, sign, i, row in out:
        if sign > 0:
            assert i not in live
            live[i] = row
        else:
            assert live.pop(i) == row, (i, row)


@settings(max_examples=80, **SETTINGS)
@given(st.sampled_from(KEPT_QUERIES), updates(), windowed())
def test_unchanged_cells_kept_equal_the_changed_cells_gathered(query, r, s):
    inputs = _inputs(query, r, s)
    with pytest.MonkeyPatch.context() as mp:
        for chunk in (1, 7, None):
            mp.setattr(AggregateOp, "UNCHANGED_KEPT", 1.0)  # every batch: all cells kept
            new, h, _ = engine_raw(DDL, query, inputs, chunk)
            mp.setattr(AggregateOp, "UNCHANGED_KEPT", 0.0)  # never (only when every cell changes)
            old, _, _ = engine_raw(DDL, query, inputs, chunk)
            assert _with_ids(new) == _with_ids(old), f"chunk={chunk}\n{h.explain()}"
            _ids_consistent(_with_ids(new))
        mp.setattr(AggregateOp, "UNCHANGED_KEPT", 1.0)
        assert_same(DDL, query, inputs)


def test_a_run_of_unchanged_cells_then_a_delete():
    """Group 0: inserted at 1, its row unchanged at 2 and 3 (the same row out and back in), gone
    at 4: the `−` at 4 carries the id of the `+` at 1. Group 1 changes at every instant (so most
    cells change)."""
    r = [(1, +1, (0, 5)), (1, +1, (1, 1))]
    for t in (2, 3):
        r += [(t, -1, (0, 5)), (t, +1, (0, 5)), (t, -1, (1, t - 1)), (t, +1, (1, t))]
    r += [(4, -1, (0, 5)), (4, -1, (1, 3)), (4, +1, (1, 4))]
    query = "select a, count(*), sum(b) from R group by a"
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(AggregateOp, "UNCHANGED_KEPT", 1.0)
        out = _with_ids(engine_raw(DDL, query, {"R": r}, None)[0])
    _ids_consistent(out)
    plus = {row: i for t, sg, i, row in out if sg > 0 and row[0] == 0}
    minus = [(t, i, row) for t, sg, i, row in out if sg < 0 and row[0] == 0]
    assert minus == [(4, plus[(0, 1, 5)], (0, 1, 5))]
    assert_same(DDL, query, {"R": r})


COUNT_QUERIES = [
    "select a, count(b) from R group by a",
    "select a, count(b), count(*) from R group by a",
    "select a, sum(b) from R group by a",
    "select a, avg(b), count(b) from R group by a",
    "select count(b), avg(b) from R",
]


@st.composite
def nulls_late(draw):
    """A relation whose NULL values of b (if any) come only after a prefix without them."""
    events, held, t = [], [], 0
    clean = draw(st.integers(0, 20))
    for k in range(draw(st.integers(0, 30))):
        t += draw(st.sampled_from([0, 1, 1, 2]))
        if held and draw(st.booleans()):
            events.append((t, -1, held.pop(draw(st.integers(0, len(held) - 1)))))
            continue
        b = None if k >= clean and draw(st.booleans()) else draw(st.integers(-3, 3))
        row = (draw(st.integers(0, 2)), b)
        held.append(row)
        events.append((t, +1, row))
    return events


@settings(max_examples=80, **SETTINGS)
@given(st.sampled_from(COUNT_QUERIES), nulls_late(), st.booleans())
def test_counts_share_the_row_count_until_a_null(query, r, compat):
    assert_same(DDL, query, {"R": r}, compat=compat)


def _aggregate(d) -> AggregateOp:
    (op,) = [o for o in d.plan.operators if isinstance(o, AggregateOp)]
    return op


def test_a_null_ends_the_sharing_for_good():
    q = Quantity("count", 0)
    query = "select a, count(b) from R group by a"
    r = [(1, +1, (0, 4)), (1, +1, (1, 2)), (2, -1, (0, 4))]
    _, _, d = engine_raw(DDL, query, {"R": r}, None)
    assert q in _aggregate(d).state.rows_counts and q not in _aggregate(d).state.totals
    r += [(3, +1, (1, None)), (4, +1, (1, 7))]
    for chunk in (1, 2, None):
        _, _, d = engine_raw(DDL, query, {"R": r}, chunk)
        st_ = _aggregate(d).state
        assert q not in st_.rows_counts
        assert st_.totals[q][:2].tolist() == [0, 2]  # group 1: 2 and 7 (the NULL not counted)
    assert_same(DDL, query, {"R": r})


def _full_reset(self: GroupState, g) -> None:
    """The reset before session 18: the carried row too (exists, id, values, NULL flags)."""
    self.exists[g] = False
    self.row_id[g] = 0
    for a in self.out_vals:
        a[g] = "" if a.dtype == object else 0
    for a in self.out_nulls:
        a[g] = True
    for a in self.totals.values():
        a[g] = 0
    for a in (*self.fsum_hi.values(), *self.fsum_lo.values()):
        a[g] = 0.0


REUSE_DDL = "register relation R (a int, b int); register stream T (a int, s varchar(3));"
REUSE_QUERIES = [
    "select a, count(*), sum(b) from R group by a",
    "select a, avg(b), max(b) from R group by a",
    "select a, max(s), count(*) from T [Range 2] group by a",
    "select a, count(*) from T [Range 1] group by a having count(*) > 1",
]


@st.composite
def short_lived(draw):
    """Groups that come and go (their ids reused past COMPACT_MIN): a relation R of (a, b), a
    stream T of (a, s), over many keys."""
    r, held, t = [], [], 0
    for _ in range(draw(st.integers(0, 30))):
        t += draw(st.sampled_from([0, 1, 1, 2]))
        if held and draw(st.booleans()):
            r.append((t, -1, held.pop(draw(st.integers(0, len(held) - 1)))))
            continue
        row = (draw(st.integers(0, 9)), draw(st.one_of(st.integers(0, 3), st.just(None))))
        held.append(row)
        r.append((t, +1, row))
    s, t = [], 0
    for _ in range(draw(st.integers(0, 24))):
        t += draw(st.sampled_from([0, 1, 2]))
        s.append((t, (draw(st.integers(0, 9)), draw(st.sampled_from(["x", "yy", "", None])))))
    return {"R": r, "T": s}


@settings(max_examples=60, **SETTINGS)
@given(st.sampled_from(REUSE_QUERIES), short_lived())
def test_released_groups_reset_their_totals_only(query, events):
    inputs = {"T": events["T"]} if " T " in query else {"R": events["R"]}
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(AggregateOp, "COMPACT_MIN", 4)  # ids of empty groups reused from 4 ids on
        for chunk in (1, 7, None):
            new, h, _ = engine_raw(REUSE_DDL, query, inputs, chunk)
            with pytest.MonkeyPatch.context() as full:
                full.setattr(GroupState, "reset", _full_reset)
                old, _, _ = engine_raw(REUSE_DDL, query, inputs, chunk)
            assert _with_ids(new) == _with_ids(old), f"chunk={chunk}\n{h.explain()}"
            _ids_consistent(_with_ids(new))
        assert_same(REUSE_DDL, query, inputs)
