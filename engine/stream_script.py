"""STREAM 0.6 compatibility: script files, source files and STREAM's output text.

A script (shared/DESIGN.md, "STREAM script format") registers tables with their source files,
views (`vquery` + `vtable`) and queries with their destination files::

    table : register stream S (A integer, B float, C byte, D char(4));
    source : data/S.dat
    vquery : select * from S where A > 1;
    vtable : register stream BigS (A integer, B float, C byte, D char(4));
    query : select A, B from BigS [Rows 2];
    dest : out/q1

A source file's first line lists its column types (`i`, `f`, `b`, `cN`); the first column is the
timestamp and, for a relation, the second is the sign (`+`/`-`, declared `b`). Output lines are
`[τ]:+:v1, v2` / `[τ]:-:v1, v2`.

Every user error is a `ScriptError` whose text is `path:line: reason`.

Reading uses pyarrow's CSV reader with explicit column types, streamed block by block (memory is
bounded by a block, not by the file); the slow Python re-scans that locate a bad line run only
once a block has failed. Writing builds each output line from fixed-width fields padded with NUL
bytes — packed into uint64 words when every field fits in 8 bytes, else in one byte matrix per
chunk — and a single `bytes.translate` per chunk removes the padding.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
from cqlstream.cql import ast, ddl
from cqlstream.cql.analyzer import AnalyzeOptions, analyze
from cqlstream.cql.catalog import Catalog, SourceDef
from cqlstream.cql.errors import CqlError
from cqlstream.cql.frontend import compile_query
from cqlstream.cql.parser import parse_query, parse_statement
from cqlstream.cql.types import resolve as resolve_type
from cqlstream.engine.batch import Batch, concat


class ScriptError(Exception):
    """A user error in a STREAM script or one of its files: `path:line: reason`."""

    def __init__(self, path, line: int | None, reason: str, column: int | None = None):
        self.path = str(path)
        self.line = line
        self.reason = reason
        self.column = column
        super().__init__(str(self))

    def __str__(self) -> str:
        if self.line is None:
            return f"{self.path}: {self.reason}"
        return f"{self.path}:{self.line}: {self.reason}"


# =====================================================================================
# Script files
# =====================================================================================

KEYWORDS = ("table", "source", "vquery", "vtable", "query", "dest")
_STATEMENT_KEYWORDS = ("table", "vquery", "vtable", "query")
_LINE = re.compile(r"^\s*([A-Za-z_][A-Za-z_0-9]*)\s*:(.*)$", re.S)


class TableDecl(NamedTuple):
    ddl: str
    source: Path
    line: int


class ViewDecl(NamedTuple):
    cql: str  # the vquery
    ddl: str  # the vtable registration
    line: int  # line of `vquery`


class QueryDecl(NamedTuple):
    cql: str
    dest: Path
    line: int


@dataclass
class Step:
    """One declaration, in file order, with everything needed to map errors to lines.

    `text` is the statement (DDL or CQL) as written, starting on line `line` at 1-based column
    `col`; `file`/`file_line` the source or destination; for views also the vtable's DDL."""

    kind: str  # 'table' | 'view' | 'query'
    text: str
    line: int
    col: int
    file: Path | None = None
    file_text: str = ""
    file_line: int | None = None
    ddl: str = ""
    ddl_line: int | None = None
    ddl_col: int = 1


@dataclass
class Script:
    path: Path
    steps: list[Step] = field(default_factory=list)

    @property
    def folder(self) -> Path:
        return self.path.parent

    @property
    def tables(self) -> list[TableDecl]:
        return [TableDecl(s.text, s.file, s.line) for s in self.steps if s.kind == "table"]

    @property
    def views(self) -> list[ViewDecl]:
        return [ViewDecl(s.text, s.ddl, s.line) for s in self.steps if s.kind == "view"]

    @property
    def queries(self) -> list[QueryDecl]:
        return [QueryDecl(s.text, s.file, s.line) for s in self.steps if s.kind == "query"]


def _statement_end(text: str, state: dict) -> int:
    """Index of the `;` ending a statement in `text` (one line), or -1. `state` carries quotes and
    block comments across lines. CQL: '...' strings, "..." and `...` names, -- and /* */ comments."""
    i, n = 0, len(text)
    while i < n:
        q = state.get("quote")
        c = text[i]
        if state.get("block"):
            j = text.find("*/", i)
            if j < 0:
                return -1
            state["block"] = False
            i = j + 2
            continue
        if q:
            if c == q:
                if i + 1 < n and text[i + 1] == q:  # doubled quote inside a string
                    i += 2
                    continue
                state["quote"] = None
            i += 1
            continue
        if c in "'\"`":
            state["quote"] = c
        elif c == "-" and text.startswith("--", i):
            return -1
        elif c == "/" and text.startswith("/*", i):
            state["block"] = True
            i += 2
            continue
        elif c == ";":
            return i
        i += 1
    return -1


def _read_items(path: Path, text: str):
    """(keyword, statement or file text, line, column of the text) for every item of the script."""
    lines = text.split("\n")
    items = []
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
        state: dict = {}
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
                and _LINE.match(cur)
                and _LINE.match(cur).group(1).lower() in KEYWORDS
            ):
                raise ScriptError(
                    path,
                    lineno,
                    f"the {kw} statement does not end with ';' "
                    f"(line {cur_line} starts a new '{_LINE.match(cur).group(1)} :')",
                )
        items.append((kw, "\n".join(parts), lineno, col))
    return items


def _resolve(folder: Path, name: str) -> Path:
    p = Path(os.path.expanduser(name))
    return p if p.is_absolute() else folder / p


