"""Statements parsed by earlier `cqlstream run`s, kept in the user's cache folder.

A STREAM script's statements are parsed at every run: Linear Road's 75 took ~0.13 s of CPU of a
~0.75 s start (the contextual lexer compiling its ~50 scanners' regular expressions, the LALR
parse building a tree, the transformer), plus ~0.03 s loading the parser's tables. Parsing is a
function of the text alone, so `cqlstream run` (the CLI calls `enable()`) keeps the
ASTs of the statements it parsed, by text, in one file in the user's cache folder
(cql/cache_files.py: private, checksummed, written atomically); a later run takes a
statement's AST from there and parses only the texts it lacks (and loads the parser's tables
only then).

The file holds every text any run parsed (up to 5,000), a run needs a few: it is a pickle of
text → that text's own AST pickle, so a run unpickles the small index (~1 ms for 1,300 texts)
and then only the ASTs it looks up; unpickling the whole table had cost ~60 ms. An entry that
does not unpickle to an AST is parsed afresh (and replaced at exit). A save copies the entries
it did not use as they are, bytes for bytes.

The file is keyed by everything that decides a text's AST: the grammar, the source of the
modules that build the tree (cql/parser.py, cql/lark_tree.py, cql/ast.py, cql/errors.py,
cql/nesting.py), lark's version (its `__init__.py`, read, not imported) and Python's; any change
of one starts a new file. Only statements that parse are kept: a bad statement is parsed, and
raises the same error, every time. A library user, the server and the tests parse as before (the
cache is used only once enabled), and any failure to read or write the file only means parsing.
"""

from __future__ import annotations

import atexit
import pickle
import sys
from pathlib import Path
from typing import Any

from cqlstream.cql import ast

_MAGIC = b"cqlstream-parsed-3\n"  # the file format (bump to orphan every older file)
_MAX_TEXTS = 5_000  # beyond this a save keeps only the statements this process used
_SOURCES = ("parser.py", "lark_tree.py", "ast.py", "errors.py", "nesting.py")  # cql/ modules that make an AST of a text

_enabled = False
_table: dict[str, bytes] | None = None  # text → its AST's pickle, as in the file (loaded on first use)
_asts: dict[str, ast.Node] = {}  # text → AST: the entries this process unpickled or parsed
_used: set[str] = set()
parsed = 0  # statements this process parsed and added (a save is due when > 0)


def cache_key() -> str:
    """Hex digest of what decides a text's AST: the grammar, the tree-building code, lark, Python."""
    from cqlstream.cql.cache_files import hasher
    from cqlstream.cql.parser import _grammar_path

    here = Path(__file__).resolve().parent
    h = hasher()
    for part in (_MAGIC, sys.version.encode(), _lark_version(), _grammar_path().read_bytes()):
        h.update(part)
        h.update(b"\0")
    for name in _SOURCES:
        h.update((here / name).read_bytes())
        h.update(b"\0")
    return h.hexdigest()


def _lark_version() -> bytes:
    """The text of lark's `__init__.py`, which holds its `__version__`: read, not imported (a run
    whose statements are all kept never imports lark)."""
    from importlib.util import find_spec

    spec = find_spec("lark")
    try:
        return Path(spec.origin).read_bytes() if spec is not None and spec.origin else b""
    except OSError:
        return b""


def cache_path(key: str) -> Path:
    from cqlstream.cql.cache_files import cache_dir

    return cache_dir() / f"cql-parsed-{key[:32]}.pickle"


def _read(key: str) -> dict[str, bytes]:
    """The entries in the cache file (text → AST pickle), or {} when there is none we can trust and read."""
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


def _entries() -> dict[str, bytes]:
    global _table, _key
    if _table is None:
        _key = cache_key()
        _table = _read(_key)
    return _table


def _unpickle(raw: bytes) -> ast.Node | None:
    """One entry's AST, or None when the entry is not one (then the text is parsed afresh)."""
    try:
        stmt = pickle.loads(raw)
    except Exception:
        return None
    return stmt if isinstance(stmt, ast.Node) else None


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
    stmt = _asts.get(text)
    if stmt is None:
        raw = _entries().get(text)
        if raw is None or (stmt := _unpickle(raw)) is None:
            return None
        _asts[text] = stmt
    _used.add(text)
    return stmt


def remember(text: str, stmt: ast.Node) -> None:
    """Keep the AST `text` parsed to (when the cache is enabled)."""
    global parsed
    if _enabled:
        _entries().pop(text, None)  # an entry that did not unpickle: this AST replaces it
        _asts[text] = stmt
        _used.add(text)
        parsed += 1


def save() -> None:
    """Write the file back when this process parsed something new (merged with what another
    process may have written meanwhile); called at exit."""
    if not parsed or _table is None or _key is None:
        return
    from cqlstream.cql.cache_files import write_atomic

    table = {**_read(_key), **_table}
    try:
        for text, stmt in _asts.items():
            if text not in _table:  # parsed here (the entries unpickled here are kept as read)
                table[text] = pickle.dumps(stmt, protocol=pickle.HIGHEST_PROTOCOL)
        payload_table = {t: table[t] for t in _used} if len(table) > _MAX_TEXTS else table
        payload = pickle.dumps(payload_table, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception:  # an AST that does not pickle: keep nothing
        return
    write_atomic(cache_path(_key), _MAGIC + _key.encode() + b"\n", payload)


__all__ = ["cache_key", "cache_path", "enable", "lookup", "parsed", "remember", "save"]
