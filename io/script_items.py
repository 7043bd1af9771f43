"""The items of a STREAM script: its `keyword : text` lines, statements spanning lines up to their
`;`, and where a `source :` line's file is. Light to import (no compiler): `cqlstream run`'s first
pass over a script (io/early_readers.py) reads its tables with it before the compiler is loaded."""

from __future__ import annotations

import os
import re
from pathlib import Path

from cqlstream.io.errors import ScriptError

KEYWORDS = ("table", "source", "vquery", "vtable", "query", "dest")
_STATEMENT_KEYWORDS = ("table", "vquery", "vtable", "query")
_LINE = re.compile(r"^\s*([A-Za-z_][A-Za-z_0-9]*)\s*:(.*)$", re.S)


# what can start or end a quote, a comment or the statement: everything else is skipped at C speed
_SPECIAL = re.compile(r"[;'\"`/-]")


def _statement_end(text: str, state: dict[str, str | bool | None]) -> int:
    """Index of the `;` ending a statement in `text` (one line), or -1. `state` carries quotes and
    block comments across lines. CQL: '...' strings, "..." and `...` names, -- and /* */ comments.
    Jumps from one character that matters to the next (a loop over every character was ~3 ms of
    Linear Road's check)."""
    i, n = 0, len(text)
    while i < n:
        if state.get("block"):
            j = text.find("*/", i)
            if j < 0:
                return -1
            state["block"] = False
            i = j + 2
            continue
        q = state.get("quote")
        if isinstance(q, str) and q:
            j = text.find(q, i)
            if j < 0:
                return -1
            if j + 1 < n and text[j + 1] == q:  # doubled quote inside a string
                i = j + 2
                continue
            state["quote"] = None
            i = j + 1
            continue
        m = _SPECIAL.search(text, i)
        if m is None:
            return -1
        i = m.start()
        c = text[i]
        if c == ";":
            return i
        if c in "'\"`":
            state["quote"] = c
        elif c == "-" and text.startswith("--", i):
            return -1
        elif c == "/" and text.startswith("/*", i):
            state["block"] = True
            i += 2
            continue
        i += 1
    return -1


def _read_items(path: Path, text: str) -> list[tuple[str, str, int, int]]:
    """(keyword, statement or file text, line, column of the text) for every item of the script."""
    lines = text.split("\n")
    items: list[tuple[str, str, int, int]] = []
    i = 0
    while i < len(lines):
        raw = lines[i].rstrip("\r")
        lineno = i + 1
        i += 1
        s = raw.strip()
        if not s or s.startswith("#"):
            continue
        m = _LINE.match(raw)
        if not m:
            raise ScriptError(
                path, lineno, f"expected 'keyword : ...' with one of {', '.join(KEYWORDS)}; found {s[:40]!r}"
            )
        kw = m.group(1).lower()
        if kw not in KEYWORDS:
            raise ScriptError(path, lineno, f"unknown keyword '{m.group(1)}' (expected one of {', '.join(KEYWORDS)})")
        col = m.start(2) + 1
        rest = m.group(2)
        if kw not in _STATEMENT_KEYWORDS:
            name = rest.strip()
            if not name:
                raise ScriptError(path, lineno, f"'{kw}' needs a file name")
            items.append((kw, name, lineno, col))
            continue
        # a statement: up to the ';' that ends it, possibly several lines later
        state: dict[str, str | bool | None] = {}
        parts = []
        cur, cur_line = rest, lineno
        while True:
            end = _statement_end(cur, state)
            if end >= 0:
                parts.append(cur[: end + 1])
                tail = cur[end + 1 :].strip()
                if tail and not tail.startswith("#") and not tail.startswith("--"):
                    raise ScriptError(
                        path, cur_line, f"unexpected text after ';': {tail[:40]!r} (one statement per '{kw} :' line)"
                    )
                break
            parts.append(cur)
            if i >= len(lines):
                raise ScriptError(path, lineno, f"the {kw} statement does not end with ';'")
            cur = lines[i].rstrip("\r")
            cur_line = i + 1
            i += 1
            if cur.strip().startswith("#") and not state.get("quote") and not state.get("block"):
                cur = ""  # a script comment inside a statement (kept as a blank line: lines still match)
            elif (
                not state.get("quote")
                and not state.get("block")
                and (starts := _LINE.match(cur)) is not None
                and starts.group(1).lower() in KEYWORDS
            ):
                raise ScriptError(
                    path,
                    lineno,
                    f"the {kw} statement does not end with ';' (line {cur_line} starts a new '{starts.group(1)} :')",
                )
        items.append((kw, "\n".join(parts), lineno, col))
    return items


def _resolve(folder: Path, name: str) -> Path:
    p = Path(os.path.expanduser(name))
    return p if p.is_absolute() else folder / p


def source_file(folder: Path, name: str, source_dir: str | os.PathLike[str] | None) -> Path:
    """The file a `source : name` line of a script in `folder` reads (from `source_dir` when
    given, under the same file name)."""
    return _resolve(folder, name) if source_dir is None else Path(source_dir) / Path(name).name


__all__ = ["KEYWORDS", "source_file"]