def parse_script(path, *, compat: bool = False) -> Script:
    """Read and check a STREAM script: pairing of table/source, vquery/vtable and query/dest,
    existence of source files and their type lines, and every CQL statement (analyzed in order
    against a scratch catalog). Raises ScriptError with the script line of the first problem."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ScriptError(path, None, "script not found") from None
    except IsADirectoryError:
        raise ScriptError(path, None, "is a folder, not a script") from None
    except UnicodeDecodeError as e:
        raise ScriptError(path, _line_of_offset(path, e.start), "not UTF-8 text") from None
    except OSError as e:
        raise ScriptError(path, None, f"cannot read script: {e.strerror or e}") from None
    script = Script(path)
    folder = path.parent
    pending: Step | None = None  # a table waiting for its source, a vquery for its vtable, a query for its dest
    need = {"table": "source", "view": "vtable", "query": "dest"}
    dests: dict[Path, int] = {}
    for kw, body, line, col in _read_items(path, text):
        if pending is not None:
            expected = need[pending.kind]
            if kw != expected:
                what = {"table": "table", "view": "vquery", "query": "query"}[pending.kind]
                raise ScriptError(
                    path, pending.line, f"'{what}' must be followed by '{expected} :' (found '{kw} :' on line {line})"
                )
            if kw == "source":
                pending.file = _resolve(folder, body)
                pending.file_text, pending.file_line = body, line
                if not pending.file.is_file():
                    why = "is a folder" if pending.file.is_dir() else "not found"
                    raise ScriptError(path, line, f"source file '{body}' {why} (looked for {pending.file})")
            elif kw == "dest":
                pending.file = _resolve(folder, body)
                pending.file_text, pending.file_line = body, line
                if pending.file in dests:
                    raise ScriptError(
                        path, line, f"dest '{body}' is already written by the query of line {dests[pending.file]}"
                    )
                dests[pending.file] = pending.line
            else:  # vtable
                pending.ddl, pending.ddl_line, pending.ddl_col = body, line, col
            script.steps.append(pending)
            pending = None
            continue
        if kw in ("source", "dest", "vtable"):
            owner = {"source": "table", "dest": "query", "vtable": "vquery"}[kw]
            raise ScriptError(path, line, f"'{kw} :' without a preceding '{owner} :'")
        kind = {"table": "table", "vquery": "view", "query": "query"}[kw]
        pending = Step(kind, body, line, col)
    if pending is not None:
        expected = need[pending.kind]
        what = {"table": "table", "view": "vquery", "query": "query"}[pending.kind]
        raise ScriptError(path, pending.line, f"'{what}' must be followed by '{expected} :' (found end of script)")
    _Registrar(script, None, compat).register_all()
    return script


def _line_of_offset(path: Path, offset: int) -> int:
    try:
        with open(path, "rb") as f:
            return f.read(offset).count(b"\n") + 1
    except OSError:
        return 1


# ------------------------------------------------------------------ registration

_LETTER_DESC = "i integer, f float, b byte, cN char(N)"


def _type_kind_group(kind: str) -> str:
    return {"char": "text", "varchar": "text", "byte": "text", "timestamp": "int"}.get(kind, kind)


class _Registrar:
    """Registers a script's declarations in order, into a Dsms or (for checking) a bare catalog,
    turning every CqlError into a ScriptError on the script line it comes from."""

    def __init__(self, script: Script, dsms, compat: bool):
        self.script = script
        self.dsms = dsms
        self.compat = compat
        self.catalog: Catalog = dsms.catalog if dsms is not None else Catalog()
        self.sources: list[tuple[Step, SourceDef]] = []
        self.queries: list[tuple[Step, object]] = []  # (step, QueryHandle or CompiledQuery)

    def _err(self, e: CqlError, line: int, col: int) -> ScriptError:
        if e.line is None:
            return ScriptError(self.script.path, line, e.reason)
        column = (e.column + col - 1) if e.line == 1 and e.column else e.column
        return ScriptError(self.script.path, line + e.line - 1, e.reason, column)

    def register_all(self) -> None:
        for step in self.script.steps:
            getattr(self, "_" + step.kind)(step)

    def _ddl(self, text: str, line: int, col: int, what: str) -> ast.RegisterSource:
        try:
            stmt = parse_statement(text)
        except CqlError as e:
            raise self._err(e, line, col) from None
        if not isinstance(stmt, ast.RegisterSource):
            raise ScriptError(self.script.path, line, f"'{what} :' needs 'register stream|relation Name (...);'")
        return stmt

    def _table(self, step: Step) -> None:
        stmt = self._ddl(step.text, step.line, step.col, "table")
        try:
            d = self.dsms.register_source(stmt) if self.dsms is not None else ddl.register_source(self.catalog, stmt)
        except CqlError as e:
            raise self._err(e, step.line, step.col) from None
        check_type_line(step.file, d)
        self.sources.append((step, d))

    def _view(self, step: Step) -> None:
        path = self.script.path
        try:
            q = parse_query(step.text)
        except CqlError as e:
            raise self._err(e, step.line, step.col) from None
        vt = self._ddl(step.ddl, step.ddl_line, step.ddl_col, "vtable")
        try:
            plan = analyze(q, self.catalog, text=step.text).plan
        except CqlError as e:
            raise self._err(e, step.line, step.col) from None
        kind = "stream" if plan.is_stream else "relation"
        if vt.kind != kind:
            hint = (
                "wrap the vquery in Istream(...), Dstream(...) or Rstream(...)"
                if vt.kind == "stream"
                else "declare it 'register stream'"
            )
            raise ScriptError(
                path,
                step.ddl_line,
                f"vtable '{vt.name}' is declared a {vt.kind} but its vquery (line {step.line}) yields a {kind}; {hint}",
            )
        if len(vt.attrs) != len(plan.schema):
            raise ScriptError(
                path,
                step.ddl_line,
                f"vtable '{vt.name}' declares {len(vt.attrs)} attributes but "
                f"its vquery (line {step.line}) returns {len(plan.schema)}",
            )
        for a, got in zip(vt.attrs, plan.schema):
            try:
                want = resolve_type(a.type)
            except CqlError as e:
                raise self._err(e, step.ddl_line, step.ddl_col) from None
            if got.type.kind != "null" and _type_kind_group(want.kind) != _type_kind_group(got.type.kind):
                raise ScriptError(
                    path,
                    step.ddl_line,
                    f"vtable '{vt.name}' declares {a.name} {want} but its "
                    f"vquery (line {step.line}) gives {got.name} {got.type}",
                )
        rv = ast.RegisterView(vt.name, tuple(a.name for a in vt.attrs), q, pos=vt.pos)
        try:
            ddl.register_view(self.catalog, rv, step.text)
        except CqlError as e:
            raise self._err(e, step.ddl_line, step.ddl_col) from None

    def _query(self, step: Step) -> None:
        try:
            if self.dsms is not None:
                h = self.dsms.register_query(step.text)
            else:
                h = compile_query(step.text, self.catalog, options=AnalyzeOptions(stream_compat=self.compat))
        except CqlError as e:
            raise self._err(e, step.line, step.col) from None
        self.queries.append((step, h))


# =====================================================================================
# Source files
# =====================================================================================

_LETTER = re.compile(r"^(i|f|b|c(\d+))$")


def _letter_for(t) -> str | None:
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


def _read_first_line(path: Path) -> tuple[str, int]:
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


def check_type_line(path, source: SourceDef) -> list[str]:
    """Check a source file's first line against the registered attributes; returns the letters."""
    path = Path(path)
    text, _ = _read_first_line(path)
    if not text.strip():
        raise ScriptError(
            path, 1, f"expected a type line listing the columns ({_LETTER_DESC}), e.g. {_example_line(source)}"
        )
    letters = [x.strip() for x in text.split(",")]
    for j, x in enumerate(letters):
        if not _LETTER.match(x):
            raise ScriptError(path, 1, f"unknown type {x!r} in column {j + 1} (known: {_LETTER_DESC})")
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
                f"source files cannot hold ({_LETTER_DESC})",
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


