"""STREAM 0.6 script files: parsing, pairing and checking their declarations, and registering them.

A script registers tables with their source files, views (`vquery` + `vtable`) and queries with
their destination files (docs/formats.md)::

    table : register stream S (A integer, B float, C byte, D char(4));
    source : data/S.dat
    vquery : select * from S where A > 1;
    vtable : register stream BigS (A integer, B float, C byte, D char(4));
    query : select A, B from BigS [Rows 2];
    dest : out/q1

Every user error is a `ScriptError` whose text is `path:line: reason`.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

from cqlstream.cql import ast, ddl
from cqlstream.cql.analyzer import AnalyzeOptions, analyze, implicit_reading
from cqlstream.cql.catalog import Catalog, SourceDef
from cqlstream.cql.errors import CqlError
from cqlstream.cql.frontend import CompiledQuery, compile_query
from cqlstream.cql.logical.nodes import Plan
from cqlstream.cql.parser import parse_query, parse_statement
from cqlstream.cql.types import resolve as resolve_type
from cqlstream.io.errors import ScriptError
from cqlstream.io.script_items import KEYWORDS, _read_items, _resolve, source_file
from cqlstream.io.type_line import check_type_line
from cqlstream.io.view_kinds import view_kind

if TYPE_CHECKING:
    from cqlstream.engine.dsms import Dsms, QueryHandle


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
    file_line: int | None = None
    ddl: str = ""
    ddl_line: int | None = None
    ddl_col: int = 1

    @property
    def paired_file(self) -> Path:
        """The source (table) or dest (query) file, which pairing sets before the step joins a script."""
        if self.file is None:
            raise ValueError(f"a {self.kind} step without its file")
        return self.file

    @property
    def vtable_line(self) -> int:
        """The line of a view's `vtable`, which pairing sets before the step joins a script."""
        if self.ddl_line is None:
            raise ValueError(f"a {self.kind} step without its vtable")
        return self.ddl_line


@dataclass
class Script:
    """A STREAM script read and checked: its steps in order and the warnings its views gave."""

    path: Path
    steps: list[Step] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)  # `path:line: warning: text`, from checking its views
    # what the check (parse_script) analyzed each view's query into, by the vquery's line: its plain
    # reading and CQL's, with the implicit Istream. A registration of the script into an empty
    # catalog in the same mode reuses them instead of analyzing every view again (the check's
    # catalog held the same definitions at each step): Linear Road's 68 vqueries, ~12 ms.
    readings: dict[int, tuple[Plan, Plan]] = field(default_factory=dict, repr=False, compare=False)
    readings_compat: bool | None = field(default=None, repr=False, compare=False)  # the mode they were made in

    @property
    def folder(self) -> Path:
        return self.path.parent

    @property
    def tables(self) -> list[TableDecl]:
        return [TableDecl(s.text, s.paired_file, s.line) for s in self.steps if s.kind == "table"]

    @property
    def views(self) -> list[ViewDecl]:
        return [ViewDecl(s.text, s.ddl, s.line) for s in self.steps if s.kind == "view"]

    @property
    def queries(self) -> list[QueryDecl]:
        return [QueryDecl(s.text, s.paired_file, s.line) for s in self.steps if s.kind == "query"]


def parse_script(
    path: str | os.PathLike[str],
    *,
    compat: bool = False,
    source_dir: str | os.PathLike[str] | None = None,
    on_source: Callable[[Step, SourceDef], None] | None = None,
) -> Script:
    """Read and check a STREAM script: pairing of table/source, vquery/vtable and query/dest,
    existence of source files and their type lines, and every CQL statement (analyzed in order
    against a scratch catalog). With `source_dir`, every source is read from that folder under its
    file name (a script written for other paths runs unchanged, as `out_dir` does for dests).
    `on_source(step, definition)` is called for each table as soon as it and its source file's
    type line are checked, before the statements after it (a run starts reading it there).
    Raises ScriptError with the script line of the first problem."""
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
                pending.file = source_file(folder, body, source_dir)
                pending.file_line = line
                if not pending.file.is_file():
                    why = "is a folder" if pending.file.is_dir() else "not found"
                    raise ScriptError(path, line, f"source file '{body}' {why} (looked for {pending.file})")
            elif kw == "dest":
                pending.file = _resolve(folder, body)
                pending.file_line = line
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
    script.readings_compat = compat
    check = Registrar(script, None, compat, check_only=True, on_source=on_source)
    check.register_all()
    script.warnings = check.warnings
    if script.warnings:
        import logging  # here: a script without warnings does without it (~5 ms of imports)

        for w in script.warnings:
            # on stderr under `cqlstream run` (logging's last-resort handler)
            logging.getLogger(__name__).warning("%s", w)
    return script


def _line_of_offset(path: Path, offset: int) -> int:
    try:
        with open(path, "rb") as f:
            return f.read(offset).count(b"\n") + 1
    except OSError:
        return 1


# ------------------------------------------------------------------ registration


# the reading of a vquery without CQL's implicit top-level Istream (view_kinds)
_NO_IMPLICIT = AnalyzeOptions(stream_compat=True)


def _kind(plan: Plan) -> str:
    return "stream" if plan.is_stream else "relation"


