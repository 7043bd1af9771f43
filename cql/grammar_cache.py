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
- is written atomically (a temporary file in the same folder, then `os.replace`), so a reader
  sees a whole file or none;
- is trusted only when whole and ours: the payload's SHA-256 must match the header, and the file
  and its folder must belong to this user and be writable by nobody else; otherwise (corrupt,
  truncated, foreign, another version) it is ignored and the parser is built and saved again;
- never fails a run: a folder that cannot be created or written only means building each time.
"""

from __future__ import annotations

import hashlib
import io
import os
import stat
import sys
import tempfile
from pathlib import Path
from typing import Any

import lark
from lark import Lark

_MAGIC = b"cqlstream-lalr-1\n"  # the file format (bump to orphan every older file)


def cache_dir() -> Path:
    """Where the tables are kept (the folder need not exist yet)."""
    explicit = os.environ.get("CQLSTREAM_CACHE_DIR")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "cqlstream"


def cache_key(grammar: str, options: dict[str, Any]) -> str:
    """Hex digest naming one build: the grammar, the options, lark's and Python's versions."""
    h = hashlib.sha256()
    for part in (_MAGIC.decode(), grammar, repr(sorted(options.items())), lark.__version__, sys.version):
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()


def cache_path(grammar: str, options: dict[str, Any]) -> Path:
    return cache_dir() / f"cql-lalr-{cache_key(grammar, options)[:32]}.pickle"


def _private(st: os.stat_result) -> bool:
    """Ours and writable by nobody else (what another user could have planted is never unpickled)."""
    uid = getattr(os, "getuid", None)
    return (uid is None or st.st_uid == uid()) and not st.st_mode & (stat.S_IWGRP | stat.S_IWOTH)


def _load(path: Path, key: str) -> Lark | None:
    """The parser saved at `path` under `key`, or None when absent, foreign, damaged or stale."""
    try:
        with open(path, "rb") as f:
            if not (_private(os.fstat(f.fileno())) and _private(os.stat(path.parent))):
                return None
            data = f.read()
    except OSError:
        return None
    head = _MAGIC + key.encode() + b"\n"
    if not data.startswith(head) or len(data) < len(head) + 65:
        return None
    digest, payload = data[len(head) : len(head) + 64], data[len(head) + 65 :]
    if data[len(head) + 64 : len(head) + 65] != b"\n" or hashlib.sha256(payload).hexdigest().encode() != digest:
        return None
    try:
        return Lark.load(io.BytesIO(payload))
    except Exception:  # a whole file lark cannot read after all: build afresh
        return None


def _save(parser: Lark, path: Path, key: str) -> None:
    """Write the parser's tables atomically; any failure leaves no file (and is not an error)."""
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        if not _private(os.stat(path.parent)):
            return  # a folder others can write to: keep nothing there
        sink = io.BytesIO()
        parser.save(sink)
        payload = sink.getvalue()
        data = _MAGIC + key.encode() + b"\n" + hashlib.sha256(payload).hexdigest().encode() + b"\n" + payload
        fd, tmp = tempfile.mkstemp(prefix=path.name + ".", suffix=".tmp", dir=path.parent)
    except OSError:
        return
    try:
        with os.fdopen(fd, "wb") as f:  # mkstemp: mode 0600, ours
            f.write(data)
        os.replace(tmp, path)
    except OSError:
        try:
            os.unlink(tmp)
        except OSError:
            pass


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
