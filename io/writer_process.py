"""Formatting and writing result batches in a separate process: the second stage of a pipeline of
processes beside the engine.

A writer thread shares the engine's GIL: numpy's many short calls in both, and the text
assembly's GIL-held steps, can make the engine wait (bench/README.md, "Threads in `cqlstream
run`": the engine's rounds took 0.83-0.93 s of wall for 0.55 s of CPU beside a writer thread). A
process has its own interpreter, so the engine and the formatting run side by side on two cores;
the costs are the child's start-up (~0.2 s of CPU: the interpreter and numpy's import; the CLI
spawns it before it imports the engine, so it runs on the other core while the parent starts up)
and one copy of what is formatted through a pipe. Opt-in (`cqlstream run --writer process`): on a
busy 2-core machine it took the engine's thread's waits from 0.3-0.5 s to ~0.1 s, but was not
faster than a writer thread (bench/README.md, "Writer processes and lazy imports", and session 20).

Protocol, parent → child on the child's stdin: one message per round (io/pipe_messages.py: the
round's batches pickled, their arrays out of band). A batch goes as its rows laid out; a change record's rows
not laid out yet (engine/deferred_batch.py) as the record, gathered to the round's changed cells,
which the child formats from (io/change_text.py), so the parent never lays them out; and when the
child is two rounds behind, as the text the parent formatted itself (the two then share the
formatting rather than the parent waiting for room in the pipe). The first message is the list of
dest paths (files the parent has already created), which the child opens for writing. End of
input ends the child. Child → parent on its stdout: a zero length (`<Q`) per round written; when a
write fails, at once, one pickled `(errno, strerror)` (`<Q` length first), after which the child
discards the rest of its input (the parent is never blocked by a dead writer) and the parent
raises it at its next hand-over. Everything handed over is written in order; memory is bounded by
the pipe (1 MB where Linux allows) and a queue of one received round in the child.

The child starts with `spawn()` (a fresh `python -m cqlstream.io.writer_process`, ~0.25 s of
imports, meant to overlap the parent's script parsing and registration); `finish()` waits for it;
`abort()` kills it. No child outlives its run: one that loses its parent sees its stdin end.
"""

from __future__ import annotations

import dataclasses
import os
import pickle
import queue
import select
import signal
import subprocess
import sys
import threading
from typing import IO, TYPE_CHECKING, Any

from cqlstream.io import pipe_messages as msgs

if TYPE_CHECKING:  # (imported by the child and by `_pack`: spawning needs neither numpy nor the engine)
    import numpy as np

    from cqlstream.engine.batch import Batch
    from cqlstream.engine.deferred_batch import ChangeRows

Round = list[tuple[int, "Batch"]]

# Rounds handed over and not yet written from which the parent formats the next one itself: the
# child formats one and holds the next (its receiving thread); a third would wait in the pipe.
BEHIND = 2


# One batch of a round as shipped: (dest, ts, signs, columns, NULL masks) for rows laid out;
# (dest, the change record gathered to the columns it shows, its picks) for a change record's rows;
# (dest, its text's chunks) for a batch the parent formatted.
Packed = tuple[Any, ...]


def _pack(rnd: Round, text: bool = False) -> list[Packed]:
    """What formatting needs of each batch (not the tuple ids): a deferred batch whose rows are a
    change record's and not laid out yet goes as that record (`_gathered`), which the child lays
    out or formats itself (io/change_text.py): the parent never lays its rows out; other batches
    as their rows. `text`: every batch as its text, formatted here (the child is behind)."""
    from cqlstream.io.stream_text import _change_view, format_chunks

    out: list[Packed] = []
    for k, b in rnd:
        if text:  # (chunks go out of band, as the arrays do)
            out.append((k, [pickle.PickleBuffer(c) for c in format_chunks(b)]))
            continue
        view = _change_view(b)
        if view is None:
            out.append((k, b.ts, b.sign, b.cols, b.nulls))
        else:
            rec, picks = _gathered(view.rec, view.picks)
            out.append((k, rec, picks))
    return out