class _RowError(Exception):
    def __init__(self, row: int, reason: str):
        super().__init__(reason)
        self.row = row
        self.reason = reason


class SourceReader:
    """Iterate over a STREAM source file as typed Batches of roughly `block_size` bytes each.

    Timestamps are checked to be non-decreasing across the whole file, signs to be `+`/`-`, byte
    values to be one character and char(N) values at most N characters; any problem raises
    ScriptError naming the file's line. `rows` counts the data rows delivered so far."""

    def __init__(self, path, source: SourceDef, block_size: int = 8 << 20):
        self.path = Path(path)
        self.source = source
        self.letters = check_type_line(self.path, source)
        self.rel = source.kind == "relation"
        self.block_size = block_size
        self.rows = 0
        self.last_ts: int | None = None
        self._names = [f"c{j}" for j in range(len(self.letters))]
        types = {}
        for j, x in enumerate(self.letters):
            if j == 1 and self.rel:
                types[self._names[j]] = pa.dictionary(pa.int32(), pa.string())
            else:
                types[self._names[j]] = {"i": pa.int64(), "f": pa.float64()}.get(x, pa.string())
        self._convert = pacsv.ConvertOptions(
            column_types=types,
            null_values=[],
            strings_can_be_null=False,
            quoted_strings_can_be_null=False,
            true_values=[],
            false_values=[],
        )
        self._parse = pacsv.ParseOptions(
            delimiter=",", quote_char=False, escape_char=False, newlines_in_values=False, ignore_empty_lines=True
        )
        self._attr_types = [a.type for a in source.attrs]

    # ---------------------------------------------------------------- reading
    def _has_data(self) -> bool:
        _, first_len = _read_first_line(self.path)
        return self.path.stat().st_size > first_len

    def _open(self, use_threads: bool = True):
        ro = pacsv.ReadOptions(
            column_names=self._names, skip_rows=1, block_size=self.block_size, use_threads=use_threads
        )
        return pacsv.open_csv(self.path, read_options=ro, parse_options=self._parse, convert_options=self._convert)

    def __iter__(self) -> Iterator[Batch]:
        if not self._has_data():
            return
        try:
            reader = self._open()
        except pa.ArrowInvalid:
            reader = None
        while True:
            try:
                if reader is None:
                    raise pa.ArrowInvalid("could not open")
                rb = reader.read_next_batch()
            except StopIteration:
                return
            except (pa.ArrowInvalid, pa.ArrowTypeError) as e:
                raise self._locate_parse_error(str(e)) from None
            if rb.num_rows == 0:
                continue
            try:
                b = self._to_batch(rb)
            except _RowError as e:
                raise ScriptError(self.path, self.line_of_row(e.row), e.reason) from None
            self.rows += len(b)
            yield b

    def read_all(self) -> Batch:
        """The whole file as one Batch."""
        return concat(list(self), self._attr_types)

    # ---------------------------------------------------------------- conversion
    def _to_batch(self, rb: pa.RecordBatch) -> Batch:
        base = self.rows
        n = rb.num_rows
        ts = rb.column(0).to_numpy()
        ts = np.ascontiguousarray(ts, dtype=np.int64)
        if n > 1:
            bad = np.flatnonzero(ts[1:] < ts[:-1])
            if len(bad):
                k = int(bad[0]) + 1
                raise _RowError(
                    base + k,
                    f"timestamp {int(ts[k])} is smaller than the previous one "
                    f"({int(ts[k - 1])}); timestamps must not decrease",
                )
        if self.last_ts is not None and n and int(ts[0]) < self.last_ts:
            raise _RowError(
                base,
                f"timestamp {int(ts[0])} is smaller than the previous one ({self.last_ts}); "
                f"timestamps must not decrease",
            )
        if self.rel:
            sign = self._signs(rb.column(1), base)
        else:
            sign = np.ones(n, np.int8)
        cols = []
        off = 1 + self.rel
        for j, t in enumerate(self._attr_types):
            arr = rb.column(off + j)
            if t.kind in ("int", "timestamp"):
                cols.append(np.ascontiguousarray(arr.to_numpy(), dtype=np.int64))
            elif t.kind == "float":
                cols.append(np.ascontiguousarray(arr.to_numpy(), dtype=np.float64))
            else:
                cols.append(self._text(arr, t, j, base))
        if n:
            self.last_ts = int(ts[-1])
        return Batch(cols, [None] * len(cols), ts, sign, np.zeros(n, np.uint64))

    def _signs(self, arr, base: int) -> np.ndarray:
        if isinstance(arr, pa.ChunkedArray):
            arr = arr.combine_chunks()
        words = [str(w).strip(" \t") for w in arr.dictionary.to_pylist()]
        table = np.array([1 if w == "+" else -1 if w == "-" else 0 for w in words] or [0], np.int8)
        idx = arr.indices.to_numpy(zero_copy_only=False)
        sign = table[idx]
        bad = np.flatnonzero(sign == 0)
        if len(bad):
            k = int(bad[0])
            raise _RowError(base + k, f"sign must be '+' or '-', not {words[idx[k]]!r}")
        return sign

    def _text(self, arr, t, j: int, base: int) -> np.ndarray:
        a = self.source.attrs[j]
        if isinstance(arr, pa.ChunkedArray):
            arr = arr.combine_chunks()
        # spaces around a value are allowed: strip them (only when there are any)
        if (
            pc.any(pc.or_(pc.starts_with(arr, " "), pc.ends_with(arr, " "))).as_py()
            or pc.any(pc.or_(pc.starts_with(arr, "\t"), pc.ends_with(arr, "\t"))).as_py()
        ):
            arr = pc.utf8_trim(arr, " \t")
        lengths = pc.utf8_length(arr).to_numpy(zero_copy_only=False)
        if t.kind == "byte":
            bad = np.flatnonzero(lengths != 1)
            if len(bad):
                k = int(bad[0])
                raise _RowError(base + k, f"{a.name} is a byte: one character, not {arr[k].as_py()!r}")
        elif t.length is not None:
            bad = np.flatnonzero(lengths > t.length)
            if len(bad):
                k = int(bad[0])
                raise _RowError(base + k, f"{a.name} is {t}: {arr[k].as_py()!r} has {int(lengths[k])} characters")
        return arr.to_numpy(zero_copy_only=False).astype(object, copy=False)

    # ---------------------------------------------------------------- error paths (slow, exact)
    def line_of_row(self, row: int) -> int:
        """File line (1-based) of data row `row` (0-based; empty lines are not rows)."""
        with open(self.path, "rb") as f:
            f.readline()
            lineno, k = 1, -1
            for raw in f:
                lineno += 1
                if raw.rstrip(b"\r\n"):
                    k += 1
                    if k == row:
                        return lineno
        return lineno

    def _parses(self, data: bytes) -> bool:
        if not data.strip(b"\r\n"):
            return True
        ro = pacsv.ReadOptions(column_names=self._names, use_threads=False, block_size=max(len(data) + 16, 1 << 16))
        try:
            pacsv.read_csv(
                pa.py_buffer(data), read_options=ro, parse_options=self._parse, convert_options=self._convert
            )
            return True
        except (pa.ArrowInvalid, pa.ArrowTypeError):
            return False

    def _locate_parse_error(self, message: str) -> ScriptError:
        """The first line pyarrow rejects (found by bisection with pyarrow itself, so the verdict
        is the fast path's), with a reason worked out from that line alone."""
        data = self.path.read_bytes()
        lines = data.split(b"\n")[1:]
        lo, hi = 0, len(lines)
        if self._parses(b"\n".join(lines)):
            return ScriptError(self.path, None, f"cannot read: {message}")
        # invariant: lines[lo:hi] contains the first bad line; bisect with chunk parses (cost ~2n)
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if not self._parses(b"\n".join(lines[lo:mid])):
                hi = mid
            else:
                lo = mid
        return ScriptError(self.path, lo + 2, self._explain_line(lines[lo], message))

    def _explain_line(self, raw: bytes, message: str) -> str:
        try:
            text = raw.decode("utf-8").rstrip("\r")
        except UnicodeDecodeError:
            return "not UTF-8 text"
        values = text.split(",")
        if len(values) != len(self.letters):
            return (
                f"expected {len(self.letters)} comma-separated values ({','.join(self.letters)}), found {len(values)}"
            )
        for j, (v, x) in enumerate(zip(values, self.letters)):
            what = (
                "timestamp" if j == 0 else "sign" if (self.rel and j == 1) else self.source.attrs[j - 1 - self.rel].name
            )
            if x in ("i", "f"):
                typ = pa.int64() if x == "i" else pa.float64()
                kind = "an integer" if x == "i" else "a number"
                if not v.strip():
                    return f"column {j + 1} ({what}): {v.strip()!r} is not {kind}"
                try:
                    pacsv.read_csv(
                        pa.py_buffer(v.encode() + b"\n"),
                        read_options=pacsv.ReadOptions(column_names=["v"]),
                        parse_options=self._parse,
                        convert_options=pacsv.ConvertOptions(column_types={"v": typ}, null_values=[]),
                    )
                except (pa.ArrowInvalid, pa.ArrowTypeError):
                    return f"column {j + 1} ({what}): {v.strip()!r} is not {kind}"
        return f"cannot read the line: {message}"