def _type_kind_group(kind: str) -> str:
    return {"char": "text", "varchar": "text", "byte": "text", "timestamp": "int"}.get(kind, kind)


def _only_builtin(catalog: Catalog) -> bool:
    """Whether `catalog` holds nothing beyond what a new Dsms registers itself (its system stream,
    which a checked view cannot read: the check's bare catalog lacks it)."""
    from cqlstream.engine.sysstream import NAME  # (loaded with the Dsms already)

    return all(n == NAME for n in catalog.names())


class Registrar:
    """Registers a script's declarations in order, into a Dsms or (for checking) a bare catalog,
    turning every CqlError into a ScriptError on the script line it comes from."""

    def __init__(
        self,
        script: Script,
        dsms: Dsms | None,
        compat: bool,
        approximate: str | None = None,
        check_only: bool = False,
        on_source: Callable[[Step, SourceDef], None] | None = None,
    ) -> None:
        self.script = script
        self.on_source = on_source  # told of each table once it and its source's type line check
        # check_only (parse_script's check, into a bare catalog): queries are parsed and analyzed
        # (every user error is found there) but not optimized, and `queries` stays empty
        self.check_only = check_only and dsms is None
        self.dsms = dsms
        self.compat = compat
        self.approximate = approximate  # "static": queries registered with static approximation approved
        self.catalog: Catalog = dsms.catalog if dsms is not None else Catalog()
        self.sources: list[tuple[Step, SourceDef]] = []
        self.queries: list[tuple[Step, QueryHandle | CompiledQuery]] = []  # a handle when registered in a Dsms
        self.warnings: list[str] = []  # `path:line: warning: text` of views accepted with a warning (view_kinds)
        # the check records the views' readings (Script.readings); a registration in the same mode
        # starting from an empty catalog reuses them (its catalog then matches the check's at every step)
        self.record = self.check_only and script.readings_compat == compat
        self.reuse = not check_only and script.readings_compat == compat and _only_builtin(self.catalog)

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
        check_type_line(step.paired_file, d)
        self.sources.append((step, d))
        if self.on_source is not None:
            self.on_source(step, d)

    def _view(self, step: Step) -> None:
        path = self.script.path
        ddl_line = step.vtable_line
        try:
            q = parse_query(step.text)
        except CqlError as e:
            raise self._err(e, step.line, step.col) from None
        vt = self._ddl(step.ddl, ddl_line, step.ddl_col, "vtable")
        known = self.script.readings.get(step.line) if self.reuse else None
        if known is not None:
            plain, plan = known
        else:
            try:
                plain = analyze(q, self.catalog, text=step.text, options=_NO_IMPLICIT).plan
            except CqlError as e:
                raise self._err(e, step.line, step.col) from None
            plan = implicit_reading(plain) or plain  # CQL's reading, with the implicit Istream
            if self.record:
                self.script.readings[step.line] = (plain, plan)
        verdict = view_kind(vt.name, step.line, vt.kind, _kind(plan), _kind(plain), self.compat)
        if verdict.message is not None:
            if verdict.error:
                raise ScriptError(path, ddl_line, verdict.message)
            self.warnings.append(f"{path}:{ddl_line}: warning: {verdict.message}")
        if not verdict.implicit:
            plan = plain
        if len(vt.attrs) != len(plan.schema):
            raise ScriptError(
                path,
                ddl_line,
                f"vtable '{vt.name}' declares {len(vt.attrs)} attributes but "
                f"its vquery (line {step.line}) returns {len(plan.schema)}",
            )
        for a, got in zip(vt.attrs, plan.schema):
            try:
                want = resolve_type(a.type)
            except CqlError as e:
                raise self._err(e, ddl_line, step.ddl_col) from None
            if got.type.kind != "null" and _type_kind_group(want.kind) != _type_kind_group(got.type.kind):
                raise ScriptError(
                    path,
                    ddl_line,
                    f"vtable '{vt.name}' declares {a.name} {want} but its "
                    f"vquery (line {step.line}) gives {got.name} {got.type}",
                )
        rv = ast.RegisterView(vt.name, tuple(a.name for a in vt.attrs), q, pos=vt.pos)
        try:
            # `plan` is the analysis of `q` against this catalog with those options (made above)
            ddl.register_view(
                self.catalog, rv, step.text, options=None if verdict.implicit else _NO_IMPLICIT, analyzed=plan
            )
        except CqlError as e:
            raise self._err(e, ddl_line, step.ddl_col) from None

    def _query(self, step: Step) -> None:
        h: QueryHandle | CompiledQuery
        try:
            if self.dsms is not None:
                h = self.dsms.register_query(step.text, approximate=self.approximate)
            elif self.check_only:
                analyze(
                    parse_query(step.text),
                    self.catalog,
                    text=step.text,
                    options=AnalyzeOptions(stream_compat=self.compat),
                )
                return
            else:
                h = compile_query(step.text, self.catalog, options=AnalyzeOptions(stream_compat=self.compat))
        except CqlError as e:
            raise self._err(e, step.line, step.col) from None
        self.queries.append((step, h))


__all__ = ["KEYWORDS", "QueryDecl", "Script", "ScriptError", "Step", "TableDecl", "ViewDecl", "parse_script"]
