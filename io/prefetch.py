"""An iterator run ahead in a worker thread, a bounded number of items ahead of its consumer.

The consumer sees the same items in the same order, and an exception raised by the source at the
point it was raised (after the items before it); `close()` stops the worker early and waits for
it, so no thread outlives the run that started it.

Before the consumer takes its first item the worker may run further ahead (`early` items): a
reader started while the rest of the program is still getting ready (`cqlstream run` checking and
planning its script) uses the idle core then, and holds only `depth` items once consumption starts.
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
    """Iterate `source` in a daemon thread named `name`, at most `depth` items ahead (`early`
    items until the consumer takes the first one)."""

    def __init__(
        self, source: Iterable[T], depth: int = 2, name: str = "cqlstream-prefetch", early: int | None = None
    ) -> None:
        if depth < 1:
            raise ValueError("depth must be at least 1")
        self._source = source
        self._depth = depth
        self._q: queue.Queue[T | _End | _Failed] = queue.Queue(maxsize=max(depth, early or depth))
        self._room = threading.Condition()  # notified when the consumer takes an item
        self._taken = False  # the consumer has taken an item: `depth` bounds the worker from now on
        self._stop = threading.Event()
        self._done = False
        self._thread = threading.Thread(target=self._work, name=name, daemon=True)
        self._thread.start()

    def _put(self, item: T | _End | _Failed) -> bool:
        """Hand `item` over; False when the consumer closed (the item is dropped)."""
        while not self._stop.is_set():
            with self._room:  # `early` items until the first take, `depth` from then on
                if self._q.qsize() >= (self._depth if self._taken else self._q.maxsize):
                    self._room.wait(_POLL)
                    continue
            self._q.put_nowait(item)  # this thread alone puts: the room it saw is still there
            return True
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
        with self._room:
            self._taken = True
            self._room.notify()
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
