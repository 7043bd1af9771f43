"""A queue's `recent` tail (what a UI peeks at) must not keep a pushed batch's arrays alive: a
view of the last rows would pin the whole batch after every reader has consumed it."""

import numpy as np

from cqlstream.cql.types import DataType
from cqlstream.engine.batch import Batch
from cqlstream.engine.queues import RECENT, Queue

INT = DataType("int")


def _batch(n: int) -> Batch:
    return Batch(
        [np.arange(n, dtype=np.int64)],
        [None],
        np.arange(n, dtype=np.int64) // 10 + 1,
        np.ones(n, np.int8),
        np.arange(n, dtype=np.uint64),
    )


def test_recent_holds_copies_not_views():
    q = Queue([INT])
    r = q.reader()
    big = _batch(10 * RECENT)
    q.push(big, watermark=int(big.ts[-1]))
    r.take(int(big.ts[-1]))
    assert q.batches == []  # consumed by the only reader: the queue itself holds nothing
    tail = q.recent[-1]
    for a, b in [(tail.cols[0], big.cols[0]), (tail.ts, big.ts), (tail.sign, big.sign), (tail.id, big.id)]:
        assert not np.shares_memory(a, b)
    assert q.recent_rows(RECENT).cols[0].tolist() == list(range(9 * RECENT, 10 * RECENT))
    assert q.recent_rows(3).ts.tolist() == big.ts[-3:].tolist()


def test_recent_of_small_batches():
    q = Queue([INT])
    for k in range(6):
        q.push(_batch(5), watermark=k + 1)
    assert len(q.recent_rows(RECENT)) == 20  # the last four batches
    assert q.recent_rows(2).cols[0].tolist() == [3, 4]


def test_a_queue_without_tails_copies_nothing_and_peeks_empty():
    q = Queue([INT], recent=False)
    r = q.reader()
    q.push(_batch(3 * RECENT), watermark=100)
    assert q.recent is None and len(q.recent_rows(RECENT)) == 0
    assert len(r.take(100)) == 3 * RECENT  # the data path is unchanged


def test_script_runs_keep_no_tails_and_other_hosts_do():
    from cqlstream.engine.dsms import Dsms

    for flag in (True, False):
        d = Dsms(recent_tails=flag)
        d.execute("register stream S (a int)")
        d.execute("select a from S where a > 1")
        queues = [pn.queue for pn in d.plan.nodes.values()]
        assert queues and all((q.recent is not None) == flag for q in queues)
