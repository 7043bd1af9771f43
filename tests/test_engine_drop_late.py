"""`Dsms.push_batch(..., drop_late=True)`: rows older than a source's time are dropped and counted in
its `late` counter instead of rejecting the push; the results equal pushing only the in-time rows."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from cqlstream.engine.batch import from_rows
from cqlstream.engine.dsms import Dsms
from cqlstream.engine.errors import InputError
from tests.engine_harness import net_by_instant, run_reference

DDL = "register stream S (a int, b int);"
AGG = "select a, count(*), sum(b) from S [Range 3] group by a"


def engine(ddl: str = DDL, query: str = AGG) -> tuple[Dsms, object]:
    d = Dsms()
    d.execute(ddl)
    h = d.register_query(query)
    return d, d.subscribe(h.id)


def batch(d: Dsms, name: str, rows, ts, signs=None):
    return from_rows(rows, d.inputs[name.lower()].types, ts, signs)


def result(d: Dsms, sub) -> dict[int, Counter]:
    d.end()
    return net_by_instant(sub.poll())


def test_rows_before_the_stream_time_are_dropped_counted_and_the_rest_pushed():
    d, sub = engine()
    d.push_batch("S", batch(d, "S", [(1, 1), (2, 2)], [1, 5]))
    n = d.push_batch("S", batch(d, "S", [(1, 10), (2, 20), (1, 30), (3, 40)], [2, 5, 6, 9]), drop_late=True)
    assert n == 4  # late rows count as accepted (as a slack stream's late rows do)
    assert d.inputs["s"].late == 1 and d.inputs["s"].accepted == 5
    in_time = [(1, (1, 1)), (5, (2, 2)), (5, (2, 20)), (6, (1, 30)), (9, (3, 40))]
    assert result(d, sub) == run_reference(DDL, AGG, {"S": in_time})


def test_without_drop_late_a_late_row_still_rejects_the_whole_push():
    d, _sub = engine()
    d.push_batch("S", batch(d, "S", [(1, 1)], [5]))
    with pytest.raises(InputError, match="already accepted"):
        d.push_batch("S", batch(d, "S", [(1, 2), (1, 3)], [4, 6]))
    assert d.inputs["s"].late == 0 and d.inputs["s"].accepted == 1


def test_a_push_rejected_for_other_reasons_counts_no_late_rows():
    d, _sub = engine()
    d.push_batch("S", batch(d, "S", [(1, 1)], [5]))
    with pytest.raises(InputError, match="smaller than the previous"):  # 7 then 6: disorder among the in-time rows
        d.push_batch("S", batch(d, "S", [(1, 2), (1, 3), (1, 4)], [1, 7, 6]), drop_late=True)
    assert d.inputs["s"].late == 0 and d.inputs["s"].accepted == 1 and d.inputs["s"].max_ts == 5


def test_all_rows_late_pushes_nothing_and_a_heartbeat_sets_the_time():
    d, _sub = engine()
    d.heartbeat("S", 10)
    assert d.push_batch("S", batch(d, "S", [(1, 1), (2, 2)], [3, 9]), drop_late=True) == 2
    assert d.inputs["s"].late == 2 and d.inputs["s"].accepted == 0
    d.push_batch("S", batch(d, "S", [(1, 1)], [10]), drop_late=True)  # a row at the stream's time is in time
    assert d.inputs["s"].late == 2 and d.inputs["s"].accepted == 1


def test_a_stream_with_slack_counts_its_late_rows_itself_either_way():
    ddl = "register stream S (a int, b int) with (slack = 2);"
    outs = []
    for drop in (False, True):
        d, sub = engine(ddl, "select * from S")
        d.push_batch("S", batch(d, "S", [(1, 0), (3, 0), (2, 0)], [1, 3, 2]), drop_late=drop)
        d.push_batch("S", batch(d, "S", [(6, 0)], [6]), drop_late=drop)  # releases through 3
        d.push_batch("S", batch(d, "S", [(0, 0), (5, 0)], [0, 5]), drop_late=drop)  # 0 is late, 5 within slack
        assert d.inputs["s"].late == 1
        outs.append(result(d, sub))
    assert outs[0] == outs[1] and sorted(outs[0]) == [1, 2, 3, 5, 6]


def test_relation_updates_before_its_time_are_dropped():
    ddl = "register relation R (a int);"
    q = "select a, count(*) from R group by a"
    d, sub = engine(ddl, q)
    d.push_batch("R", batch(d, "R", [(1,), (2,)], [1, 4], np.array([1, 1], np.int8)))
    d.push_batch("R", batch(d, "R", [(1,), (2,), (3,)], [2, 4, 5], np.array([-1, -1, 1], np.int8)), drop_late=True)
    assert d.inputs["r"].late == 1
    kept = [(1, 1, (1,)), (4, 1, (2,)), (4, -1, (2,)), (5, 1, (3,))]
    assert result(d, sub) == run_reference(ddl, q, {"R": kept})


@pytest.mark.parametrize("seed", range(5))
def test_random_pushes_with_late_rows_equal_the_reference_on_the_in_time_rows(seed):
    rng = np.random.default_rng(seed)
    d, sub = engine()
    in_time: list[tuple[int, tuple[int, int]]] = []
    top: int | None = None
    late = 0
    for _ in range(20):
        m = int(rng.integers(1, 8))
        base = (top or 0) + int(rng.integers(-4, 3))
        ts = np.sort(base + rng.integers(0, 6, m))
        rows = [(int(a), int(b)) for a, b in zip(rng.integers(0, 3, m), rng.integers(0, 100, m))]
        d.push_batch("S", batch(d, "S", rows, ts), drop_late=True)
        for t, r in zip(ts.tolist(), rows):
            if top is None or t >= top:
                in_time.append((t, r))
            else:
                late += 1
        top = max(top, int(ts[-1])) if top is not None else int(ts[-1])
        d.run()
    assert late > 0 and d.inputs["s"].late == late
    assert result(d, sub) == run_reference(DDL, AGG, {"S": in_time})
