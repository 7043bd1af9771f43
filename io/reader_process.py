"""Reading a run's sources in a child process: the input stage of a pipeline of processes.

A reader thread shares the engine's GIL, and its parsing starts only once numpy and pyarrow are
imported on the main thread; half of it then runs beside the engine's first steps and the writer
(bench/README.md, session 20). `cqlstream run --reader process` starts one child first (forked
while the process has no other thread, else a fresh interpreter), before the parent imports
numpy: the child imports its parser (numpy, pyarrow) while the parent makes the first pass over
the script (io/early_readers.py `first_pass`) and hands it each source found there; a thread per
source in the child parses it with the same SourceReader code (`instants()`) and streams the
blocks to the parent.

Protocol. Parent → child on the child's stdin: `<BI` records, `(_SOURCE, n)` followed by n bytes
pickling `(file, SourceDef, block_size)` (source k is the k-th), `(_CREDIT, k)` (room for one more
block of source k), `(_DROP, k)` (stop reading k). The end of that pipe (the parent closed it, or
died) ends the child at once: no child outlives its run. Child → parent on a widened pipe, in
io/pipe_messages.py's messages (the blocks' columns travel as raw bytes):
`("block", k, ts, sign, cols, nulls, next_ts)` in order, ending with `("end", k)`,
`("error", k, path, line, reason, column)` (a ScriptError) or `("fail", k, exception)`. A source
sends `READ_AHEAD_EARLY` blocks before its first is taken, and the parent grants credits so that
`READ_AHEAD` are under way after that, as the thread readers' Prefetch bounds them.

The parent's `ProcessReaders` offers what `EarlyReaders` does (`add` from the first pass, `take`
a source's reader and block iterator, `close`); a receiver thread demultiplexes the blocks into a
queue per source. A block's error is raised where the thread reader raises it (after the blocks
before it); a child that dies is a ScriptError naming it and its exit code at the next block
wanted, never a hang. Opt-in: the child's own imports cost ~0.25 s of CPU, which paid on a
loaded machine more than the lighter engine thread gained (bench/README.md, session 20).
"""

from __future__ import annotations

import os
import pickle
import queue
import signal
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from cqlstream.io import pipe_messages as msgs
from cqlstream.io.early_readers import Block, BlockStream, EarlyReaders, SourceFile
from cqlstream.io.errors import ScriptError
from cqlstream.io.line_blocks import line_of_row
from cqlstream.io.run_settings import READ_AHEAD, READ_AHEAD_EARLY
from cqlstream.io.type_line import check_type_line

if TYPE_CHECKING:
    from cqlstream.cql.catalog import SourceDef

_CTL = struct.Struct("<BI")
_CREDIT, _DROP, _SOURCE = 1, 2, 3


class _Forked:
    """A forked child reading the sources, with what the parent uses of a Popen: pid, stdin
    (its control pipe), stdout (its data pipe), wait, poll, kill."""

    def __init__(self, pid: int, stdin: IO[bytes], stdout: IO[bytes]) -> None:
        self.pid = pid
        self.stdin: IO[bytes] | None = stdin
        self.stdout: IO[bytes] | None = stdout
        self.returncode: int | None = None
        self._reap = threading.Lock()  # the receiver thread and the run's both wait for it

    @classmethod
    def start(cls) -> _Forked:
        ctl_r, ctl_w = os.pipe()
        data_r, data_w = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: never returns into the parent's code
            code = 1
            try:
                # keep only its own pipes (and 0-2): an inherited write end of another child's pipe
                # (a writer process's input) would keep that child from seeing its end of input
                lo, hi = sorted((ctl_r, data_w))
                os.closerange(3, lo)
                os.closerange(lo + 1, hi)
                os.closerange(hi + 1, _max_fd())
                with open(ctl_r, "rb") as inp, open(data_w, "wb") as out:
                    code = _child_main(inp, out)
            finally:
                os._exit(code)
        os.close(ctl_r)
        os.close(data_w)
        return cls(pid, open(ctl_w, "wb"), open(data_r, "rb"))

    def poll(self) -> int | None:
        with self._reap:
            if self.returncode is None:
                pid, status = os.waitpid(self.pid, os.WNOHANG)
                if pid:
                    self.returncode = os.waitstatus_to_exitcode(status)
            return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while (rc := self.poll()) is None:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(["cqlstream-reader"], timeout or 0.0)
            time.sleep(0.005)
        return rc

    def kill(self) -> None:
        if self.returncode is None:
            try:
                os.kill(self.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def _max_fd() -> int:
    try:
        return max(256, os.sysconf("SC_OPEN_MAX"))
    except (AttributeError, ValueError, OSError):
        return 1 << 16


def _can_fork() -> bool:
    """Fork only a process with no other thread (a thread holding a lock at the fork would hold
    it forever in the child)."""
    return hasattr(os, "fork") and threading.active_count() == 1


def _spawned() -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "cqlstream.io.reader_process"], stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )


