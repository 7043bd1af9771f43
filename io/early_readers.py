"""Sources' readers started by a first pass over a script, before the script is checked.

A threaded `cqlstream run` is serial while it starts: importing the engine, checking the script's
statements, planning its queries (~0.2 s on the main thread, the other core idle). A reader started
there parses its source meanwhile (pyarrow parses without the GIL), so its work is not left to
compete with the engine and the writer once rows flow (bench/README.md, session 19). The first pass
looks only at `table` + `source` pairs — the scanner that splits the script into statements, the
table's `register` statement, the source file's type line — and needs neither the engine nor the
query compiler; the CLI makes it before importing them.

The pass is a guess, never a verdict: it starts nothing more at the first thing it cannot read, and
reports nothing. The script's check that follows (io/stream_script.py `parse_script`) takes each
reader whose table it accepted (`EarlyReaders.take`: same source file, same definition, same block
size), starts the others itself, and reports every problem with its line; a run that fails stops
the readers (`EarlyReaders.close`). A reader shows nothing before its rows are taken: what it finds
wrong in its input is raised where the feed takes that block, after the whole script was checked
and registered, as at one thread.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from cqlstream.io.run_settings import READ_AHEAD, READ_AHEAD_EARLY

if TYPE_CHECKING:
    from cqlstream.cql.catalog import SourceDef
    from cqlstream.engine.batch import Batch
    from cqlstream.io.dat_source import SourceReader
    from cqlstream.io.prefetch import Prefetch

# a source's parsed rows in whole instants, and the instant its next rows start with
# (SourceReader.instants; None: the file's end or an instant that may continue)
Block = tuple["Batch", "int | None"]

# where a threaded run's sources are parsed: a thread per source in this process, or one reader
# process for them all (io/reader_process.py), or "auto": the process for large inputs (below)
READERS = ("auto", "process", "thread")

# "auto" reads in a process from this much source text on, when the process can fork (no other
# thread). Measured on an idle 2-core machine (bench/README.md, session 20): Q2/Q4 at 1M rows (12.7 MB)
# 2-thread wall 1.05 -> 0.99 s and 1.08 -> 1.02 s (medians of 5; speed-up over one thread 1.35 -> 1.45x,
# 1.31 -> 1.36x), Linear Road at 720k unchanged. The child's own imports (~0.2 s of CPU on the other
# core) are a fixed cost a small input does not repay, and a spawned interpreter costs ~0.1 s more.
PROCESS_READER_BYTES = 8 << 20


class SourceFile(Protocol):
    """What a run reads of a source's reader besides its blocks: the file, to name a rejected row's line."""

    path: Path
    block_size: int

    def line_of_row(self, row: int) -> int: ...


class BlockStream(Protocol):
    """A source's blocks in order (its error raised at the block where it was found); `close`
    stops the reading early."""

    def __iter__(self) -> Iterator[Block]: ...

    def __next__(self) -> Block: ...

    def close(self) -> None: ...


def start_reader(file: Path, source: SourceDef, block_size: int) -> tuple[SourceReader, Prefetch[Block]]:
    """A reader of `file` for `source` (its type line checked) parsing ahead on a thread of its own,
    `READ_AHEAD_EARLY` blocks until its first block is taken and `READ_AHEAD` after that."""
    from cqlstream.io.dat_source import SourceReader
    from cqlstream.io.prefetch import Prefetch

    r = SourceReader(file, source, block_size=block_size)
    return r, Prefetch(r.instants(), READ_AHEAD, f"cqlstream-read-{source.name}", READ_AHEAD_EARLY)


class EarlyReaders:
    """The readers a first pass started (`start_early_readers`), each waiting to be taken by the
    run's check of its table, or stopped by `close`."""

    def __init__(self) -> None:
        self._readers: list[tuple[Path, SourceDef, SourceReader, Prefetch[Block]]] = []

    def __len__(self) -> int:
        return len(self._readers)

    def names(self) -> list[str]:
        """The sources being read, in the order they were started."""
        return [d.name for _, d, _, _ in self._readers]

    def add(self, file: Path, source: SourceDef, block_size: int) -> None:
        """Start reading `file` for `source` (raises what SourceReader raises on a bad type line)."""
        r, it = start_reader(file, source, block_size)
        self._readers.append((file, source, r, it))

    def take(self, file: Path, source: SourceDef, block_size: int) -> tuple[SourceFile, BlockStream] | None:
        """The reader started for this file, definition and block size (the caller owns it from
        now on), or None."""
        for k, (f, d, r, it) in enumerate(self._readers):
            if f == file and d == source and r.block_size == block_size:
                del self._readers[k]
                return r, it
        return None

    def close(self) -> None:
        """Stop every reader not taken, waiting for its thread to end (they drop what they read)."""
        while self._readers:
            self._readers.pop()[3].close()


