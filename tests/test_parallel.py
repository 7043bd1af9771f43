"""The engine's worker threads (engine/parallel.py): order of results, exceptions, nesting."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from cqlstream.engine import parallel


@pytest.fixture
def two_threads():
    parallel.set_threads(2)
    yield
    parallel.set_threads(1)


def test_one_thread_runs_inline() -> None:
    names: list[str] = []
    out = parallel.run_all([lambda: names.append(threading.current_thread().name) or 1, lambda: 2])
    assert out == [1, 2]
    assert names == [threading.current_thread().name]


def test_results_in_task_order_and_a_worker_is_used(two_threads) -> None:
    seen: set[str] = set()
    started = threading.Event()

    def slow() -> int:
        started.wait(5)  # holds the caller until the worker has started the second task
        seen.add(threading.current_thread().name)
        return int(np.sort(np.arange(200_000)[::-1])[0])

    def fast() -> int:
        seen.add(threading.current_thread().name)
        started.set()
        return 7

    assert parallel.run_all([slow, fast]) == [0, 7]
    assert any(n.startswith("cqlstream-engine") for n in seen)


def test_nested_calls_never_deadlock(two_threads) -> None:
    def inner(k: int) -> int:
        return sum(parallel.run_all([lambda: k, lambda: k * 10, lambda: k * 100]))

    assert parallel.run_all([lambda: inner(1), lambda: inner(2), lambda: inner(3)]) == [111, 222, 333]


def test_first_exception_by_task_order_after_all_ended(two_threads) -> None:
    done: list[int] = []

    def boom(msg: str):
        def f() -> int:
            raise ValueError(msg)

        return f

    def ok() -> int:
        done.append(1)
        return 1

    with pytest.raises(ValueError, match="second"):
        parallel.run_all([ok, boom("second"), ok, boom("fourth")])
    assert done == [1, 1]


def test_threads_must_be_positive() -> None:
    with pytest.raises(ValueError):
        parallel.set_threads(0)
