"""The engine lock: a re-entrant lock that also tells, without taking it, since when it is held and
how many threads wait for it, so liveness, readiness and backpressure never wait on the engine."""

from __future__ import annotations

import threading
import time
from types import TracebackType


class EngineLock:
    """A `threading.RLock` (same `with` use) whose `held_for()` and `waiting` are read lock-free."""

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._count = threading.Lock()  # guards `waiting` only (held for a few instructions)
        self._depth = 0  # re-entrant depth; written by the holder only
        self.held_since: float | None = None  # time.monotonic() when the current holder took it
        self.waiting = 0  # threads blocked in acquire

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        with self._count:
            self.waiting += 1
        try:
            ok = self._lock.acquire(blocking, timeout)
        finally:
            with self._count:
                self.waiting -= 1
        if ok:
            self._depth += 1
            if self._depth == 1:
                self.held_since = time.monotonic()
        return ok

    def release(self) -> None:
        self._depth -= 1
        if self._depth == 0:
            self.held_since = None
        self._lock.release()

    def __enter__(self) -> EngineLock:
        self.acquire()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.release()

    def held_for(self) -> float:
        """Seconds the current holder has held the lock (0.0: free)."""
        since = self.held_since
        return 0.0 if since is None else max(time.monotonic() - since, 0.0)