def start_early_readers(
    script: str | os.PathLike[str],
    source_dir: str | os.PathLike[str] | None,
    block_size: int,
    reader: str = "thread",
) -> EarlyReaders:
    """Start a reader for every `table` + `source` pair of `script` whose statement and type line
    are good, up to the first that is not (see the module docstring); none when the script cannot
    be read or split into statements. Never raises for what is wrong in the script or its sources:
    the check that follows reports it. `reader` "process": one child process makes this pass and
    reads them all (io/reader_process.py; it is started here, before anything else is imported)."""
    if reader == "auto":
        reader = auto_reader(Path(script), source_dir)
    if reader == "process":
        from cqlstream.io.reader_process import ProcessReaders

        procs = ProcessReaders.spawn()
        try:
            first_pass(Path(script), source_dir, block_size, procs.add)
        except Exception:  # a guess, as below
            pass
        procs.start_receiving()
        return procs
    early = EarlyReaders()
    try:
        first_pass(Path(script), source_dir, block_size, early.add)
    except Exception:  # a guess: the script's check reports every problem with its line
        pass
    return early


def auto_reader(path: Path, source_dir: str | os.PathLike[str] | None) -> str:
    """What `reader` "auto" reads with: "process" when the files the script's `source` lines name
    hold at least PROCESS_READER_BYTES together and this process can fork, else "thread"."""
    from cqlstream.io.reader_process import can_fork
    from cqlstream.io.script_items import _read_items, source_file

    try:
        items = _read_items(path, path.read_text(encoding="utf-8"))
        files = {source_file(path.parent, text, source_dir) for kw, text, _, _ in items if kw == "source"}
        size = sum(f.stat().st_size for f in files if f.is_file())
    except Exception:  # an unreadable script or a bad item: the script's check reports it
        return "thread"
    return "process" if size >= PROCESS_READER_BYTES and can_fork() else "thread"


def first_pass(
    path: Path,
    source_dir: str | os.PathLike[str] | None,
    block_size: int,
    add: Callable[[Path, SourceDef, int], None],
) -> None:
    """Call `add(file, definition, block_size)` for each leading `table` + `source` pair of the
    script at `path` (raises at the first thing it cannot read, or what `add` raises)."""
    from cqlstream.cql import ast, ddl
    from cqlstream.cql.catalog import Catalog
    from cqlstream.cql.parser import parse_statement
    from cqlstream.io.script_items import _read_items, source_file

    items = _read_items(path, path.read_text(encoding="utf-8"))
    catalog = Catalog()  # as the check's: a bare catalog, the tables registered in order
    for (kw, text, _, _), (next_kw, name, _, _) in itertools.pairwise(items):
        if kw != "table":
            continue
        if next_kw != "source":
            return
        stmt = parse_statement(text)
        if not isinstance(stmt, ast.RegisterSource):
            return
        add(source_file(path.parent, name, source_dir), ddl.register_source(catalog, stmt), block_size)


__all__ = [
    "PROCESS_READER_BYTES",
    "READERS",
    "Block",
    "BlockStream",
    "EarlyReaders",
    "SourceFile",
    "auto_reader",
    "first_pass",
    "start_early_readers",
    "start_reader",
]
