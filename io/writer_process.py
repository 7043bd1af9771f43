"""Formatting and writing result batches in a separate process: the second stage of a pipeline of
processes beside the engine.

A writer thread shares the engine's GIL: numpy's many short calls in both, and the text
assembly's GIL-held steps, can make the engine wait (bench/README.md, "Threads in `cqlstream
run`": the engine's rounds took 0.83-0.93 s of wall for 0.55 s of CPU beside a writer thread). A
process has its own interpreter, so the engine and the formatting run side by side on two cores;
the costs are the child's start-up (~0.25 s of CPU, numpy's import, on the other core) and one
copy of the result columns through a pipe (~15 MB per round of Q2). Opt-in (`cqlstream run
--writer process`): measured only on a saturated machine so far, where it cost CPU and gained
nothing (bench/README.md, "Writer processes and lazy imports").

Protocol, parent → child on the child's stdin: one message per round — a header (`<QI`: pickle
length, buffer count), the round's columns pickled with protocol 5 (arrays travel out of band),
then each buffer (`<Q` length, bytes). The first message is the list of dest paths (files the
parent has already created), which the child opens for writing. End of input ends the child.
Child → parent on its stdout: nothing while all goes well; when a write fails, at once, one
pickled `(errno, strerror)` (`<Q` length first), after which the child discards the rest of its
input (the parent is never blocked by a dead writer) and raises it at its next hand-over. Everything handed over is written in order; memory is bounded by
the pipe and a queue of one received round in the child.

The child starts with `spawn()` (a fresh `python -m cqlstream.io.writer_process`, ~0.25 s of
imports, meant to overlap the parent's script parsing and registration); `finish()` waits for it;
`abort()` kills it. No child outlives its run: one that loses its parent sees its stdin end.
"""

from __future__ import annotations

import os
import pickle
import queue
import select
import signal
import struct
import subprocess
import sys
import threading
from typing import IO, Any

import numpy as np

from cqlstream.engine.batch import Batch

_HEAD = struct.Struct("<QI")
_LEN = struct.Struct("<Q")
Round = list[tuple[int, Batch]]


def _send(pipe: IO[bytes], payload: Any) -> None:
    bufs: list[pickle.PickleBuffer] = []
    meta = pickle.dumps(payload, protocol=5, buffer_callback=bufs.append)
    pipe.write(_HEAD.pack(len(meta), len(bufs)))
    pipe.write(meta)
    for b in bufs:
        raw = b.raw()
        pipe.write(_LEN.pack(raw.nbytes))
        pipe.write(raw)  # a buffered pipe writes large buffers straight through (GIL released)
    pipe.flush()


def _read_exact(pipe: IO[bytes], n: int) -> bytearray | None:
    """n bytes from the pipe, or None at end of input (also mid-message: the parent is gone)."""
    buf = bytearray(n)
    view = memoryview(buf)
    got = 0
    while got < n:
        k = pipe.readinto(view[got:])  # type: ignore[attr-defined]
        if not k:
            return None
        got += k
    return buf


def _receive(pipe: IO[bytes]) -> Any | None:
    """The next message, or None at end of input."""
    head = _read_exact(pipe, _HEAD.size)
    if head is None:
        return None
    meta_len, nbuf = _HEAD.unpack(head)
    meta = _read_exact(pipe, meta_len)
    if meta is None:
        return None
    bufs = []
    for _ in range(nbuf):
        size = _read_exact(pipe, _LEN.size)
        data = None if size is None else _read_exact(pipe, _LEN.unpack(size)[0])
        if data is None:
            return None
        bufs.append(data)
    return pickle.loads(meta, buffers=bufs)


def _pack(rnd: Round) -> list[tuple[int, np.ndarray, np.ndarray, list[np.ndarray], list[np.ndarray | None]]]:
    """What formatting needs of each batch (not the tuple ids)."""
    return [(k, b.ts, b.sign, b.cols, b.nulls) for k, b in rnd]


