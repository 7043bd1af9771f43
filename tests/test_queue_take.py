"""A queue reader's `take(bound)` returns exactly the pending rows with ts ≤ bound, in order,
whatever the sizes of the pushed batches and wherever the bounds fall (inside a batch, at its
last instant, past it); a small pushed batch kept as the queue's recent tail without a copy
must not be a view of a larger array. Checked against the rows filtered directly."""

import numpy as np
import pytest

from cqlstream.cql.types import DataType
from cqlstream.engine.batch import Batch, concat
from cqlstream.engine.queues import RECENT, Queue

INT = DataType("int")


def _rows(n: int, seed: int = 3) -> Batch:
    rng = np.random.default_rng(seed)
    ts = np.sort(rng.integers(1, n // 3 + 2, n)).astype(np.int64)  # several rows per instant
    return Batch(
        [np.arange(n, dtype=np.int64)],
        [None],
        ts,
        np.ones(n, np.int8),
        np.arange(n, dtype=np.uint64),
    )


def _pushes(b: Batch, size: int) -> list[Batch]:
    """`b` cut into pushes of `size` rows that keep each instant whole (as operators push)."""
    out, i = [], 0
    while i < len(b):
        j = min(i + size, len(b))
        while j < len(b) and b.ts[j] == b.ts[j - 1]:
            j += 1
        out.append(b.copy_range(i, j))
        i = j
    return out


@pytest.mark.parametrize("size", [1, 7, 10_000])
@pytest.mark.parametrize("step", [1, 2, 5])
def test_take_is_the_rows_within_the_bound(size: int, step: int) -> None:
    data = _rows(300)
    q = Queue([INT])
    readers = [q.reader(), q.reader()]
    got: list[list[list[int]]] = [[], []]
    taken = [0, 0]  # the bound each reader took through
    last = int(data.ts[-1])
    for p in _pushes(data, size):
        q.push(p, watermark=int(p.ts[-1]))
        for k, r in enumerate(readers):
            # reader 0 takes at every `step`-th instant (bounds inside pushed batches); reader 1
            # only when a whole batch is in (its bounds fall at batch ends)
            bound = int(p.ts[-1]) if k == 1 else min(taken[k] + step, int(p.ts[-1]))
            while taken[k] < bound:
                b = min(taken[k] + step, bound) if k == 0 else bound
                got[k].append(r.take(b).cols[0].tolist())
                taken[k] = b
    for k, r in enumerate(readers):
        got[k].append(r.take(last + 5).cols[0].tolist())
        flat = [x for part in got[k] for x in part]
        assert flat == data.cols[0].tolist()
        assert r.take(last + 10).cols[0].tolist() == []
    assert q.batches == []  # every reader passed every batch: nothing held


def test_take_splits_at_the_bound() -> None:
    data = _rows(60, seed=5)
    q = Queue([INT])
    r = q.reader()
    q.push(data, watermark=int(data.ts[-1]))
    prev = 0
    for bound in range(1, int(data.ts[-1]) + 1):
        got = r.take(bound)
        want = (data.ts > prev) & (data.ts <= bound)
        assert got.cols[0].tolist() == data.cols[0][want].tolist()
        assert got.ts.tolist() == data.ts[want].tolist()
        prev = bound


def test_empty_take_and_empty_batches_are_fresh_objects() -> None:
    q = Queue([INT, DataType("varchar", 8)])
    r = q.reader()
    a, b = r.take(5), r.take(6)
    assert len(a) == 0 and len(b) == 0
    assert a is not b and a.cols is not b.cols
    a.cols.append(np.zeros(0, np.int64))  # an operator changing its empty batch changes only it
    assert len(b.cols) == 2 and b.cols[1].dtype == object
    assert concat([a, b]) is a  # no rows: the first batch


def test_small_recent_tail_is_never_a_view_of_a_larger_batch() -> None:
    big = _rows(10 * RECENT)
    q = Queue([INT])
    q.push(big.slice(0, 5), watermark=int(big.ts[4]))  # a view into `big`: must be copied
    tail = q.recent[-1]
    assert not np.shares_memory(tail.cols[0], big.cols[0])
    assert not np.shares_memory(tail.ts, big.ts)
    own = big.copy_range(5, 8)  # owns its arrays: kept as it is
    q.push(own, watermark=int(own.ts[-1]))
    assert q.recent_rows(RECENT).cols[0].tolist() == list(range(8))
    own.id = np.zeros(3, np.uint64)  # the pusher's Batch object is not the one kept
    assert q.recent[-1].id.tolist() == [5, 6, 7]


@pytest.mark.parametrize("size", [1, 7, 10_000])
def test_readers_of_one_span_share_its_concatenation(size: int) -> None:
    """Three readers take the same spans (the rows of several pushes at once); a fourth starts
    where they start every other time but stops an instant earlier: each gets exactly its rows,
    and the readers of one span get one shared batch."""
    data = _rows(400, seed=11)
    q = Queue([INT])
    same = [q.reader() for _ in range(3)]
    other = q.reader()
    got: list[list[int]] = [[] for _ in range(4)]
    pushes = _pushes(data, size)
    turn = 0
    for k, p in enumerate(pushes):
        q.push(p, watermark=int(p.ts[-1]))
        if k % 3 == 2 or k == len(pushes) - 1:  # three pushes at a time: several parts
            bound = int(p.ts[-1])
            outs = [r.take(bound) for r in same]
            assert all(o is outs[0] for o in outs[1:])
            for i, o in enumerate(outs):
                got[i].extend(o.cols[0].tolist())
            # the fourth: from the same start to the instant before (every other time), else
            # catching up to the same bound from its own start
            turn += 1
            got[3].extend(other.take(bound - 1 if turn % 2 else bound).cols[0].tolist())
    got[3].extend(other.take(int(data.ts[-1])).cols[0].tolist())
    for g in got:
        assert g == data.cols[0].tolist()
    assert q.joined is None or q.joined[0][0] >= q.base  # nothing held from dropped batches