def read_source(path, source: SourceDef) -> Batch:
    """A whole STREAM source file as a typed Batch (ids 0; the input manager assigns them)."""
    return SourceReader(path, source).read_all()


# =====================================================================================
# Output text
# =====================================================================================

_PAD = 0  # padding byte inside the fixed-width line matrix, removed at the end
_NULL = np.frombuffer(b"null", np.uint8)
_BOOL = np.frombuffer(b"false" + b"true\0", np.uint8).reshape(2, 5)


def _int_digits(v: np.ndarray) -> np.ndarray:
    """(n, w) uint8 matrix: decimal text of int64 `v`, right-aligned, padded with NUL."""
    n = len(v)
    if n == 0:
        return np.zeros((0, 1), np.uint8)
    neg = v < 0
    with np.errstate(over="ignore"):
        a = np.where(neg, -v, v).view(np.uint64) if v.dtype == np.int64 else np.abs(v).astype(np.uint64)
    top = int(a.max())
    nd = len(str(top))
    anyneg = bool(neg.any())
    w = nd + anyneg
    out = np.zeros((w, n), np.uint8)  # slot-major, transposed at the end
    a = a.astype(np.uint32) if top < (1 << 32) else a
    ten = a.dtype.type(10)
    for k in range(nd):
        q = a // ten
        d = (a - q * ten).astype(np.uint8)
        d += 48
        if k:
            d[a == 0] = _PAD
        out[w - 1 - k] = d
        a = q
    if anyneg:
        out[0] = np.where(neg, 45, _PAD)
    return out.T  # a transposed view: the line matrix assignment copies it once


