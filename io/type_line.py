"""A STREAM source file's type line (its first line: `i`, `f`, `b`, `cN` per column) checked
against a registered stream or relation.

Light to import (no numpy, no pyarrow): the script's check reads every source's type line, and a
run whose sources are parsed in a reader process (io/reader_process.py) needs nothing more of them.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from cqlstream.cql.catalog import SourceDef
from cqlstream.cql.types import DataType
from cqlstream.io.errors import ScriptError

LETTER_DESC = "i integer, f float, b byte, cN char(N)"

_LETTER = re.compile(r"^(i|f|b|c(\d+))$")


def _letter_for(t: DataType) -> str | None:
    """The type letter a column of DataType `t` is declared with (None: not readable)."""
    if t.kind in ("int", "timestamp"):
        return "i"
    if t.kind == "float":
        return "f"
    if t.kind == "byte":
        return "b"
    if t.kind == "char":
        return f"c{t.length}"
    if t.kind == "varchar":
        return "c"
    return None


def read_first_line(path: Path) -> tuple[str, int]:
    """(type line text, byte length of the first line including its newline)."""
    try:
        with open(path, "rb") as f:
            first = f.readline(1 << 16)
    except FileNotFoundError:
        raise ScriptError(path, None, "source file not found") from None
    except OSError as e:
        raise ScriptError(path, None, f"cannot read source file: {e.strerror or e}") from None
    try:
        return first.decode("utf-8").rstrip("\r\n"), len(first)
    except UnicodeDecodeError:
        raise ScriptError(path, 1, "the type line is not UTF-8 text") from None


def check_type_line(path: str | os.PathLike[str], source: SourceDef) -> list[str]:
    """Check a source file's first line against the registered attributes; returns the letters."""
    path = Path(path)
    text, _ = read_first_line(path)
    if not text.strip():
        raise ScriptError(
            path, 1, f"expected a type line listing the columns ({LETTER_DESC}), e.g. {_example_line(source)}"
        )
    letters = [x.strip() for x in text.split(",")]
    for j, x in enumerate(letters):
        if not _LETTER.match(x):
            raise ScriptError(path, 1, f"unknown type {x!r} in column {j + 1} (known: {LETTER_DESC})")
    rel = source.kind == "relation"
    want = 1 + rel + len(source.attrs)
    if len(letters) != want:
        lead = "a timestamp (i), a sign (b)" if rel else "a timestamp (i)"
        raise ScriptError(
            path,
            1,
            f"the type line lists {len(letters)} columns but {source.kind} "
            f"'{source.name}' needs {want}: {lead}, then "
            f"{', '.join(f'{a.name} {a.type}' for a in source.attrs)} "
            f"(e.g. {_example_line(source)})",
        )
    if letters[0] != "i":
        raise ScriptError(path, 1, f"column 1 is the timestamp and must be 'i', not {letters[0]!r}")
    if rel and letters[1] != "b":
        raise ScriptError(path, 1, f"column 2 of a relation is the sign (+/-) and must be 'b', not {letters[1]!r}")
    for j, (x, a) in enumerate(zip(letters[1 + rel :], source.attrs)):
        want_letter = _letter_for(a.type)
        if want_letter is None:
            raise ScriptError(
                path,
                1,
                f"attribute {a.name} of '{source.name}' has type {a.type}, which STREAM "
                f"source files cannot hold ({LETTER_DESC})",
            )
        ok = x == want_letter or (want_letter == "c" and x.startswith("c"))
        if not ok:
            raise ScriptError(
                path,
                1,
                f"column {j + 2 + rel} is {x!r} but attribute {a.name} of '{source.name}' "
                f"is {a.type} ({want_letter if want_letter != 'c' else 'cN'})",
            )
    return letters


def _example_line(source: SourceDef) -> str:
    """A type line that fits the source (varchar shown as c16)."""
    letters = ["i"] + (["b"] if source.kind == "relation" else [])
    for a in source.attrs:
        x = _letter_for(a.type) or "?"
        letters.append("c16" if x == "c" else x)
    return ",".join(letters)


__all__ = ["LETTER_DESC", "check_type_line", "read_first_line"]
