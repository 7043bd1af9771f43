"""Formatting result batches as STREAM text and writing them to their dest files, on the calling
thread, on worker threads, or in writer processes (io/writer_process.py) beside the engine.

A round's batches are handed over together; a dest is always served by the same worker, so every
file receives its batches in the order they were produced and the bytes do not depend on the
number of workers. At most `depth` rounds wait per worker (memory: a few rounds of results). A
write error (disk full, dest removed) is raised to the producer at its next hand-over or at
`close()`, as the same OSError the inline path raises.

Deferred batches (engine/deferred_batch.py: a grouped aggregate's changed rows as a compact
record) are formatted by the worker from the record (io/change_text.py); when the worker is a
round behind, the producer lays out the rows of the round it hands over itself (and, at `close()`,
of the rounds still queued) rather than wait idle, and the worker formats those rows as they are:
the pair balances the work between its two threads.

Given `truncate`, the files were opened without truncating and each writer thread empties its own
(regular) files before anything else: emptying an old dest frees its blocks, 15-140 ms for an
80 MB file on ext4, which the producer's thread then does not wait for.
"""

from __future__ import annotations

import os
import queue
import stat
import threading
from typing import IO, TYPE_CHECKING

from cqlstream.engine.batch import Batch
from cqlstream.engine.deferred_batch import build_now
from cqlstream.io.stream_text import format_chunks

if TYPE_CHECKING:
    from cqlstream.io.writer_process import WriterProcess

Round = list[tuple[int, Batch]]  # (dest index, results) in production order

# How writer threads remove the line padding: True, a boolean-mask selection that releases the GIL
# (~20% more CPU than `bytes.translate`, which with its `tobytes` copy holds the GIL ~1.3 ms per
# 64k-line chunk, ~0.085 s over Q4's 3.6M lines, while the engine's thread waits for it).
# Measured on Q2/Q4 at 1M rows, 2 threads (bench/README.md, session 18): the main thread's time
# blocked 0.07-0.12 -> 0.01-0.04 s (medians), its own CPU +0.02-0.03 s, wall - run-queue 0.015-0.09 s
# shorter in A/B runs (nothing measurable at load 4-7); the writer's CPU no higher. (Session 15
# kept `translate` against np.compress, which costs ~50% more CPU than it.)
WRITER_NOGIL = True


def write_text(f: IO[bytes], batch: Batch, nogil: bool = False) -> None:
    """Write a batch's text chunk by chunk (no joined copy of a large output). `nogil`: on a
    worker thread, format the way that holds the GIL least (the engine runs beside it)."""
    f.writelines(format_chunks(batch, nogil))


def empty_file(f: IO[bytes]) -> None:
    """Truncate `f` to nothing if it is a regular file (a device or pipe dest has nothing to
    empty, and ftruncate would fail on it), as opening it with "wb" would have."""
    fd = f.fileno()
    if stat.S_ISREG(os.fstat(fd).st_mode):
        os.ftruncate(fd, 0)


class _Worker:
    """One thread writing the rounds handed to it, in order; after an error it only drains.
    `empty`: the files it owns, to truncate first (see the module docstring)."""

    def __init__(self, files: list[IO[bytes]], depth: int, name: str, empty: list[IO[bytes]]) -> None:
        self.files = files
        self.empty = empty
        self.q: queue.Queue[Round | None] = queue.Queue(maxsize=depth)
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._work, name=name, daemon=True)
        self.thread.start()

    def _work(self) -> None:
        try:
            for f in self.empty:
                empty_file(f)
        except BaseException as e:  # raised to the producer, like a write error
            self.error = e
        while True:
            rnd = self.q.get()
            if rnd is None:
                return
            if self.error is not None:
                continue  # keep taking rounds so the producer never blocks on a dead writer
            try:
                for k, b in rnd:
                    write_text(self.files[k], b, nogil=WRITER_NOGIL)
            except BaseException as e:  # raised to the producer
                self.error = e


class ResultWriter:
    """Write rounds of result batches to `files`: inline when `workers` is 0, else on that many
    threads (dest k on worker k mod `workers`); or, given `processes` (already spawned), in those
    processes (dest k in process k mod their number; `files` must be named files, which the
    processes open again by name). `truncate`: the files were opened without truncating; they are
    emptied here (by the writer threads when there are some, else at once)."""

    def __init__(
        self,
        files: list[IO[bytes]],
        workers: int = 0,
        depth: int = 2,
        processes: list[WriterProcess] | None = None,
        truncate: bool = False,
    ) -> None:
        self.files = files
        self._procs = processes or []
        n = 0 if self._procs else workers
        if truncate and n == 0:
            for f in files:
                empty_file(f)
        self._workers = [
            _Worker(files, depth, f"cqlstream-writer-{i}", files[i::n] if truncate else []) for i in range(n)
        ]
        self._closed = False
        paths = [str(f.name) for f in files]
        for p in self._procs:
            p.open(paths)

    def _raise_failed(self) -> None:
        for w in self._workers:
            if w.error is not None:
                raise w.error

    def write(self, rnd: Round) -> None:
        """Format and write (or hand over) one round; raises a worker's earlier write error."""
        if not rnd:
            return
        if self._procs:
            m = len(self._procs)
            for i, p in enumerate(self._procs):
                part = [(k, b) for k, b in rnd if k % m == i]
                if part:
                    p.write(part)
            return
        if not self._workers:
            for k, b in rnd:
                write_text(self.files[k], b)
            return
        self._raise_failed()
        n = len(self._workers)
        parts: list[Round] = [[] for _ in range(n)]
        for k, b in rnd:
            parts[k % n].append((k, b))
        for w, part in zip(self._workers, parts):
            if part:
                if w.q.full():  # the worker is a round behind: lay out deferred rows here, not wait idle
                    build_now([b for _, b in part])
                w.q.put(part)

    def close(self) -> None:
        """Wait until everything handed over is written; raises a worker's write error."""
        if self._closed:
            return
        self._closed = True
        failed: BaseException | None = None
        for p in self._procs:
            try:
                p.finish()
            except BaseException as e:  # every process is waited for; the first error is raised
                failed = failed or e
        if failed is not None:
            raise failed
        for w in self._workers:
            with w.q.mutex:  # rounds the worker has not taken yet: their deferred rows are laid out here
                waiting = [b for rnd in w.q.queue if rnd is not None for _, b in rnd]
            try:
                build_now(waiting)
            except BaseException as e:  # the workers are stopped all the same; raised after them
                failed = failed or e
            w.q.put(None)
        for w in self._workers:
            w.thread.join()
        self._raise_failed()
        if failed is not None:
            raise failed


__all__ = ["ResultWriter", "Round", "empty_file", "write_text"]