def _int_field(v: np.ndarray) -> np.ndarray:
    """Decimal text of integers as an (n, w) NUL-padded matrix; small value ranges format a lookup
    table once and gather rows from it, sorted columns (timestamps) format each run's value once."""
    n = len(v)
    if n == 0:
        return np.zeros((0, 1), np.uint8)
    v = np.asarray(v, np.int64)
    lo, hi = int(v.min()), int(v.max())
    if hi - lo <= max(1 << 12, n // 2):
        table = _int_digits(np.arange(lo, hi + 1, dtype=np.int64))
        return _gather_rows(table, v - lo)
    if n > 1 and bool(np.all(v[1:] >= v[:-1])):
        starts = np.flatnonzero(np.concatenate(([True], v[1:] != v[:-1])))
        if len(starts) <= n // 2:
            table = _int_digits(v[starts])
            idx = np.repeat(np.arange(len(starts)), np.diff(np.append(starts, n)))
            return _gather_rows(table, idx)
    return _int_digits(v)


def _gather_rows(table: np.ndarray, idx: np.ndarray) -> np.ndarray:
    """table[idx] for an (r, w) uint8 table, moving each row as one wide element."""
    table = np.ascontiguousarray(table)
    r, w = table.shape
    if w in (1, 2, 4, 8):
        dt = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}[w]
        return table.view(dt).ravel()[idx].view(np.uint8).reshape(len(idx), w)
    wide = np.zeros((r, 8 if w < 8 else 16), np.uint8)
    if w <= 16:
        wide[:, :w] = table
        if w < 8:
            got = wide.view(np.uint64).ravel()[idx].view(np.uint8).reshape(len(idx), 8)
        else:
            got = wide.view(np.complex128).ravel()[idx].view(np.uint8).reshape(len(idx), 16)
        return got[:, :w]
    return table[idx]


_P10 = 10.0 ** np.arange(0, 23)


