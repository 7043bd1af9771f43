"""Statements parsed by earlier `cqlstream run`s, kept in the user's cache folder.

A STREAM script's statements are parsed at every run: Linear Road's 75 took ~0.13 s of CPU of a
~0.75 s start (the contextual lexer compiling its ~50 scanners' regular expressions, the LALR
parse building a tree, the transformer), plus ~0.03 s loading the parser's tables. Parsing is a
function of the text alone, so `cqlstream run` (the CLI calls `enable()`) keeps the
ASTs of the statements it parsed, by text, in one pickle in the user's cache folder
(cql/cache_files.py: private, checksummed, written atomically); a later run takes a
statement's AST from there and parses only the texts it lacks (and loads the parser's tables
only then).

The file maps each text to its own pickled AST, and a run unpickles only the statements it looks
up: the file holds every statement any run on this machine parsed (up to `_MAX_TEXTS`; the test
suite alone leaves ~1,300), and unpickling all of them took 0.06-0.10 s of CPU per start — more
than parsing a short script does (bench/README.md, session 15).

The file is keyed by everything that decides a text's AST: the grammar, the source of the
modules that build the tree (cql/parser.py, cql/ast.py, cql/errors.py, cql/nesting.py), lark's
version and Python's; any change of one starts a new file. Only statements that parse are kept:
a bad statement is parsed, and raises the same error, every time. A library user, the server and
the tests parse as before (the cache is used only once enabled), and any failure to read or write
the file only means parsing.
"""

from __future__ import annotations

import atexit
import pickle
import sys
from pathlib import Path
from typing import Any

from cqlstream.cql import ast

_MAGIC = b"cqlstream-parsed-2\n"  # the file format (bump to orphan every older file)
_MAX_TEXTS = 5_000  # beyond this a save keeps only the statements this process used
_SOURCES = ("parser.py", "ast.py", "errors.py", "nesting.py")  # cql/ modules that make an AST of a text

_enabled = False
_table: dict[str, bytes] | None = None  # text → its pickled AST, as in the file (loaded on first use)
_asts: dict[str, ast.Node] = {}  # text → AST: those looked up or parsed by this process
_used: set[str] = set()
parsed = 0  # statements this process parsed and added (a save is due when > 0)


def cache_key() -> str:
    """Hex digest of what decides a text's AST: the grammar, the tree-building code, lark, Python."""
    import hashlib

    import lark

    from cqlstream.cql.parser import _grammar_path

    here = Path(__file__).resolve().parent
    h = hashlib.sha256()
    for part in (_MAGIC, sys.version.encode(), lark.__version__.encode(), _grammar_path().read_bytes()):
        h.update(part)
        h.update(b"\0")
    for name in _SOURCES:
        h.update((here / name).read_bytes())
        h.update(b"\0")
    return h.hexdigest()


def cache_path(key: str) -> Path:
    from cqlstream.cql.cache_files import cache_dir

    return cache_dir() / f"cql-parsed-{key[:32]}.pickle"


def _read(key: str) -> dict[str, bytes]:
    """The table in the cache file (text → pickled AST), or {} when there is none we can trust
    and read. The ASTs stay pickled: `lookup` unpickles the ones a run needs."""
    from cqlstream.cql.cache_files import read_private

    payload = read_private(cache_path(key), _MAGIC + key.encode() + b"\n")
    if payload is None:
        return {}
    try:
        table = pickle.loads(payload)
    except Exception:  # a whole file that does not unpickle after all: parse afresh
        return {}
    if not isinstance(table, dict) or not all(isinstance(k, str) and isinstance(v, bytes) for k, v in table.items()):
        return {}
    return table


_key: str | None = None


def _statements() -> dict[str, bytes]:
    global _table, _key
    if _table is None:
        _key = cache_key()
        _table = _read(_key)
    return _table


def _unpickled(text: str) -> ast.Node | None:
    """The AST kept for `text`, unpickled once per process; None when absent or unreadable
    (then parsed as if never kept)."""
    stmt = _asts.get(text)
    if stmt is not None:
        return stmt
    blob = _statements().get(text)
    if blob is None:
        return None
    try:
        stmt = pickle.loads(blob)
    except Exception:  # one damaged entry: parse that statement afresh
        stmt = None
    if not isinstance(stmt, ast.Node):
        _statements().pop(text, None)
        return None
    _asts[text] = stmt
    return stmt


def enable() -> None:
    """Use and keep the cache in this process (`cqlstream run`); saved at exit when it grew."""
    global _enabled
    if not _enabled:
        _enabled = True
        atexit.register(save)


def lookup(text: str) -> Any:
    """The AST kept for `text`, or None (not kept, or the cache is not enabled)."""
    if not _enabled:
        return None
    stmt = _unpickled(text)
    if stmt is not None:
        _used.add(text)
    return stmt


def remember(text: str, stmt: ast.Node) -> None:
    """Keep the AST `text` parsed to (when the cache is enabled)."""
    global parsed
    if _enabled:
        _asts[text] = stmt
        _statements().pop(text, None)  # pickled at the save
        _used.add(text)
        parsed += 1


def save() -> None:
    """Write the table back when this process parsed something new (merged with what another
    process may have written meanwhile); called at exit."""
    if not parsed or _table is None or _key is None:
        return
    from cqlstream.cql.cache_files import write_atomic

    try:
        new = {t: pickle.dumps(stmt, protocol=pickle.HIGHEST_PROTOCOL) for t, stmt in _asts.items() if t not in _table}
    except Exception:  # an AST that does not pickle: keep nothing
        return
    table = {**_read(_key), **_table, **new}
    if len(table) > _MAX_TEXTS:
        table = {t: table[t] for t in _used if t in table}
    payload = pickle.dumps(table, protocol=pickle.HIGHEST_PROTOCOL)
    write_atomic(cache_path(_key), _MAGIC + _key.encode() + b"\n", payload)


__all__ = ["cache_key", "cache_path", "enable", "lookup", "parsed", "remember", "save"]