_Child = _Forked | subprocess.Popen[bytes]


class _Done:
    """A source's end in its queue."""


class RemoteSource:
    """The parent's view of a source read by the child: its file, to name a rejected row's line."""

    def __init__(self, path: Path, source: SourceDef, block_size: int) -> None:
        self.path = path
        self.source = source
        self.block_size = block_size

    def line_of_row(self, row: int) -> int:
        return line_of_row(self.path, row)


class RemoteBlocks:
    """Source k's blocks as the child sends them (what Prefetch over `SourceReader.instants()`
    yields in a thread reader), granting the child a credit for each block taken."""

    def __init__(self, owner: ProcessReaders, k: int, path: Path) -> None:
        self._owner = owner
        self._k = k
        self.path = path
        self.q: queue.Queue[Block | _Done | BaseException] = queue.Queue()
        self._under_way = READ_AHEAD_EARLY  # blocks the child may send before its next credit
        self.done = False

    def __iter__(self) -> RemoteBlocks:
        return self

    def __next__(self) -> Block:
        if self.done:
            raise StopIteration
        item = self.q.get()
        if isinstance(item, _Done):
            self._finish(drop=False)
            raise StopIteration
        if isinstance(item, BaseException):
            self._finish(drop=False)
            raise item
        self._under_way -= 1
        if self._under_way < READ_AHEAD:
            self._under_way += 1
            self._owner.tell(_CREDIT, self._k)
        return item

    def _finish(self, drop: bool) -> None:
        if not self.done:
            self.done = True
            if drop:
                self._owner.tell(_DROP, self._k)
            self._owner.closed_one()

    def close(self) -> None:
        """Stop reading this source (the child drops what it read ahead)."""
        self._finish(drop=True)


class ProcessReaders(EarlyReaders):
    """The parent's handle on a reader process: the sources handed to it (`add`, made by the first
    pass), each taken by the run's check of its table (`take`, as `EarlyReaders.take`) or stopped
    by `close`."""

    def __init__(self, proc: _Child) -> None:
        super().__init__()
        self.proc = proc
        self._sources: list[tuple[Path, SourceDef, int]] = []
        self._streams: list[RemoteBlocks] = []
        self._taken: set[int] = set()
        self._closed = False
        self._open = 0  # streams neither finished nor closed
        self._lock = threading.Lock()
        self._receiver = threading.Thread(target=self._receive_all, name="cqlstream-read-receive", daemon=True)

    def start_receiving(self) -> None:
        """Start taking the child's blocks, once the first pass handed it the sources. numpy (and
        Batch) are imported first, here on the calling thread: the engine's start-up imports them
        next anyway, and numpy imported by two threads at once fails (a partially initialized
        numpy._core seen by the second: measured, the receiver unpickling a block meanwhile)."""
        if self._receiver.ident is None:
            import numpy  # noqa: F401

            import cqlstream.engine.batch  # noqa: F401

            self._receiver.start()

    @classmethod
    def spawn(cls) -> ProcessReaders:
        """Start the child: it imports its parser (numpy, pyarrow) while this process makes the
        first pass over the script and hands it the sources (`add`). Forked where this process
        has no other thread yet (`cqlstream run`: the child skips the interpreter's start and the
        imports made so far, ~0.1 s before its first block), else a fresh interpreter."""
        proc: _Child = _Forked.start() if _can_fork() else _spawned()
        assert proc.stdout is not None
        msgs.widen(proc.stdout.fileno())
        return cls(proc)

    def add(self, file: Path, source: SourceDef, block_size: int) -> None:
        """Have the child read `file` for `source` (raises what SourceReader raises on a bad type
        line, checked here: the first pass stops there, as with reader threads)."""
        check_type_line(file, source)
        k = len(self._sources)
        self._sources.append((file, source, block_size))
        self._streams.append(RemoteBlocks(self, k, file))
        with self._lock:
            self._open += 1
        data = pickle.dumps((str(file), source, block_size))
        self._tell(_CTL.pack(_SOURCE, len(data)) + data)

    # ------------------------------------------------------------------ receiving (its own thread)
    def _receive_all(self) -> None:
        out = self.proc.stdout
        assert out is not None
        ended: set[int] = set()
        while True:
            msg = msgs.receive(out)
            if msg is None:
                break
            kind, k = msg[0], msg[1]
            q = self._streams[k].q
            if kind == "block":
                import numpy as np  # (imported by start_receiving)

                from cqlstream.engine.batch import Batch

                _, _, ts, sign, cols, nulls, nxt = msg
                q.put((Batch(cols, nulls, ts, sign, np.zeros(len(ts), np.uint64)), nxt))
                continue
            ended.add(k)
            if kind == "end":
                q.put(_Done())
            elif kind == "error":
                q.put(ScriptError(*msg[2:]))
            else:
                q.put(msg[2])
        rc = self.proc.wait()
        for k, s in enumerate(self._streams):
            if k not in ended and not s.done:  # the child ended before this source did
                s.q.put(
                    ScriptError(
                        s.path,
                        None,
                        f"the source reader process (pid {self.proc.pid}) ended unexpectedly "
                        f"(exit code {rc}) while reading this file",
                    )
                )

    # ------------------------------------------------------------------ the run's side
    def __len__(self) -> int:
        return len(self._sources) - len(self._taken) + super().__len__()

    def names(self) -> list[str]:
        """The sources being read and not taken, in the order they were started."""
        return [d.name for k, (_, d, _) in enumerate(self._sources) if k not in self._taken] + super().names()

    def take(self, file: Path, source: SourceDef, block_size: int) -> tuple[SourceFile, BlockStream] | None:
        """The reader of this file, definition and block size (the caller owns it from now on:
        it iterates and closes the blocks), or None (then the caller reads it itself)."""
        self.start_receiving()
        for k, (f, d, size) in enumerate(self._sources):
            if k not in self._taken and f == file and d == source and size == block_size:
                self._taken.add(k)
                return RemoteSource(f, d, block_size), self._streams[k]
        return super().take(file, source, block_size)

    def tell(self, op: int, k: int) -> None:
        """A credit or drop for source k."""
        self._tell(_CTL.pack(op, k))

    def _tell(self, data: bytes) -> None:
        """Send to the child; a child already gone is noticed by the receiver, not here."""
        stdin = self.proc.stdin
        if stdin is None or stdin.closed:
            return
        try:
            stdin.write(data)
            stdin.flush()
        except (BrokenPipeError, ValueError, OSError):
            pass

    def closed_one(self) -> None:
        with self._lock:
            self._open -= 1
            last = self._closed and self._open <= 0
        if last:
            self._stop()

    def close(self) -> None:
        """Stop every source not taken; the process ends now, or when the taken ones are closed."""
        super().close()
        if self._closed:
            return
        for k, s in enumerate(self._streams):
            if k not in self._taken:
                s.close()
        with self._lock:
            self._closed = True
            last = self._open <= 0
        if last:
            self._stop()

    def _stop(self) -> None:
        """End the child (its stdin closes) and reap it; kill it if it does not end."""
        stdin = self.proc.stdin
        if stdin is not None:
            try:
                stdin.close()
            except OSError:
                pass
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        if self._receiver.ident is not None:
            self._receiver.join()
        if self.proc.stdout is not None:
            self.proc.stdout.close()

    def kill(self) -> None:
        """Stop the child now (tests: a child that dies mid-run)."""
        self.proc.kill()