class WriterProcess:
    """The parent's handle on one writer process."""

    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        self.proc = proc
        self.error: BaseException | None = None

    @classmethod
    def spawn(cls) -> WriterProcess:
        proc = subprocess.Popen(
            [sys.executable, "-m", "cqlstream.io.writer_process"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            bufsize=1 << 16,
        )
        return cls(proc)

    def _failed(self) -> BaseException:
        """The child's reported write error (it reports one as soon as a write fails); else, at the
        end of its output, it died: an OSError saying so."""
        out = self.proc.stdout
        report = _read_exact(out, _LEN.size) if out is not None else None
        data = _read_exact(out, _LEN.unpack(report)[0]) if out is not None and report is not None else None
        if data is not None:
            code, text = pickle.loads(data)
            return OSError(code, text)
        rc = self.proc.wait()
        return OSError(f"the result writer process ended unexpectedly (exit code {rc})")

    def _check(self) -> None:
        """Raise the error the child reported (without waiting when it reported none)."""
        if self.error is None and self.proc.stdout is not None:
            ready, _, _ = select.select([self.proc.stdout], [], [], 0)
            if ready:
                self.error = self._failed()
        if self.error is not None:
            raise self.error

    def _put(self, payload: Any) -> None:
        self._check()
        assert self.proc.stdin is not None
        try:
            _send(self.proc.stdin, payload)
        except (BrokenPipeError, ValueError):  # ValueError: the pipe was closed after an earlier failure
            self.error = self._failed()
            raise self.error from None

    def open(self, paths: list[str]) -> None:
        """Hand the child the dest paths (index = dest number); the parent created the files."""
        self._put(paths)

    def write(self, rnd: Round) -> None:
        self._put(_pack(rnd))

    def finish(self) -> None:
        """End of input; wait until everything is written; raise the child's error."""
        if self.proc.stdin is not None and not self.proc.stdin.closed:
            try:
                self.proc.stdin.close()
            except BrokenPipeError:
                pass
        if self.error is None:
            out = self.proc.stdout
            report = _read_exact(out, _LEN.size) if out is not None else None  # None: ended, no error
            rc = self.proc.wait()
            if report is not None and out is not None:
                data = _read_exact(out, _LEN.unpack(report)[0])
                code, text = pickle.loads(data) if data is not None else (None, "a cut-off error report")
                self.error = OSError(code, text)
            elif rc != 0:
                self.error = OSError(f"the result writer process ended unexpectedly (exit code {rc})")
        self.proc.wait()
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        if self.error is not None:
            raise self.error

    def abort(self) -> None:
        """Stop the child now (the run failed) and reap it."""
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        for pipe in (self.proc.stdin, self.proc.stdout):
            if pipe is not None:
                try:
                    pipe.close()
                except OSError:
                    pass


# ------------------------------------------------------------------------------------------ the child


def _child_main() -> int:
    from cqlstream.io.result_writer import write_text

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's; it ends this process
    inp = sys.stdin.buffer
    report = sys.stdout.buffer
    paths = _receive(inp)
    if paths is None:
        return 0
    files: list[IO[bytes]] = []
    rounds: queue.Queue[Any] = queue.Queue(maxsize=1)

    def receive() -> None:  # the next round is read from the pipe while this one is formatted
        while True:
            msg = _receive(inp)
            rounds.put(msg)
            if msg is None:
                return

    error: OSError | None = None

    def tell(e: OSError) -> None:  # reported at once: the parent raises it at its next hand-over
        data = pickle.dumps((e.errno, e.strerror or str(e)))
        report.write(_LEN.pack(len(data)) + data)
        report.flush()

    try:
        files = [os.fdopen(os.open(p, os.O_WRONLY), "wb") for p in paths]
    except OSError as e:
        error = e
        tell(e)
    receiver = threading.Thread(target=receive, name="cqlstream-writer-receive", daemon=True)
    receiver.start()
    while True:
        msg = rounds.get()
        if msg is None:
            break
        if error is not None:
            continue  # keep reading so the parent never blocks on this process
        try:
            for k, ts, sign, cols, nulls in msg:
                write_text(files[k], Batch(cols, nulls, ts, sign, np.zeros(len(ts), np.uint64)))
        except OSError as e:
            error = e
            tell(e)
    for f in files:
        try:
            f.close()
        except OSError as e:  # buffered bytes that could not be written
            if error is None:
                error = e
                tell(e)
    return 0


if __name__ == "__main__":
    sys.exit(_child_main())
