"""DDL execution: check `register stream|relation|view` statements and store their definitions in
a catalog. Views are analyzed here (their plan is what readers inline), so this module, not the
catalog, depends on the analyzer — imported by the first view registered: `cqlstream run` reads its
sources' `register` statements before the rest of the compiler is loaded (io/early_readers.py)."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from cqlstream.cql import ast
from cqlstream.cql import types as T
from cqlstream.cql.catalog import Catalog, SourceDef, ViewDef
from cqlstream.cql.errors import CqlError, Pos
from cqlstream.cql.functions import FunctionRegistry
from cqlstream.cql.logical.expr import ColRef
from cqlstream.cql.logical.nodes import Attribute, Plan, Project
from cqlstream.cql.parser import _UNIT_CANON, parse_script

if TYPE_CHECKING:
    from cqlstream.cql.analyzer import AnalyzeOptions


# option name → (SourceDef field, validator returning the normalized value or raising ValueError)
def _unit(v: object) -> str:
    canon = _UNIT_CANON.get(str(v).lower())
    if canon is None:
        raise ValueError("expected millisecond, second, minute, hour or day")
    return canon


def _nonneg_int(v: object) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or v < 0:
        raise ValueError("expected a non-negative integer")
    return v


def _ts_mode(v: object) -> str:
    mode = str(v).lower()
    if mode not in ("application", "system"):
        raise ValueError("expected 'application' or 'system'")
    return mode


_OPTIONS = {
    "unit": ("time_unit", _unit),
    "time_unit": ("time_unit", _unit),
    "slack": ("slack", _nonneg_int),
    "timestamp": ("timestamp", _ts_mode),
}


# what a registered name may be: it appears in URL paths, CSV headers and HTTP replies, so a name
# quoted with backticks may spell a keyword (`select`) but not carry spaces, slashes or line breaks
_PLAIN_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def check_name(name: str, what: str, pos: Pos | None) -> None:
    """Refuse a stream, relation, view or column name that is not a plain identifier."""
    if not _PLAIN_NAME.fullmatch(name):
        raise CqlError(
            "bad_name",
            f"{what} name {name!r} is not usable: a registered name is a letter or '_' followed by "
            "letters, digits or '_'",
            pos,
        )


# the k-constraint words of `with constraints (...)`: word → whether it takes an adherence k
CONSTRAINT_KINDS = {"unique": False, "clustered": True, "ordered": True, "references": True}


def check_constraints(stmt: ast.RegisterSource, columns: set[str]) -> None:
    """Refuse an unknown constraint word, a k on `unique`, or a column the stream does not have."""
    if stmt.constraints and stmt.kind != "stream":
        raise CqlError("bad_constraint", "k-constraints describe stream arrivals: only streams take them", stmt.pos)
    for c in stmt.constraints:
        if c.kind not in CONSTRAINT_KINDS:
            known = ", ".join(CONSTRAINT_KINDS)
            raise CqlError("bad_constraint", f"unknown constraint '{c.kind}' (known: {known})", c.pos or stmt.pos)
        if c.k and not CONSTRAINT_KINDS[c.kind]:
            raise CqlError("bad_constraint", f"'{c.kind}' takes no adherence parameter", c.pos or stmt.pos)
        if c.column.lower() not in columns:
            raise CqlError(
                "unknown_column", f"constraint column '{c.column}' is not a column of '{stmt.name}'", c.pos or stmt.pos
            )


def register_source(catalog: Catalog, stmt: ast.RegisterSource) -> SourceDef:
    """Check a `register stream|relation` statement and add the source to the catalog."""
    check_name(stmt.name, stmt.kind, stmt.pos)
    catalog.claim(stmt.name, stmt.pos)
    attrs, seen = [], set()
    for a in stmt.attrs:
        check_name(a.name, "column", a.pos)
        if a.name.lower() in seen:
            raise CqlError("duplicate_column", f"column '{a.name}' is declared twice", a.pos)
        seen.add(a.name.lower())
        attrs.append(Attribute(a.name, T.resolve(a.type)))
    if not attrs:
        raise CqlError("no_columns", f"{stmt.kind} '{stmt.name}' needs at least one column", stmt.pos)
    for key in stmt.keys:
        for k in key:
            if k.lower() not in seen:
                raise CqlError("unknown_column", f"key column '{k}' is not a column of '{stmt.name}'", stmt.pos)
    if stmt.static and stmt.kind != "relation":
        raise CqlError("bad_static", "only relations can be static", stmt.pos)
    opts: dict[str, Any] = {}  # SourceDef field → its checked value
    for name, value in stmt.options:
        if name not in _OPTIONS:
            raise CqlError("unknown_option", f"unknown option '{name}' (known: unit, slack, timestamp)", stmt.pos)
        field_name, check = _OPTIONS[name]
        if field_name in opts:
            raise CqlError("duplicate_option", f"option '{name}' is given twice", stmt.pos)
        try:
            opts[field_name] = check(value)
        except ValueError as e:
            raise CqlError("bad_option", f"option '{name}': {e}", stmt.pos) from None
    if stmt.kind == "relation" and ("slack" in opts or "timestamp" in opts):
        raise CqlError("bad_option", "slack and timestamp options apply to streams only", stmt.pos)
    check_constraints(stmt, seen)
    opts["constraints"] = stmt.constraints
    d = SourceDef(stmt.name, stmt.kind, tuple(attrs), tuple(stmt.keys), stmt.static, **opts)
    catalog.add(d)
    return d


def register_view(
    catalog: Catalog,
    stmt: ast.RegisterView,
    text: str | None = None,
    options: AnalyzeOptions | None = None,
    analyzed: Plan | None = None,
) -> ViewDef:
    """Analyze a `register view` statement's query (with `options`) and add the view to the catalog.
    `analyzed`: the query's plan when the caller has just analyzed it against this catalog with
    these options (a STREAM script's vquery is analyzed to choose its reading; not done twice)."""
    check_name(stmt.name, "view", stmt.pos)
    for c in stmt.columns or ():
        check_name(c, "column", stmt.pos)
    catalog.claim(stmt.name, stmt.pos)
    if analyzed is None:
        from cqlstream.cql.analyzer import analyze

        analyzed = analyze(stmt.query, catalog, text=text, options=options).plan
    plan = analyzed
    if stmt.columns is not None:
        if len(stmt.columns) != len(plan.schema):
            raise CqlError(
                "view_width",
                f"view '{stmt.name}' names {len(stmt.columns)} columns but its query returns {len(plan.schema)}",
                stmt.pos,
            )
        if tuple(c.lower() for c in stmt.columns) != tuple(a.name.lower() for a in plan.schema):
            refs = tuple(ColRef(i, a.type, a.name) for i, a in enumerate(plan.schema))
            plan = Project(plan, refs, tuple(stmt.columns))
    seen = set()
    for a in plan.schema:
        if a.name.lower() in seen:
            fix = "rename them with AS or a column list" if stmt.columns is None else "give each a different name"
            raise CqlError(
                "duplicate_column", f"view '{stmt.name}' would have two columns named '{a.name}'; {fix}", stmt.pos
            )
        seen.add(a.name.lower())
    v = ViewDef(stmt.name, stmt.query, plan)
    catalog.add(v)
    return v


def execute_ddl(catalog: Catalog, text: str) -> list[SourceDef | ViewDef]:
    """Register every statement of a `;`-separated DDL text (streams, relations, views)."""
    out: list[SourceDef | ViewDef] = []
    for stmt in parse_script(text):
        try:
            if isinstance(stmt, ast.RegisterSource):
                out.append(register_source(catalog, stmt))
            elif isinstance(stmt, ast.RegisterView):
                out.append(register_view(catalog, stmt, text))
            else:
                raise CqlError("not_ddl", "expected a register statement, found a query", stmt.pos)
        except CqlError as e:
            raise e.with_text(text) from None
    return out


def catalog_from_ddl(text: str, functions: FunctionRegistry | None = None) -> Catalog:
    """A new catalog holding what a DDL text registers."""
    cat = Catalog(functions)
    execute_ddl(cat, text)
    return cat
