"""The compiled methods of dataclasses, kept between processes.

`@dataclass` writes each class's `__init__`, `__repr__`, `__eq__`, `__hash__` and (frozen)
`__setattr__`/`__delattr__` as Python source and compiles it with `exec` while the module is
imported. cqlstream defines ~130 dataclasses on the way to `cqlstream run` (the AST, the plan
nodes and expressions, ...): ~700 methods, ~210 kB of generated source, whose compilation was
~0.15 s of every start — most of what creating those classes costs. Python's .pyc files keep a
module's own code but not text compiled at run time.

`install()` gives the `dataclasses` module an `exec` of its own (`cached_exec`) that looks the
text up in a table of code objects and compiles only the texts the table lacks. The table is
loaded on first use from the user's cache folder (one marshal file; cql/cache_files.py: private,
checksummed, written atomically) and written back at exit when this process compiled something
new. The file maps each text to its own code's marshal, loaded when that text is executed: it
holds every text any process compiled (other versions of the classes, other commands' classes:
~950 texts where a run uses ~700), and unmarshalling it whole cost ~9-30 ms of every start. The code for a text is exactly what `exec(text)` compiles there (file name
"<string>", no `from __future__` flags inherited), so the classes are the same; the file is keyed
by Python's version, its bytecode tag and the optimization level, and a text is its own key, so
a changed class only misses. Any failure to read or write the file means compiling, as before.
"""

from __future__ import annotations

import atexit
import dataclasses
import marshal
import sys
from pathlib import Path
from types import CodeType
from typing import Any

_MAGIC = b"cqlstream-dataclass-code-3\n"  # the file format (bump to orphan every older file)
_MAX_TEXTS = 20_000  # beyond this a save keeps only what this process used

_table: dict[str, bytes] | None = None  # text → its code's marshal, as in the file (loaded on first use)
_new: dict[str, CodeType] = {}  # texts this process compiled → their code
_loaded: dict[str, CodeType] = {}  # texts this process took from the file → their code
_used: set[str] = set()  # texts this process executed
compiled = 0  # texts this process had to compile (a save is due when > 0)


def cache_key() -> str:
    """Hex digest naming the interpreter whose bytecode the file holds."""
    from cqlstream.cql.cache_files import digest

    parts = (_MAGIC.decode(), sys.version, str(sys.implementation.cache_tag), str(sys.flags.optimize))
    return digest("\0".join(parts).encode())


def cache_path() -> Path:
    from cqlstream.cql.cache_files import cache_dir

    return cache_dir() / f"dataclass-code-{cache_key()[:32]}.marshal"


def _head() -> bytes:
    return _MAGIC + cache_key().encode() + b"\n"


def _read() -> dict[str, bytes]:
    """The entries in the cache file (text → code marshal), or {} when there is none we can trust and read."""
    from cqlstream.cql.cache_files import read_private

    payload = read_private(cache_path(), _head())
    if payload is None:
        return {}
    try:
        table = marshal.loads(payload)
    except (EOFError, ValueError, TypeError):
        return {}
    if not isinstance(table, dict) or not all(isinstance(k, str) and isinstance(v, bytes) for k, v in table.items()):
        return {}
    return table


def _entries() -> dict[str, bytes]:
    global _table
    if _table is None:
        _table = _read()
    return _table


def cached_exec(source: Any, globals: Any = None, locals: Any = None, /, **kwargs: Any) -> None:
    """`exec` for the dataclasses module: the same, with a text's code compiled once per cache."""
    if globals is None:  # what exec does: the caller's namespaces
        frame = sys._getframe(1)
        globals = frame.f_globals
        if locals is None:
            locals = frame.f_locals
    if isinstance(source, str) and not _ours(globals):
        # another package's class: compiled as the builtin would, without this module's
        # `from __future__` flags (exec of a text inherits its caller's)
        source = compile(source, "<string>", "exec", dont_inherit=True)
    elif isinstance(source, str):
        _used.add(source)
        source = _code(source)
    exec(source, globals, locals, **kwargs)


def _code(text: str) -> CodeType:
    """The code of a text: its entry in the file, else compiled (and kept for the save)."""
    global compiled
    code = _loaded.get(text) or _new.get(text)  # a text met again (classes alike in their fields)
    if code is not None:
        return code
    raw = _entries().get(text)
    if raw is not None:
        try:
            code = marshal.loads(raw)
        except (EOFError, ValueError, TypeError):
            code = None
        if isinstance(code, CodeType):
            _loaded[text] = code
            return code
        del _entries()[text]  # not a code object: compiled below, and replaced at the save
    new = _new[text] = compile(text, "<string>", "exec", dont_inherit=True)
    compiled += 1
    return new


def _ours(namespace: Any) -> bool:
    """Whether the class being made is cqlstream's own: dataclasses passes the defining module's
    namespace, and other packages' classes (pydantic's, the user's) are compiled as usual and
    never written to the file."""
    name = namespace.get("__name__", "") if isinstance(namespace, dict) else ""
    return isinstance(name, str) and (name == "cqlstream" or name.startswith("cqlstream."))


def save() -> None:
    """Write the table back when this process compiled something (merged with what another
    process may have written meanwhile); called at exit."""
    if not compiled or _table is None:
        return
    from cqlstream.cql.cache_files import write_atomic

    table = {**_read(), **_table, **{t: marshal.dumps(c) for t, c in _new.items()}}
    if len(table) > _MAX_TEXTS:
        table = {t: table[t] for t in _used if t in table}
    write_atomic(cache_path(), _head(), marshal.dumps(table))


def install() -> None:
    """Route the dataclasses module's `exec` through `cached_exec` (once per process); classes
    created before this call were compiled as usual."""
    if getattr(dataclasses, "exec", None) is cached_exec:
        return
    vars(dataclasses)["exec"] = cached_exec  # a module global shadows the builtin for its code
    atexit.register(save)


__all__ = ["cache_key", "cache_path", "cached_exec", "compiled", "install", "save"]
