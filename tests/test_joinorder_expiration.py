"""The naive lazy multi-join of Golab & Özsu (Tables 2–3) returns 8 rows where 2 are correct.
The engine's MJoin and the reference evaluator give the 2 correct rows, under every probe order;
the expiration model (engine/joinorder/expiration.py) shows where the 6 wrong ones come from."""

from __future__ import annotations

import itertools
from collections import Counter

from cqlstream.engine.dsms import Dsms
from cqlstream.engine.joinorder.expiration import SlidingWindow, compute_join, eager_run, lazy_run
from tests.engine_harness import _merge_events, feed, net_by_instant, run_reference

DDL = "register stream S1 (ts int, a int); register stream S2 (ts int, a int); register stream S3 (ts int, a int);"
QUERY = (
    "istream(select S1.ts, S2.ts, S3.ts from S1 [Range 100], S2 [Range 100], S3 [Range 100] "
    "where S1.a = S2.a and S2.a = S3.a)"
)
# Table 2: (ts, attr) per window; all windows are 100 long, the current time is 210
TABLE2 = {"S1": [(90, 1), (100, 1)], "S2": [(150, 1), (180, 1)], "S3": [(195, 1), (205, 1)]}
CORRECT = [(100, 150, 195), (100, 180, 195)]
TABLE3 = [(a, b, c) for a in (90, 100) for b in (150, 180) for c in (195, 205)]  # what naive lazy returns


def inputs() -> dict[str, list]:
    return {name: [(ts, (ts, a)) for ts, a in rows] for name, rows in TABLE2.items()}


def run_with_orders(ddl: str, query: str, data: dict[str, list], orders, chunk: int | None) -> dict[int, Counter]:
    """The engine's result with the join's probe orders set through its knob before data flows."""
    d = Dsms()
    d.execute(ddl)
    h = d.register_query(query)
    sub = d.subscribe(h.id)
    (join,) = [t for t in d.control_tables() if t.get("type") == "join"]
    d.set_knob(join["id"], "probe_orders", orders)
    got: dict[int, Counter] = {}

    def poll(_n: int = 0) -> None:
        for t, c in net_by_instant(sub.poll()).items():
            got.setdefault(t, Counter()).update(c)

    feed(d, _merge_events(data), chunk, after=poll)
    d.end()
    poll()
    return {t: Counter({k: v for k, v in c.items() if v}) for t, c in got.items() if any(c.values())}


def all_rows(result: dict[int, Counter]) -> Counter:
    out: Counter = Counter()
    for c in result.values():
        out.update(c)
    return out


def test_reference_gives_the_two_correct_rows():
    assert all_rows(run_reference(DDL, QUERY, inputs())) == Counter(CORRECT)


def test_engine_gives_the_two_correct_rows_under_every_probe_order():
    perms = [list(itertools.permutations([j for j in range(3) if j != i])) for i in range(3)]
    seen = 0
    for chunk in (1, None):
        for combo in itertools.product(*perms):
            orders = [list(o) for o in combo]
            got = run_with_orders(DDL, QUERY, inputs(), orders, chunk)
            assert all_rows(got) == Counter(CORRECT), (chunk, orders)
            assert got == {195: Counter(CORRECT)}
            seen += 1
    assert seen == 16


def windows_at_210() -> list[SlidingWindow]:
    ws = [SlidingWindow(100) for _ in range(3)]
    for w, rows in zip(ws, TABLE2.values()):
        for t in rows:
            w.insert(t)
    return ws


def ts_rows(rows) -> list[tuple[int, ...]]:
    return sorted(tuple(t[0] for t in r) for r in rows)


def test_naive_lazy_returns_table3():
    # the batch of new S3 tuples joined with S1 ⋈ S2 as the windows hold them: no timestamp checks
    ws = windows_at_210()
    got = [r for k in TABLE2["S3"] for r in compute_join(k, 2, [0, 1], ws, checked=False)]
    assert ts_rows(got) == sorted(TABLE3) and len(got) == 8


def test_lazy_with_timestamp_checks_is_correct():
    # re-executions every τ ≥ 16 process both new S3 tuples (and, for larger τ, older S1/S2 tuples) at 210
    for tau in (20, 50, 120):
        ws = windows_at_210()
        got = lazy_run(ws, list(TABLE2.values()), now=210, tau=tau, orders=[[1, 2], [0, 2], [0, 1]])
        assert ts_rows(got) == CORRECT
        naive = lazy_run(windows_at_210(), [[], [], TABLE2["S3"]], 210, tau, [[1, 2], [0, 2], [0, 1]], checked=False)
        assert len(naive) == 8


def test_eager_expiration_is_correct_in_every_order():
    arrivals = sorted(((i, t) for i, rows in enumerate(TABLE2.values()) for t in rows), key=lambda x: x[1][0])
    for glob in itertools.permutations(range(3)):
        orders = [[j for j in glob if j != i] for i in range(3)]
        assert ts_rows(eager_run([SlidingWindow(100) for _ in range(3)], arrivals, orders)) == CORRECT


def test_expiration_visits_every_bucket():
    w = SlidingWindow(10, buckets=4)
    for t in [(1, 1), (2, 2), (15, 3)]:
        w.insert(t)
    assert w.expire(12) == 4 and len(w) == 2  # ts 2 ≥ 12 − 10 still joins a tuple at 12
    assert w.expire(13) == 4 and len(w) == 1
