"""Prefetch: a worker thread runs `early` items ahead until the first take, `depth` after it."""

from __future__ import annotations

import threading
import time

from cqlstream.io.prefetch import Prefetch


class Counted:
    """A source that records how many items the worker has pulled from it."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.pulled = 0
        self.changed = threading.Condition()

    def __iter__(self):
        for i in range(self.n):
            with self.changed:
                self.pulled += 1
                self.changed.notify_all()
            yield i

    def settles_at(self, want: int) -> bool:
        """The worker reaches `want` pulls within 5 s and pulls nothing more for 0.3 s."""
        with self.changed:
            self.changed.wait_for(lambda: self.pulled >= want, timeout=5)
        time.sleep(0.3)
        return self.pulled == want


def test_early_items_before_the_first_take_then_depth():
    src = Counted(40)
    p = Prefetch(src, depth=2, name="t-prefetch", early=5)
    try:
        assert src.settles_at(6)  # 5 queued, the 6th in the worker's hand
        assert next(p) == 0  # 4 queued: at or above depth, so the worker keeps waiting
        assert src.settles_at(6)
        assert [next(p) for _ in range(3)] == [1, 2, 3]  # 1 queued: room for the held 5th, then one more pull
        assert src.settles_at(7)
        assert list(p) == list(range(4, 40))
    finally:
        p.close()


def test_without_early_the_depth_holds_from_the_start():
    src = Counted(10)
    p = Prefetch(src, depth=2, name="t-prefetch")
    try:
        assert src.settles_at(3)
        assert list(p) == list(range(10))
    finally:
        p.close()


def test_close_stops_a_worker_that_read_ahead():
    src = Counted(1000)
    p = Prefetch(src, depth=2, name="t-prefetch", early=8)
    assert src.settles_at(9)
    p.close()
    assert not any(t.name == "t-prefetch" and t.is_alive() for t in threading.enumerate())
