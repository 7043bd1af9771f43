"""An iterator run ahead in a worker thread, a bounded number of items ahead of its consumer.

The consumer sees the same items in the same order, and an exception raised by the source at the
point it was raised (after the items before it); `close()` stops the worker early and waits for
it, so no thread outlives the run that started it.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterable, Iterator
from typing import Generic, TypeVar

T = TypeVar("T")

_POLL = 0.05  # seconds a blocked worker waits before looking at the stop flag again


class _End:
    """The source is exhausted."""


class _Failed:
    """The source raised `error`."""

    def __init__(self, error: BaseException) -> None:
        self.error = error


class Prefetch(Generic[T]):
    """Iterate `source` in a daemon thread named `name`, at most `depth` items ahead."""

    def __init__(self, source: Iterable[T], depth: int = 2, name: str = "cqlstream-prefetch") -> None:
        if depth < 1:
            raise ValueError("depth must be at least 1")
        self._source = source
        self._q: queue.Queue[T | _End | _Failed] = queue.Queue(maxsize=depth)
        self._stop = threading.Event()
        self._done = False
        self._thread = threading.Thread(target=self._work, name=name, daemon=True)
        self._thread.start()

    def _put(self, item: T | _End | _Failed) -> bool:
        """Hand `item` over; False when the consumer closed (the item is dropped)."""
        while not self._stop.is_set():
            try:
                self._q.put(item, timeout=_POLL)
                return True
            except queue.Full:
                continue
        return False

    def _work(self) -> None:
        it = iter(self._source)
        try:
            for item in it:
                if not self._put(item):
                    return
            self._put(_End())
        except BaseException as e:  # handed to the consumer, raised there
            self._put(_Failed(e))
        finally:
            close = getattr(it, "close", None)  # a generator's open files close here, on its thread
            if close is not None:
                close()

    def __iter__(self) -> Iterator[T]:
        return self

    def __next__(self) -> T:
        if self._done:
            raise StopIteration
        item = self._q.get()
        if isinstance(item, _End):
            self._done = True
            self._thread.join()
            raise StopIteration
        if isinstance(item, _Failed):
            self._done = True
            self._thread.join()
            raise item.error
        return item

    def close(self) -> None:
        """Stop the worker (it drops what it read ahead) and wait for it to end."""
        self._done = True
        self._stop.set()
        while self._thread.is_alive():
            try:  # unblock a worker waiting for room
                self._q.get_nowait()
            except queue.Empty:
                pass
            self._thread.join(_POLL)


__all__ = ["Prefetch"]
