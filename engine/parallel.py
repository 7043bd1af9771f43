"""The engine's worker threads: one small pool per process that operators and the scheduler share.

numpy releases the GIL inside its kernels (sorts, ufuncs, fancy indexing on numeric arrays), so
two threads working on arrays of ~10^5 rows run side by side on two cores: measured 2.0× on a
loop of factorize / argsort / bincount / searchsorted over 100k-row int64 arrays. Small arrays
are not worth a hand-over (a few tens of µs); callers decide what is big enough.

`run_all` never deadlocks, even when called from a worker thread: the caller runs the first task
itself and then every task no worker has started yet (a queued future is cancelled and run
inline), so a nested call waits only for tasks that are really running. Which thread runs a task
never changes what it computes; results come back in task order. The CPU time a worker spends on
a caller's tasks is added to the caller's `helped()` (an operator's CPU seconds include the
parts it handed over, engine/operators/base.py).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:  # concurrent.futures (with logging, ~10 ms) is imported when a pool is made
    from concurrent.futures import Future, ThreadPoolExecutor

T = TypeVar("T")

_lock = threading.Lock()
_pool: ThreadPoolExecutor | None = None
_threads = 1
_help = threading.local()  # .box: [CPU seconds workers spent on this thread's tasks]
_help_lock = threading.Lock()


def _box() -> list[float]:
    box = getattr(_help, "box", None)
    if box is None:
        box = _help.box = [0.0]
    return box


def helped() -> float:
    """CPU seconds the workers have spent so far on tasks this thread handed to `run_all`."""
    return _box()[0]


def _timed(task: Callable[[], T], box: list[float], caller: int) -> Callable[[], T]:
    """`task`, adding the CPU time it takes on another thread to `box` (a task the caller runs
    itself is already in the caller's own thread time)."""

    def run() -> T:
        if threading.get_ident() == caller:
            return task()
        began = time.thread_time()
        try:
            return task()
        finally:
            spent = time.thread_time() - began
            with _help_lock:
                box[0] += spent

    return run


def threads() -> int:
    """Threads the engine may use for its own work (1: everything on the calling thread)."""
    return _threads


def set_threads(n: int) -> None:
    """Use `n` threads for the engine's work (the caller plus n − 1 workers). A pool of a
    different size is shut down after its running tasks finish."""
    global _pool, _threads
    if n < 1:
        raise ValueError("engine threads must be at least 1")
    with _lock:
        if n == _threads:
            return
        old, _pool, _threads = _pool, None, n
    if old is not None:
        old.shutdown(wait=True)


def _workers() -> ThreadPoolExecutor | None:
    global _pool
    if _threads <= 1:
        return None
    with _lock:
        if _pool is None:
            from concurrent.futures import ThreadPoolExecutor

            _pool = ThreadPoolExecutor(max_workers=_threads - 1, thread_name_prefix="cqlstream-engine")
        return _pool


def run_all(tasks: Sequence[Callable[[], T]], count_help: bool = True) -> list[T]:
    """Results of `tasks`, in order, computed on the engine's threads where one is free.
    An exception of a task is raised here (the first by task order) after all tasks ended.
    `count_help`: add the workers' CPU time on these tasks to the caller's `helped()` (off for
    the scheduler's pass, whose threads each count their operators' time themselves)."""
    pool = _workers() if len(tasks) > 1 else None
    if pool is None:
        return [t() for t in tasks]
    from concurrent.futures import Future

    if count_help:
        box, caller = _box(), threading.get_ident()
        tasks = [tasks[0], *(_timed(t, box, caller) for t in tasks[1:])]
    futures: list[Future[T]] = [pool.submit(t) for t in tasks[1:]]
    results: list[T] = []
    first: BaseException | None = None
    try:
        results.append(tasks[0]())
    except BaseException as e:  # re-raised below, after the other tasks ended
        first = e
    for t, f in zip(tasks[1:], futures):
        if f.cancel():  # no worker took it: run it here rather than wait for one
            f = Future()
            try:
                f.set_result(t())
            except BaseException as e:
                f.set_exception(e)
        try:
            results.append(f.result())
        except BaseException as e:
            if first is None:
                first = e
    if first is not None:
        raise first
    return results


__all__ = ["helped", "run_all", "set_threads", "threads"]
