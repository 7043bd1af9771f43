"""Running a STREAM script: register it in a `Dsms`, feed every source file in global timestamp
order, and write each query's results to its dest in STREAM's text.

With two threads or more, the engine runs on the calling thread while each source is read and
parsed ahead on a thread of its own (io/prefetch.py; pyarrow's parser releases the GIL) and
results are formatted and written on writer threads (io/result_writer.py, the default) or in
writer processes (io/writer_process.py: the engine and the formatting each have their own GIL).
Rounds, and so the bytes written, are the same at every thread count."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, TYPE_CHECKING

import numpy as np

from cqlstream.cql.catalog import SourceDef
from cqlstream.engine import parallel
from cqlstream.engine.batch import Batch
from cqlstream.engine.dsms import Dsms, QueryHandle, Subscription
from cqlstream.engine.inputs import InputError
from cqlstream.engine.scheduler import for_threads
from cqlstream.io.early_readers import (
    READERS,
    Block,
    BlockStream,
    EarlyReaders,
    SourceFile,
    start_early_readers,
    start_reader,
)
from cqlstream.io.errors import ScriptError
from cqlstream.io.result_writer import ResultWriter, Round, empty_file
from cqlstream.io.run_settings import DEFAULT_BATCH_ROWS, block_bytes, default_threads, tune_malloc
from cqlstream.io.stream_script import Registrar, Step, parse_script

if TYPE_CHECKING:  # imported by a run that writes in processes (it brings subprocess)
    from cqlstream.io.writer_process import SpawnedWriters, WriterProcess

# where `cqlstream run --threads N` (N ≥ 2) formats and writes results
WRITERS = ("process", "thread")


def _dest_path(step: Step, out_dir: str | os.PathLike[str] | None) -> Path:
    return Path(out_dir) / step.paired_file.name if out_dir is not None else step.paired_file


# (DEFAULT_BATCH_ROWS, default_threads, the blocks' size and read-ahead: io/run_settings.py)

# Rounds of results waiting per writer thread: one keeps the writer busy (formatting a round takes
# a fraction of the engine's time for it) and holds the least memory (Q2: ~15 MB per round).
_WRITE_AHEAD = 1


# Engine threads of a run by default. 1: on a 2-core machine shared with other work, two engine
# threads took 16-29% more engine CPU on Linear Road with no wall gain measurable (bench/README.md,
# session 14); 2 is for a quiet machine once measured there.
DEFAULT_ENGINE_THREADS = 1


def run_script(
    path: str | os.PathLike[str],
    out_dir: str | os.PathLike[str] | None = None,
    compat: bool = False,
    batch_rows: int = DEFAULT_BATCH_ROWS,
    source_dir: str | os.PathLike[str] | None = None,
    threads: int | None = None,
    block_size: int | None = None,
    approximate: str | None = None,
    synopsis_joins: bool = True,
    writer: str = "thread",
    engine_threads: int | None = None,
    on_registered: Callable[[], None] | None = None,
    column_pruning: bool = True,
    early: EarlyReaders | None = None,
    spawned: SpawnedWriters | None = None,
    reader: str = "thread",
) -> dict[str, int]:
    """Run a STREAM script: register its tables, views and queries in a Dsms, feed every source in
    global timestamp order (at most about `batch_rows` rows per push, the scheduler running between
    pushes), and write each query's result to its dest (in `out_dir` when given, same file name).

    `threads` (default: `default_threads()`): 1 does everything on the calling thread; N ≥ 2 reads
    and parses each source ahead on a thread of its own and formats and writes results on N − 1
    workers while the engine runs on the calling one: `writer` "thread" (the default) on N − 1
    threads, "process" in N − 1 writer processes (io/writer_process.py: no GIL shared with the
    engine, but ~0.2 s more CPU per run, their start-up; bench/README.md). The output is the same
    bytes either way.
    `block_size`: bytes of source text parsed at a time (default: from `batch_rows`).
    Sources are read from `source_dir` when given (same file name). `approximate` "static":
    every query is registered with static approximation approved (docs/approximation.md).
    `synopsis_joins`: queries judged bounded run on constant-size synopses (docs/bounded-memory.md).
    `engine_threads` (default: `DEFAULT_ENGINE_THREADS`, 1 when `threads` is 1): with 2 or more
    the `parallel` scheduler runs operators side by side on that many threads (engine/parallel.py,
    engine/parallel_pass.py); 1 runs them in turn on the calling thread (round robin, ~5% less
    engine CPU than `parallel` on one thread). The output is the same bytes at every count.
    `on_registered`: called once the script is registered, before its first row is pushed (the
    CLI resumes garbage collection there, cqlstream/run_process.py).
    `column_pruning`: operators fill only the columns something above them reads
    (engine/column_pruning.py); False: every column (the same bytes either way).
    `early`: readers a first pass over this script already started (io/early_readers.py; the CLI
    starts them before it imports the engine); a threaded run takes those whose table its check
    accepts and stops the rest when it ends. Without, a threaded run makes that pass itself, its
    sources read by a thread each (`reader` "thread") or all by one child process ("process",
    io/reader_process.py: parsing shares no GIL with the engine; the same bytes either way).
    `spawned`: writer processes already started (the CLI spawns them before it imports the engine);
    a run with `writer` "process" takes those it needs, the caller stops any it leaves.
    Returns {dest path: lines written}. Raises ScriptError for any user error."""
    try:
        if batch_rows < 1:
            raise ValueError("batch_rows must be at least 1")
        threads = default_threads() if threads is None else threads
        if threads < 1:
            raise ValueError("threads must be at least 1")
        if writer not in WRITERS:
            raise ValueError(f"writer must be one of {', '.join(WRITERS)}")
        if reader not in READERS:
            raise ValueError(f"reader must be one of {', '.join(READERS)}")
        if engine_threads is None:  # see DEFAULT_ENGINE_THREADS; `threads` 1 means all on one thread
            engine_threads = 1 if threads == 1 else min(DEFAULT_ENGINE_THREADS, default_threads())
        if engine_threads < 1:
            raise ValueError("engine_threads must be at least 1")
        tune_malloc()
        block = block_bytes(batch_rows, block_size)
        if threads == 1 and early is not None:
            early.close()  # one thread reads on the engine's thread, in turn
        elif threads > 1 and early is None:
            # each source starts being read before the rest of the script is checked (the check's
            # queries and views, the registration and planning overlap the reading)
            early = start_early_readers(path, source_dir, block, reader)
        # writer processes start first: their start-up overlaps parsing and registering the script
        procs: list[WriterProcess] = []
        if threads > 1 and writer == "process":
            from cqlstream.io.writer_process import WriterProcess

            procs = spawned.take(threads - 1) if spawned is not None else []
            procs += [WriterProcess.spawn() for _ in range(threads - 1 - len(procs))]
        before = parallel.threads()
        try:
            parallel.set_threads(engine_threads)
            return _run(
                path,
                out_dir,
                compat,
                batch_rows,
                source_dir,
                threads,
                block,
                approximate,
                synopsis_joins,
                procs,
                on_registered,
                column_pruning,
                early,
            )
        finally:
            parallel.set_threads(before)
            for p in procs:
                p.abort()  # a no-op for a process that finished; else the run failed before handing over
    finally:
        if early is not None:
            early.close()  # the readers the run's check did not take (none were read from)


def _run(
    path: str | os.PathLike[str],
    out_dir: str | os.PathLike[str] | None,
    compat: bool,
    batch_rows: int,
    source_dir: str | os.PathLike[str] | None,
    threads: int,
    block: int,
    approximate: str | None,
    synopsis_joins: bool,
    procs: list[WriterProcess],
    on_registered: Callable[[], None] | None = None,
    column_pruning: bool = True,
    early_readers: EarlyReaders | None = None,
) -> dict[str, int]:
    # With threads, each source is being read and parsed by the time the script's check passes its
    # table (parse_script's on_source): started by the first pass (`early_readers`), else there;
    # so reading the first blocks overlaps checking the rest of the script, registering and
    # planning it. What a reader finds wrong in its input is raised only when the feed takes that
    # block, after the whole script was checked and registered: a script error is always reported
    # first, as at --threads 1.
    early: dict[int, tuple[SourceDef, SourceFile, BlockStream]] = {}  # id(step) → reader started

    def start_reading(step: Step, src: SourceDef) -> None:
        started = early_readers.take(step.paired_file, src, block) if early_readers is not None else None
        r, it = started if started is not None else start_reader(step.paired_file, src, block)
        early[id(step)] = (src, r, it)

    outs: list[tuple[str, IO[bytes], Subscription]] = []  # (dest path, file, subscription)
    counts: dict[str, int] = {}
    seen: dict[Path, int] = {}
    feeds: list[_Feed] = []
    writer: ResultWriter | None = None
    # With writer threads, dests are opened without truncating and the writer threads empty them
    # (io/result_writer.py): an old dest's blocks are freed off the engine's thread. Until the
    # writer takes them over, the finally below empties them, as opening with "wb" would have.
    defer_truncate = threads > 1 and not procs
    try:
        script = parse_script(
            path, compat=compat, source_dir=source_dir, on_source=start_reading if threads > 1 else None
        )
        d = Dsms(
            compat=compat,
            synopsis_joins=synopsis_joins,
            scheduler=for_threads(parallel.threads()),
            recent_tails=False,  # nothing peeks at a script run's queues
            cpu_clocks=False,  # nor reads its operators' CPU counters (and has no CPU limits)
            prune_columns=column_pruning,
        )
        reg = Registrar(script, d, compat, approximate)
        reg.register_all()
        if on_registered is not None:
            on_registered()
        if out_dir is not None:
            try:
                Path(out_dir).mkdir(parents=True, exist_ok=True)
            except OSError as e:
                raise ScriptError(out_dir, None, f"cannot create the output folder: {e.strerror or e}") from None
        for step, h in reg.queries:
            assert isinstance(h, QueryHandle)  # registered into a Dsms, not only compiled
            dest = _dest_path(step, out_dir)
            if dest in seen:
                raise ScriptError(
                    script.path,
                    step.file_line,
                    f"dest '{dest}' is also written by the query of line {seen[dest]} (same file name in --out-dir)",
                )
            seen[dest] = step.line
            try:
                dest.parent.mkdir(parents=True, exist_ok=True)
                f = _open_dest(dest, defer_truncate)
            except OSError as e:
                raise ScriptError(
                    script.path, step.file_line, f"cannot write dest '{dest}': {e.strerror or e}"
                ) from None
            outs.append((str(dest), f, d.subscribe(h.id)))
            counts[str(dest)] = 0
        writer = ResultWriter(
            [f for _, f, _ in outs], workers=threads - 1, depth=_WRITE_AHEAD, processes=procs, truncate=defer_truncate
        )

        def drain() -> None:
            rnd: Round = []
            for k, (name, _, sub) in enumerate(outs):
                b = sub.poll()
                if len(b):
                    rnd.append((k, b))
                    counts[name] += len(b)
            writer.write(rnd)

        for step, src in reg.sources:
            started = early.pop(id(step), None)
            if started is not None and started[0] == src:  # the checked table is the registered one
                feeds.append(_Feed(src.name, started[1], started[2]))
                continue
            if started is not None:
                started[2].close()
            if threads == 1:
                from cqlstream.io.dat_source import SourceReader  # (pyarrow: only where this process parses)

                r = SourceReader(step.paired_file, src, block_size=block)
                feeds.append(_Feed(src.name, r, r.instants()))
            else:
                feeds.append(_Feed(src.name, *start_reader(step.paired_file, src, block)))
        _feed_all(d, feeds, batch_rows, drain)
        d.end()
        drain()
        writer.close()
    finally:
        for _, _, pre in early.values():
            pre.close()  # a run that failed before feeding: the readers started early stop here
        for feed in feeds:
            feed.close()
        try:
            if writer is not None:
                writer.close()  # what was handed over is written, as the inline path wrote it
            elif defer_truncate:
                for _, out, _ in outs:  # the run failed before the writer took the dests over
                    try:
                        empty_file(out)
                    except OSError:  # the run's own error is the one to report
                        pass
        finally:
            for _, out, _ in outs:
                out.close()
    return counts


def _open_dest(dest: Path, keep: bool) -> IO[bytes]:
    """Open a dest for writing from its start: emptied ("wb"), or with `keep` as it is, for the
    writer threads to empty (created if missing, with the permissions "wb" gives)."""
    if not keep:
        return open(dest, "wb")  # closed when the run ends (several dests stay open)
    return os.fdopen(os.open(dest, os.O_WRONLY | os.O_CREAT, 0o666), "wb")


class _Feed:
    def __init__(self, name: str, reader: SourceFile, it: Iterator[Block]) -> None:
        self.name = name
        self.reader = reader
        self.it = it
        self.buf: Batch | None = None
        self.next_ts: int | None = None  # the instant after buf's last (known complete once buf is pushed)
        self.pos = 0  # rows of buf already pushed
        self.done = False  # the iterator is exhausted
        self.pushed = 0  # rows pushed so far (to name the file line of a rejected row)
        self.max_ts: int | None = None

    def close(self) -> None:
        """Stop the source's reading (a reader thread or process; a generator's file closes)."""
        close = getattr(self.it, "close", None)
        if close is not None:
            close()

    def fill(self) -> None:
        while not self.done and (self.buf is None or self.pos >= len(self.buf)):
            try:
                (self.buf, self.next_ts), self.pos = next(self.it), 0
            except StopIteration:
                self.buf, self.next_ts, self.pos, self.done = None, None, 0, True

    @property
    def batch(self) -> Batch:
        """The buffered batch of a live feed (one with rows left to push)."""
        if self.buf is None:
            raise ValueError(f"feed '{self.name}' has no buffered rows")
        return self.buf

    def pending(self) -> np.ndarray:
        return self.buf.ts[self.pos :] if self.buf is not None else np.zeros(0, np.int64)


def _feed_all(d: Dsms, feeds: list[_Feed], batch_rows: int, drain: Callable[[], None]) -> None:
    """Push all sources in global timestamp order, about `batch_rows` rows per round.

    A round's cut T is the smallest last-buffered timestamp over sources that may still have more
    rows; every source pushes its rows with ts ≤ T, or, when that is more than `batch_rows` rows,
    exactly `batch_rows` rows in timestamp order (the rows of one instant may then span rounds).
    Blocks come in whole instants (SourceReader.instants): a source whose block is all pushed gets a
    heartbeat at its next block's first instant, so the block's last instant is taken in this round,
    whole, rather than joined with the next block's rows in the next. Sources with nothing to push get a heartbeat (at their next timestamp, or at T once
    exhausted) so operators reading several inputs never wait on them — without changing results:
    a heartbeat never goes beyond an instant some source really has."""
    while True:
        for f in feeds:
            f.fill()
        live = [f for f in feeds if f.buf is not None and f.pos < len(f.buf)]
        if not live:
            return
        cut = min((int(f.batch.ts[-1]) for f in live if not f.done), default=None)
        if cut is None:
            cut = max(int(f.batch.ts[-1]) for f in live)
        heads = [f.pending() for f in live]
        counts = [int(np.searchsorted(h, cut, side="right")) for h in heads]
        if sum(counts) > batch_rows:
            # exactly batch_rows rows: everything before the batch_rows-th smallest timestamp, then
            # rows at that instant in source order (an instant may be split across rounds)
            allts = np.concatenate([h[:c] for h, c in zip(heads, counts)])
            cut = int(np.partition(allts, batch_rows - 1)[batch_rows - 1])
            below = [int(np.searchsorted(h, cut, side="left")) for h in heads]
            budget = batch_rows - sum(below)
            counts = []
            for h, b in zip(heads, below):
                take = min(int(np.searchsorted(h, cut, side="right")) - b, budget)
                budget -= take
                counts.append(b + take)
        for f, c in zip(live, counts):
            if not c:
                continue
            part = f.batch.slice(f.pos, f.pos + c)
            try:
                d.push_batch(f.name, part)
            except InputError as e:
                row = f.pushed + (e.row or 0)
                raise ScriptError(f.reader.path, f.reader.line_of_row(row), str(e)) from None
            f.pos += c
            f.pushed += c
            f.max_ts = int(part.ts[-1])
        for f in feeds:
            # the source's next instant, when known: what was pushed is complete through the one
            # before it (after a whole block: its last instant, taken in this round, not the next)
            nxt = (
                int(f.buf.ts[f.pos])
                if f.buf is not None and f.pos < len(f.buf)
                else None
                if f.buf is None
                else f.next_ts
            )
            if nxt is not None:
                if f.max_ts is None or nxt > f.max_ts:
                    d.heartbeat(f.name, nxt)
                    f.max_ts = nxt
            elif f.done and f.max_ts is not None and cut > f.max_ts:
                d.heartbeat(f.name, cut)
                f.max_ts = cut
        d.run()
        drain()


__all__ = ["DEFAULT_BATCH_ROWS", "WRITERS", "default_threads", "run_script"]