def _float_field(x: np.ndarray) -> np.ndarray:
    """C's `%g` of float64 `x` (6 significant digits) as an (n, 22) NUL-padded slot matrix.

    Slots: sign, '0', '.', 3 leading zeros (fixed form below 1), then 6 digits each followed by a
    possible '.', then 'e', exponent sign and 3 exponent digits; unused slots stay NUL. Values whose
    rounding is ambiguous within the float arithmetic used here (an exact decimal tie is within
    1e-9), or that are not finite / out of the exactly scalable range, are formatted by Python."""
    n = len(x)
    x = np.asarray(x, np.float64)
    S = np.zeros((22, n), np.uint8)
    if n == 0:
        return S.T.copy()
    neg = np.signbit(x)
    a = np.abs(x)
    fin = np.isfinite(a)
    zero = a == 0
    ok = fin & ~zero
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        e = np.floor(np.log10(np.where(ok, a, 1.0))).astype(np.int64)
        k = 5 - e  # scale by 10**k
        slow = ~ok | (k > 22) | (k < -22)
        kk = np.clip(k, -22, 22)
        s = np.where(kk >= 0, a * _P10[np.abs(kk)], a / _P10[np.abs(kk)])
        # log10 may be off by one next to powers of ten
        lowm = ok & (s < 1e5)
        highm = ok & (s >= 1e6)
        if lowm.any() or highm.any():
            e = e - lowm + highm
            k = 5 - e
            slow |= (k > 22) | (k < -22)
            kk = np.clip(k, -22, 22)
            s = np.where(kk >= 0, a * _P10[np.abs(kk)], a / _P10[np.abs(kk)])
        frac = s - np.floor(s)
        slow |= np.abs(frac - 0.5) < 1e-9
        m = np.rint(s)
    m = np.where(ok & ~slow, m, 100000.0).astype(np.int64)
    carry = m >= 1000000
    m = np.where(carry, m // 10, m)
    e = e + carry
    # digits and trailing zeros
    D = np.empty((6, n), np.uint8)
    rest = m.copy()
    for j in range(5, -1, -1):
        q = rest // 10
        D[j] = (rest - q * 10).astype(np.uint8) + 48
        rest = q
    tz = np.zeros(n, np.int64)
    run = np.ones(n, bool)
    for j in range(5, 0, -1):
        run &= D[j] == 48
        tz += run
    sig = 6 - tz  # significant digits kept
    expo = (e < -4) | (e >= 6)
    fixed_pos = ~expo & (e >= 0)
    fixed_neg = ~expo & (e < 0)
    S[0] = np.where(neg, 45, _PAD)
    S[1] = np.where(fixed_neg, 48, _PAD)
    S[2] = np.where(fixed_neg, 46, _PAD)
    for z in range(3):  # zeros after "0." : -e-1 of them (0..3)
        S[3 + z] = np.where(fixed_neg & (-e - 1 > z), 48, _PAD)
    shown = np.where(fixed_pos, np.maximum(sig, e + 1), sig)
    for j in range(6):
        S[6 + 2 * j] = np.where(j < shown, D[j], _PAD)
        if j < 5:
            dot = (fixed_pos & (e == j) & (sig > j + 1)) | (expo & (j == 0) & (sig > 1))
            S[7 + 2 * j] = np.where(dot, 46, _PAD)
    S[17] = np.where(expo, 101, _PAD)
    S[18] = np.where(expo, np.where(e < 0, 45, 43), _PAD)
    ae = np.abs(e)
    S[19] = np.where(expo & (ae >= 100), 48 + (ae // 100) % 10, _PAD)
    S[20] = np.where(expo, 48 + (ae // 10) % 10, _PAD)
    S[21] = np.where(expo, 48 + ae % 10, _PAD)
    # zeros: "0" / "-0"
    if zero.any():
        S[1:, zero] = _PAD
        S[6, zero] = 48
    out = S.T
    if slow.any():
        # not finite, near-tie roundings, |exponent| beyond exact scaling: Python's exact '%g'
        for i in np.flatnonzero(slow & ~zero).tolist():  # rare: only the flagged values
            b = np.frombuffer(("%g" % float(x[i])).encode(), np.uint8)
            out[i] = _PAD
            out[i, : len(b)] = b
    return out


def _text_field(col: np.ndarray) -> np.ndarray | None:
    """UTF-8 bytes of str values left-aligned in an (n, L) NUL-padded matrix (None if a value
    contains a NUL byte, which the padding could not tell apart)."""
    n = len(col)
    arr = pa.array(col, type=pa.string(), from_pandas=False) if col.dtype == object else pa.array(col.astype(str))
    if arr.null_count:
        arr = pc.fill_null(arr, "")
    offs = np.frombuffer(arr.buffers()[1], np.int32, n + 1, arr.offset * 4)
    data_buf = arr.buffers()[2]
    start, stop = int(offs[0]), int(offs[-1])
    data = (
        np.frombuffer(data_buf, np.uint8, stop - start, start)
        if data_buf is not None and stop > start
        else np.zeros(0, np.uint8)
    )
    lens = np.diff(offs).astype(np.int64)
    width = int(lens.max()) if n else 0
    if width == 0:
        return np.zeros((n, 1), np.uint8)
    if (data == 0).any():
        return None
    out = np.zeros((n, width), np.uint8)
    if width == 1:
        out[lens == 1, 0] = data
        return out
    pos = np.arange(len(data), dtype=np.int64) + np.repeat(
        np.arange(n, dtype=np.int64) * width - (offs[:-1] - start), lens
    )
    out.reshape(-1)[pos] = data
    return out


def _value_field(col: np.ndarray, mask: np.ndarray | None) -> np.ndarray | None:
    if col.dtype == np.bool_:
        f = _BOOL[col.astype(np.int64)]
    elif col.dtype.kind in "iu":
        f = _int_field(col.astype(np.int64, copy=False))
    elif col.dtype.kind == "f":
        f = _float_field(col)
    else:
        if mask is not None and mask.any():
            col = col.copy()
            col[mask] = ""
        f = _text_field(col)
        if f is None:
            return None
    if mask is not None and mask.any():
        if f.shape[1] < 4:
            f = np.concatenate([f, np.zeros((len(f), 4 - f.shape[1]), np.uint8)], axis=1)
        f = f.copy() if not f.flags.writeable else f
        f[mask] = _PAD
        f[mask, :4] = _NULL
    return f


def _format_slow(b: Batch) -> bytes:
    """Per-line formatting (only for values the fast path cannot pad: text containing NUL)."""
    out = []
    for row, t, s in zip(b.rows(), b.ts.tolist(), b.sign.tolist()):
        vals = ", ".join(
            "null"
            if v is None
            else ("%g" % v)
            if isinstance(v, float)
            else ("true" if v else "false")
            if isinstance(v, bool)
            else str(v)
            for v in row
        )
        out.append(f"[{t}]:{'+' if s > 0 else '-'}:{vals}\n")
    return "".join(out).encode("utf-8")


# ---------------------------------------------------------------- line assembly in 64-bit words
#
# A line is laid out as fixed-width byte slots (each field padded with NUL to its widest value in
# the chunk), and the slots are packed into little-endian uint64 words: a field of at most 8 bytes
# is one uint64 per row, placed at its byte offset with two shifts (it may straddle two words).
# Every step is then a contiguous uint64 array operation (SIMD), instead of a strided copy of a
# few bytes per row; one `bytes.translate` removes the padding of the whole chunk. Lines with a
# wider field (floats, text, integers of 8+ characters) use the byte-slot matrix assembly below.

_U8 = np.dtype("<u8")


def _digit_words(v: np.ndarray, nd: int, sign_slot: bool) -> np.ndarray:
    """Decimal text of int64 `v` (|v| < 10**nd) right-aligned in nd + sign_slot ≤ 8 bytes, NUL
    padded, one little-endian uint64 per value; a '-' goes in the first byte."""
    w = nd + sign_slot
    neg = v < 0
    a = np.abs(v).astype(np.uint64)  # |v| < 10**8 here: no overflow
    out = np.zeros(len(v), _U8)
    ten = np.uint64(10)
    for k in range(nd):
        q = a // ten
        d = (a - q * ten) + np.uint64(48)
        if k:
            d[a == 0] = 0
        out |= d << np.uint64(8 * (w - 1 - k))
        a = q
    if sign_slot:
        out |= np.where(neg, np.uint64(45), np.uint64(0))
    return out


_SMALL = 1 << 16
_small_words: np.ndarray | None = None


def _small_table() -> np.ndarray:
    """Text of every integer in [-2**16, 2**16) as a left-aligned NUL-padded uint64 (built once)."""
    global _small_words
    if _small_words is None:
        _small_words = np.arange(-_SMALL, _SMALL, dtype=np.int64).astype("S8").view(_U8)
    return _small_words


def _int_words(v: np.ndarray):
    """(uint64 words, width) of the decimal text of int64 `v` when every value fits in 8 bytes,
    else None. Values within ±2**16 come from a table built once per process; other small value
    ranges format a table per chunk; sorted columns (timestamps) format each run's value once and
    repeat it. (Where the text sits inside its slot does not matter: the NUL padding is removed.)"""
    n = len(v)
    lo, hi = int(v.min()), int(v.max())
    nd = len(str(max(abs(lo), abs(hi))))
    neg = lo < 0
    if nd + neg > 8:
        return None
    w = nd + neg
    if lo >= -_SMALL and hi < _SMALL:
        return _small_table()[v + _SMALL], w
    if hi - lo < n // 2:  # a table smaller than the column
        return _words_of(np.arange(lo, hi + 1, dtype=np.int64), nd, neg)[v - lo], w
    if n > 1 and bool(np.all(v[1:] >= v[:-1])):
        starts = np.flatnonzero(np.concatenate(([True], v[1:] != v[:-1])))
        if len(starts) <= n // 2:
            return np.repeat(_words_of(v[starts], nd, neg), np.diff(np.append(starts, n))), w
    return _words_of(v, nd, neg), w


def _words_of(v: np.ndarray, nd: int, neg: bool) -> np.ndarray:
    """Text words of int64 values that fit in 8 characters: numpy's own conversion to 8-byte
    strings for a few values (one C call, left-aligned), the digit arithmetic for many (SIMD)."""
    if len(v) <= 2048:
        return np.ascontiguousarray(v).astype("S8").view(_U8)
    return _digit_words(v, nd, neg)


_NULL_WORD = np.frombuffer(b"null\0\0\0\0", _U8)[0]
_BOOL_WORDS = np.frombuffer(b"false\0\0\0true\0\0\0\0", _U8)


def _field_words(col: np.ndarray, mask: np.ndarray | None):
    """A column's text as (uint64 words, width ≤ 8), or None when it is wider (floats, text,
    large integers)."""
    if col.dtype.kind in "iu" and col.dtype != np.uint64:
        got = _int_words(col.astype(np.int64, copy=False))
    elif col.dtype == np.bool_:
        got = _BOOL_WORDS[col.astype(np.intp)], 5
    else:
        return None
    if got is None:
        return None
    x, w = got
    if mask is not None and mask.any():
        x = np.where(mask, _NULL_WORD, x)
        w = max(w, 4)
    return x, w


def _format_chunk(b: Batch) -> bytes:
    n = len(b)
    ts = _int_words(b.ts)
    if ts is None:
        return _format_chunk_bytes(b)
    pieces = [b"[", ts, b"]:", (np.where(b.sign > 0, np.uint64(43), np.uint64(45)), 1), b":"]
    for i, col in enumerate(b.cols):  # constant bytes, or (uint64 words, width) per row
        if i:
            pieces.append(b", ")
        f = _field_words(col, b.nulls[i])
        if f is None:
            return _format_chunk_bytes(b)
        pieces.append(f)
    pieces.append(b"\n")
    # place every piece at its byte offset: word q gets x << 8r, and word q + 1 the spill-over
    terms: dict[int, list] = {}
    consts: dict[int, int] = {}
    at = 0
    for p in pieces:
        if isinstance(p, bytes):
            for j, c in enumerate(p):  # constant bytes: folded into per-word constants
                q, r = divmod(at + j, 8)
                consts[q] = consts.get(q, 0) | (c << (8 * r))
            at += len(p)
            continue
        x, w = p
        q, r = divmod(at, 8)
        terms.setdefault(q, []).append(x << np.uint64(8 * r) if r else x)
        if r + w > 8:
            terms.setdefault(q + 1, []).append(x >> np.uint64(64 - 8 * r))
        at += w
    K = (at + 7) // 8
    words = np.empty((n, K), _U8)
    for q in range(K):
        t = terms.get(q, [])
        c = np.uint64(consts.get(q, 0))
        if not t:
            words[:, q] = c
            continue
        acc = t[0] | t[1] if len(t) > 1 else t[0] | c  # a fresh array: the pieces stay untouched
        for x in t[2:]:
            np.bitwise_or(acc, x, out=acc)
        if len(t) > 1 and c:
            np.bitwise_or(acc, c, out=acc)
        words[:, q] = acc
    return words.tobytes().translate(None, b"\0")


def _format_chunk_bytes(b: Batch) -> bytes:
    """Line assembly from byte-slot matrices (lines with fields wider than 8 bytes: floats, text,
    large integers)."""
    n = len(b)
    fields = []  # (matrix or constant bytes)
    fields.append(b"[")
    fields.append(_int_field(b.ts))
    fields.append(b"]:")
    fields.append(np.where(b.sign > 0, 43, 45).astype(np.uint8).reshape(n, 1))
    fields.append(b":")
    for i, col in enumerate(b.cols):
        if i:
            fields.append(b", ")
        f = _value_field(col, b.nulls[i])
        if f is None:
            return _format_slow(b)
        fields.append(f)
    fields.append(b"\n")
    widths = [len(f) if isinstance(f, bytes) else f.shape[1] for f in fields]
    W = sum(widths)
    mat = np.empty((n, W), np.uint8)
    at = 0
    for f, w in zip(fields, widths):
        if isinstance(f, bytes):
            mat[:, at : at + w] = np.frombuffer(f, np.uint8)
        else:
            mat[:, at : at + w] = f
        at += w
    return mat.tobytes().translate(None, b"\0")


def format_output(batch: Batch) -> bytes:
    """STREAM's text for a result batch: one `[τ]:+:v1, v2` / `[τ]:-:...` line per element, ints
    in decimal, floats as C's %g, text as stored, NULL as `null`, values separated by ", "."""
    n = len(batch)
    if n <= _CHUNK:
        return _format_chunk(batch) if n else b""
    return b"".join(_format_chunks(batch))


_CHUNK = 1 << 16  # rows per line matrix: a few MB, so the memory is reused (and cache-friendly)


def _format_chunks(batch: Batch):
    n = len(batch)
    for i in range(0, n, _CHUNK):
        yield _format_chunk(batch if n <= _CHUNK else batch.slice(i, min(i + _CHUNK, n)))


# =====================================================================================
# Running a script
# =====================================================================================


def _dest_path(step: Step, out_dir) -> Path:
    return Path(out_dir) / step.file.name if out_dir is not None else step.file


# Rows pushed per round. Measured on the 5M-row benchmarks: 100k keeps peak memory near 0.2-0.3 GB at
# the same CPU time as 1M for filters and aggregates, while joins (work per round grows faster than
# linearly with the round's size) took 20 s at 100k against minutes and 9 GB at 1M.
DEFAULT_BATCH_ROWS = 100_000


_malloc_tuned = False


def _tune_malloc() -> None:
    """Keep freed memory in the process (glibc): every round allocates and frees many arrays of
    a few MB, which glibc otherwise maps and unmaps each time — page faults on every first touch
    (measured on Q4 at 5M rows: 89k → 51k minor faults, 0.2-0.3 s of CPU). Peak RSS does not
    change: what is kept is reused by the next round. A no-op where mallopt is not available."""
    global _malloc_tuned
    if _malloc_tuned or os.environ.get("CQLSTREAM_MALLOC_TUNE", "1") == "0":
        return
    _malloc_tuned = True
    try:
        import ctypes
        import ctypes.util

        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        M_TRIM_THRESHOLD, M_TOP_PAD, M_MMAP_THRESHOLD = -1, -2, -3
        libc.mallopt(M_MMAP_THRESHOLD, 32 << 20)  # arrays up to 32 MB come from the heap
        libc.mallopt(M_TRIM_THRESHOLD, 512 << 20)  # give memory back only past 512 MB free at the top
        libc.mallopt(M_TOP_PAD, 64 << 20)
    except (OSError, AttributeError, TypeError):  # not glibc
        pass


def run_script(path, out_dir=None, compat: bool = False, batch_rows: int = DEFAULT_BATCH_ROWS) -> dict[str, int]:
    """Run a STREAM script: register its tables, views and queries in a Dsms, feed every source in
    global timestamp order (at most about `batch_rows` rows per push, the scheduler running between
    pushes), and write each query's result to its dest (in `out_dir` when given, same file name).
    Returns {dest path: lines written}. Raises ScriptError for any user error."""
    from cqlstream.engine.dsms import Dsms
    from cqlstream.engine.inputs import InputError

    if batch_rows < 1:
        raise ValueError("batch_rows must be at least 1")
    _tune_malloc()
    script = parse_script(path, compat=compat)
    d = Dsms(compat=compat)
    reg = _Registrar(script, d, compat)
    reg.register_all()
    if out_dir is not None:
        try:
            Path(out_dir).mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise ScriptError(out_dir, None, f"cannot create the output folder: {e.strerror or e}") from None
    outs = []  # (dest path, file, subscription)
    counts: dict[str, int] = {}
    seen: dict[Path, int] = {}
    try:
        for step, h in reg.queries:
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
                f = open(dest, "wb")  # noqa: SIM115 -- closed when the run ends (several dests stay open)
            except OSError as e:
                raise ScriptError(
                    script.path, step.file_line, f"cannot write dest '{dest}': {e.strerror or e}"
                ) from None
            outs.append((str(dest), f, d.subscribe(h.id)))
            counts[str(dest)] = 0

        def drain():
            for name, f, sub in outs:
                b = sub.poll()
                if len(b):
                    _format_into(f, b)
                    counts[name] += len(b)

        block = int(min(64 << 20, max(1 << 20, batch_rows * 16)))
        feeds = []
        for step, src in reg.sources:
            r = SourceReader(step.file, src, block_size=block)
            feeds.append(_Feed(src.name, r, iter(r)))
        _feed_all(d, feeds, batch_rows, drain, InputError)
        d.end()
        drain()
    finally:
        for _, f, _ in outs:
            f.close()
    return counts


def _format_into(f, batch: Batch) -> None:
    """Write a batch's text chunk by chunk (no joined copy of a large output)."""
    f.writelines(_format_chunks(batch))


class _Feed:
    def __init__(self, name: str, reader: SourceReader, it):
        self.name = name
        self.reader = reader
        self.it = it
        self.buf: Batch | None = None
        self.pos = 0  # rows of buf already pushed
        self.done = False  # the iterator is exhausted
        self.pushed = 0  # rows pushed so far (to name the file line of a rejected row)
        self.max_ts: int | None = None

    def fill(self) -> None:
        while not self.done and (self.buf is None or self.pos >= len(self.buf)):
            try:
                self.buf, self.pos = next(self.it), 0
            except StopIteration:
                self.buf, self.pos, self.done = None, 0, True

    def pending(self) -> np.ndarray:
        return self.buf.ts[self.pos :] if self.buf is not None else np.zeros(0, np.int64)


def _feed_all(d, feeds: list[_Feed], batch_rows: int, drain, InputError) -> None:
    """Push all sources in global timestamp order, about `batch_rows` rows per round.

    A round's cut T is the smallest last-buffered timestamp over sources that may still have more
    rows; every source pushes its rows with ts ≤ T, or, when that is more than `batch_rows` rows,
    exactly `batch_rows` rows in timestamp order (the rows of one instant may then span rounds). Sources with nothing to push get a heartbeat (at their next timestamp, or at T once
    exhausted) so operators reading several inputs never wait on them — without changing results:
    a heartbeat never goes beyond an instant some source really has."""
    while True:
        for f in feeds:
            f.fill()
        live = [f for f in feeds if f.buf is not None and f.pos < len(f.buf)]
        if not live:
            return
        cut = min((int(f.buf.ts[-1]) for f in live if not f.done), default=None)
        if cut is None:
            cut = max(int(f.buf.ts[-1]) for f in live)
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
            part = f.buf.slice(f.pos, f.pos + c)
            try:
                d.push_batch(f.name, part)
            except InputError as e:
                row = f.pushed + (e.row or 0)
                raise ScriptError(f.reader.path, f.reader.line_of_row(row), str(e)) from None
            f.pos += c
            f.pushed += c
            f.max_ts = int(part.ts[-1])
        for f in feeds:
            if f.buf is not None and f.pos < len(f.buf):
                nxt = int(f.buf.ts[f.pos])
                if f.max_ts is None or nxt > f.max_ts:
                    d.heartbeat(f.name, nxt)
                    f.max_ts = nxt
            elif f.done and f.max_ts is not None and cut > f.max_ts:
                d.heartbeat(f.name, cut)
                f.max_ts = cut
        d.run()
        drain()


__all__ = [
    "QueryDecl",
    "Script",
    "ScriptError",
    "SourceReader",
    "TableDecl",
    "ViewDecl",
    "check_type_line",
    "format_output",
    "parse_script",
    "read_source",
    "run_script",
]
