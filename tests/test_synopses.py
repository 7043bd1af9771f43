"""Shared synopses: one store per relation-valued queue, read by every join over it."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings

from cqlstream.cql.types import INT
from cqlstream.engine.batch import from_rows
from cqlstream.engine.dsms import Dsms
from cqlstream.engine.operators.join import JoinOp
from cqlstream.engine.queues import Queue
from cqlstream.engine.synopses import RelationStore
from tests.engine_harness import net_by_instant, run_reference
from tests.test_differential import DDL, stream_events


class _User:
    done_through = None


def test_store_lifetimes_duplicates_and_purge():
    q = Queue([INT])
    st = RelationStore(q)
    user = _User()
    st.users.append(user)
    # ids 1 and 2 (twice: a union-all style duplicate); id 3 enters and leaves at instant 2
    q.push(from_rows([(10,), (20,), (20,)], [INT], [1, 1, 1], [1, 1, 1], [1, 2, 2]))
    q.push(from_rows([(30,), (30,), (20,)], [INT], [2, 2, 2], [1, -1, -1], [3, 3, 2]))
    st.advance(2)
    assert sorted(st.alive_at(1).rows()) == [(10,), (20,), (20,)]
    assert sorted(st.alive_at(2).rows()) == [(10,), (20,)]  # one copy of id 2 closed; id 3 never alive
    user.done_through = 2
    q.push(from_rows([(10,)], [INT], [3], [-1], [1]))
    st.advance(3)
    assert st.alive_at(3).rows() == [(20,)]
    assert len(st) <= 3  # closed lifetimes no reader can see are gone


def _two_queries(binary=False):
    d = Dsms(binary_joins=binary)
    d.execute(DDL)
    q1 = "select x.a, y.b from S [Rows 3] as x, T [Range 2] as y where x.a = y.a"
    q2 = "select * from S [Rows 3] as x, T [Range 2] as y where x.b < y.b"
    hs = [d.register_query(q) for q in (q1, q2)]
    return d, hs, (q1, q2)


def test_two_joins_over_the_same_windows_share_two_stores():
    d, _, _ = _two_queries()
    joins = [op for op in d.plan.operators if isinstance(op, JoinOp)]
    assert len(joins) == 2
    assert len(d.plan.stores) == 2  # one per window, not one per join input
    assert joins[0].stores[0] is joins[1].stores[0] and joins[0].stores[1] is joins[1].stores[1]


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(s=stream_events(), t=stream_events())
def test_joins_sharing_stores_give_the_reference_results(s, t):
    d, hs, queries = _two_queries()
    subs = [d.subscribe(h.id) for h in hs]
    events = sorted(
        [(ts, 0, k, "S", row) for k, (ts, row) in enumerate(s)]
        + [(ts, 1, k, "T", row) for k, (ts, row) in enumerate(t)]
    )
    for i, (ts, _, _, name, row) in enumerate(events):
        d.push(name, [row], ts=[ts])
        if i % 3 == 0:  # the two joins progress at different moments
            d.plan.operators[-1].step()
            d.run()
    d.end()
    for sub, q in zip(subs, queries):
        assert net_by_instant(sub.poll()) == run_reference(DDL, q, {"S": s, "T": t})


def test_alive_at_behind_the_newest_inserts():
    """A reader one instant behind the store (another reader advanced it) gets the prefix of rows
    it can see — as views when nothing is deleted — and exactly the rows a mask would give,
    with and without deletes."""
    import numpy as np

    rng = np.random.default_rng(5)
    for deletes in (False, True):
        q = Queue([INT])
        st = RelationStore(q)
        st.users.append(_User())
        live: list[int] = []
        seen: list[tuple[int, int, int, int]] = []  # (id, value, ins, del)
        nid = 0
        for t in range(1, 30):
            rows, signs, ids = [], [], []
            for _ in range(int(rng.integers(0, 4))):
                if deletes and live and rng.random() < 0.3:
                    i = live.pop(int(rng.integers(len(live))))
                    rows.append((i * 10,))
                    signs.append(-1)
                    ids.append(i)
                    seen[i - 1] = (i, i * 10, seen[i - 1][2], t)  # ids are 1, 2, ... in order
                else:
                    nid += 1
                    live.append(nid)
                    rows.append((nid * 10,))
                    signs.append(1)
                    ids.append(nid)
                    seen.append((nid, nid * 10, t, 10**9))
            if rows:
                q.push(from_rows(rows, [INT], [t] * len(rows), signs, ids))
            st.advance(t)
            for back in (0, 1, 3):
                at = t - back
                want = [(v,) for (_, v, ins, dl) in seen if ins <= at < dl]
                got = st.alive_at(at)
                assert got.rows() == want, (deletes, t, back)
                if not deletes and back:
                    assert got.cols[0].base is not None or len(got) in (0, len(st))  # a view, no copy