def _gathered(rec: ChangeRows, picks: tuple[int, ...]) -> tuple[ChangeRows, tuple[int, ...]]:
    """`rec` with only the columns `picks` shows and its values taken at its changed cells (the
    operator's value arrays span all of its cells: only arrays the size of the round are shipped),
    and the picks into that record. The ids are left out (a writer never reads them)."""
    import numpy as np

    from cqlstream.engine.deferred_batch import ChangeRows

    nk = len(rec.keys)
    used = sorted(set(picks))
    cell = rec.cell
    keys = [p for p in used if p < nk]
    vals = [p - nk for p in used if p >= nk]
    none = np.zeros(0, np.uint64)

    def at_cell(values: np.ndarray, flags: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
        return values.take(cell), flags.take(cell) if flags.any() else None  # None: no NULL (`_unpacked`)

    out = ChangeRows(
        ts=rec.ts,
        tmin=rec.tmin,
        tmax=rec.tmax,
        dels=rec.dels,
        ins=rec.ins,
        keys=[rec.keys[p] for p in keys],
        key_nulls=[rec.key_nulls[p] for p in keys],
        cell=none,  # the cells are 0..k-1 now: `_unpacked` makes them
        old=[at_cell(*rec.old[j]) for j in vals],  # type: ignore[misc]
        new=[at_cell(*rec.new[j]) for j in vals],  # type: ignore[misc]
        old_id=none,
        new_id=none,
    )
    return out, tuple(used.index(p) for p in picks)


def _unpacked(item: Packed) -> Batch:
    """The batch a packed rows or record item stands for (in the child)."""
    import numpy as np

    from cqlstream.engine.batch import Batch
    from cqlstream.engine.deferred_batch import change_batch

    if len(item) == 3:
        _, rec, picks = item
        k = len(rec.ts)
        no_null = np.zeros(k, bool)

        def whole(pairs: list[tuple[np.ndarray, np.ndarray | None]]) -> list[tuple[np.ndarray, np.ndarray]]:
            return [(v, no_null if m is None else m) for v, m in pairs]

        ids = np.zeros(k, np.uint64)  # (never read by a writer; there for a whole record)
        cell = np.arange(k, dtype=np.int64)
        rec = dataclasses.replace(rec, cell=cell, old=whole(rec.old), new=whole(rec.new), old_id=ids, new_id=ids)
        b = change_batch(rec)
        return b if picks == tuple(range(b.width)) else b.project(picks)
    _, ts, sign, cols, nulls = item
    return Batch(cols, nulls, ts, sign, np.zeros(len(ts), np.uint64))


class WriterProcess:
    """The parent's handle on one writer process."""

    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        self.proc = proc
        self.error: BaseException | None = None
        self.sent = 0  # rounds handed over
        self.done = 0  # rounds the child reported written
        self._inbox = bytearray()  # the child's reports not parsed yet
        self._ended = False  # the child's output ended

    @classmethod
    def spawn(cls) -> WriterProcess:
        proc = subprocess.Popen(
            [sys.executable, "-m", "cqlstream.io.writer_process"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            bufsize=1 << 16,
            # a process group of its own: a terminal's Ctrl-C goes to the parent's group only (the
            # parent then stops this process), never to a child still importing, which would die
            # printing a traceback of its own
            process_group=0,
        )
        msgs.widen(proc.stdin.fileno())  # type: ignore[union-attr]
        return cls(proc)

    def _reports(self, wait: bool) -> None:
        """Read what the child reported: a zero length per round written (`done`), or an error (its
        length, then it: kept in `error`). `wait`: until the child's output ends (it exited);
        else only what is there now."""
        out = self.proc.stdout
        if out is None or self._ended:
            return
        fd = out.fileno()
        while True:
            if not wait and not select.select([fd], [], [], 0)[0]:
                return
            data = os.read(fd, 1 << 16)
            if not data:
                self._ended = True
                return
            self._inbox += data
            while len(self._inbox) >= msgs.LEN.size:
                (n,) = msgs.LEN.unpack_from(self._inbox)
                if n == 0:
                    self.done += 1
                elif len(self._inbox) >= msgs.LEN.size + n:
                    if self.error is None:
                        code, text = pickle.loads(self._inbox[msgs.LEN.size : msgs.LEN.size + n])
                        self.error = OSError(code, text)
                else:
                    break  # the rest of the error report is on its way
                del self._inbox[: msgs.LEN.size + n]

    def _failed(self) -> BaseException:
        """The child's reported write error (it reports one as soon as a write fails); else, at the
        end of its output, it died: an OSError saying so."""
        self._reports(wait=True)
        if self.error is not None:
            return self.error
        rc = self.proc.wait()
        return OSError(f"the result writer process ended unexpectedly (exit code {rc})")

    def _check(self) -> None:
        """Raise the error the child reported (without waiting when it reported none)."""
        if self.error is None:
            self._reports(wait=False)
            if self.error is None and self._ended:
                self.error = self._failed()
        if self.error is not None:
            raise self.error

    def _put(self, payload: Any) -> None:
        self._check()
        assert self.proc.stdin is not None
        try:
            msgs.send(self.proc.stdin, payload)
        except (BrokenPipeError, ValueError):  # ValueError: the pipe was closed after an earlier failure
            self.error = self._failed()
            raise self.error from None

    def open(self, paths: list[str]) -> None:
        """Hand the child the dest paths (index = dest number); the parent created the files."""
        self._put(paths)

    def write(self, rnd: Round) -> None:
        """Hand a round over: as records or rows for the child to format; or, when the child has
        not written the round before the last yet (it formats one, the next one waits), formatted
        here, rather than wait for room in the pipe: the two then share the formatting."""
        self._check()
        text = self.sent - self.done >= BEHIND
        self._put(_pack(rnd, text=text))
        self.sent += 1

    def finish(self) -> None:
        """End of input; wait until everything is written; raise the child's error."""
        if self.proc.stdin is not None and not self.proc.stdin.closed:
            try:
                self.proc.stdin.close()
            except BrokenPipeError:
                pass
        self._reports(wait=True)  # until the child's output ends: it exits after its last write
        rc = self.proc.wait()
        if self.error is None and self._inbox:
            self.error = OSError(None, "a cut-off error report")
        if self.error is None and rc != 0:
            self.error = OSError(f"the result writer process ended unexpectedly (exit code {rc})")
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


class SpawnedWriters:
    """Writer processes spawned at the start of `cqlstream run`, before the engine is imported (the
    children's interpreter start and imports run on the other core meanwhile), each waiting to be
    taken by the run (`take`) or stopped by `close` (a run that fails before it takes them)."""

    def __init__(self, n: int) -> None:
        self._procs = [WriterProcess.spawn() for _ in range(n)]

    def __len__(self) -> int:
        return len(self._procs)

    def take(self, n: int) -> list[WriterProcess]:
        """Up to n of the processes (the caller owns them from now on; it spawns any more it needs)."""
        taken, self._procs = self._procs[:n], self._procs[n:]
        return taken

    def close(self) -> None:
        """Stop and reap every process not taken."""
        while self._procs:
            self._procs.pop().abort()


# ------------------------------------------------------------------------------------------ the child


def _child_main() -> int:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's; it ends this process
    # imported before the first round arrives (the parent is still starting up meanwhile)
    from cqlstream.io import change_text  # noqa: F401  (formats the change records)
    from cqlstream.io.result_writer import write_text
    from cqlstream.io.run_settings import tune_malloc

    tune_malloc()  # every round's arrays reused, not mapped afresh (Q4: 55k -> 17k page faults)
    inp = sys.stdin.buffer
    report = sys.stdout.buffer
    paths = msgs.receive(inp)
    if paths is None:
        return 0
    files: list[IO[bytes]] = []
    rounds: queue.Queue[Any] = queue.Queue(maxsize=1)

    def receive() -> None:  # the next round is read from the pipe while this one is formatted
        while True:
            msg = msgs.receive(inp)
            rounds.put(msg)
            if msg is None:
                return

    error: OSError | None = None

    def tell(e: OSError) -> None:  # reported at once: the parent raises it at its next hand-over
        data = pickle.dumps((e.errno, e.strerror or str(e)))
        report.write(msgs.LEN.pack(len(data)) + data)
        report.flush()

    def written() -> None:  # a round is written: a zero length (the parent balances the work by it)
        report.write(msgs.LEN.pack(0))
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
            for item in msg:
                if len(item) == 2:  # formatted by the parent
                    files[item[0]].writelines(item[1])
                else:  # nogil=False: this process's GIL is its own, and the GIL-held way is the cheaper
                    write_text(files[item[0]], _unpacked(item), nogil=False)
        except OSError as e:
            error = e
            tell(e)
            continue
        written()
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