# ------------------------------------------------------------------------------------------ the child


def _child_main(inp: IO[bytes], out: IO[bytes]) -> int:
    """Read the sources the parent hands over on `inp`, sending their blocks on `out`."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's; it ends this process
    from cqlstream.io.dat_source import SourceReader  # numpy, pyarrow: while the parent reads the script

    lock = threading.Lock()  # one message at a time on the pipe
    credits: list[threading.Semaphore] = []
    dropped: list[bool] = []

    def send(payload: Any) -> None:
        try:
            with lock:
                msgs.send(out, payload)
        except OSError:  # the parent is gone (or closed its end): nothing left to do
            os._exit(0)

    def pump(k: int, file: str, source: SourceDef, block_size: int) -> None:
        try:
            r = SourceReader(file, source, block_size=block_size)  # (type line: checked by the parent)
            for b, nxt in r.instants():
                credits[k].acquire()
                if dropped[k]:
                    return
                send(("block", k, b.ts, b.sign, b.cols, b.nulls, nxt))
            send(("end", k))
        except ScriptError as e:
            send(("error", k, e.path, e.line, e.reason, e.column))
        except Exception as e:
            try:
                pickle.loads(pickle.dumps(e))
                send(("fail", k, e))
            except Exception:
                send(("fail", k, RuntimeError(f"reading {file}: {type(e).__name__}: {e}")))

    while True:  # the parent's sources, credits and drops; the end of its stdin ends this process
        rec = msgs.read_exact(inp, _CTL.size)
        if rec is None:
            out.flush()
            os._exit(0)
        op, k = _CTL.unpack(rec)
        if op == _SOURCE:
            data = msgs.read_exact(inp, k)
            if data is None:
                os._exit(0)
            credits.append(threading.Semaphore(READ_AHEAD_EARLY))
            dropped.append(False)
            args = (len(credits) - 1, *pickle.loads(data))
            threading.Thread(target=pump, args=args, name=f"cqlstream-read-{args[0]}", daemon=True).start()
            continue
        if op == _DROP:
            dropped[k] = True
        credits[k].release()


if __name__ == "__main__":
    sys.exit(_child_main(sys.stdin.buffer, sys.stdout.buffer))
