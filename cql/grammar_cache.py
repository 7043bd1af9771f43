"""The CQL parser's LALR tables, built once per grammar and kept in the user's cache folder.

Building the parser from grammar/cql.lark (grammar analysis, LALR tables) takes ~0.3-1 s; loading
the saved tables ~0.03 s, and every process that parses CQL pays one of the two (`cqlstream run`,
`serve`, a query registered over HTTP). Lark's own `cache=True` keeps them in the shared temp
folder, written in place (a process starting meanwhile can read half a file) and unpickled from a
place other users can write. This cache instead:

- is keyed by the grammar's text, the parser options, lark's version and Python's: a changed
  grammar or an upgraded lark never loads old tables (the key is in the file name and again in
  the file, checked before anything is unpickled);
- lives in `$CQLSTREAM_CACHE_DIR`, else `$XDG_CACHE_HOME/cqlstream`, else `~/.cache/cqlstream`
  (created private, mode 0700), never beside the installed package, so a read-only
  site-packages changes nothing;
- is written atomically, trusted only when whole and ours, and never fails a run
  (cql/cache_files.py): a corrupt, truncated, foreign or stale file is ignored and the
  parser is built and saved again; a folder that cannot be written only means building each time.
"""

from __future__ import annotations

import hashlib
import io
import sys
from pathlib import Path
from typing import Any

import lark
from lark import Lark

from cqlstream.cql.cache_files import cache_dir, read_private, write_atomic

_MAGIC = b"cqlstream-lalr-2\n"  # the file format (bump to orphan every older file)


def cache_key(grammar: str, options: dict[str, Any]) -> str:
    """Hex digest naming one build: the grammar, the options, lark's and Python's versions."""
    h = hashlib.sha256()
    for part in (_MAGIC.decode(), grammar, repr(sorted(options.items())), lark.__version__, sys.version):
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()


def cache_path(grammar: str, options: dict[str, Any]) -> Path:
    return cache_dir() / f"cql-lalr-{cache_key(grammar, options)[:32]}.pickle"


def _load(path: Path, key: str) -> Lark | None:
    """The parser saved at `path` under `key`, or None when absent, foreign, damaged or stale."""
    payload = read_private(path, _MAGIC + key.encode() + b"\n")
    if payload is None:
        return None
    try:
        return Lark.load(io.BytesIO(payload))
    except Exception:  # a whole file lark cannot read after all: build afresh
        return None


def _save(parser: Lark, path: Path, key: str) -> None:
    """Write the parser's tables atomically; any failure leaves no file (and is not an error)."""
    sink = io.BytesIO()
    parser.save(sink)
    write_atomic(path, _MAGIC + key.encode() + b"\n", sink.getvalue())


def cached_lark(grammar: str, **options: Any) -> Lark:
    """A Lark LALR parser for `grammar` with `options`, loaded from the cache when a good copy of
    this exact build is there, else built and saved for the next process."""
    key = cache_key(grammar, options)
    path = cache_path(grammar, options)
    parser = _load(path, key)
    if parser is None:
        parser = Lark(grammar, **options)
        _save(parser, path, key)
    return parser


__all__ = ["cache_dir", "cache_key", "cache_path", "cached_lark"]
