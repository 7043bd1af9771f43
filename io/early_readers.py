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
# process for them all (io/reader_process.py)
READERS = ("process", "thread")


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
    "READERS",
    "Block",
    "BlockStream",
    "EarlyReaders",
    "SourceFile",
    "first_pass",
    "start_early_readers",
    "start_reader",
]
