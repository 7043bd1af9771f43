"""The catalog: registered streams, relations and views, looked up case-insensitively.

A source definition carries what the engine needs to accept input (time unit, slack, timestamp
mode) and what rewrites may use (keys, static relations, CIDR §2.2).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from cqlstream.cql import ast
from cqlstream.cql import types as T
from cqlstream.cql.errors import CqlError
from cqlstream.cql.functions import FunctionRegistry
from cqlstream.cql.logical.expr import ColRef
from cqlstream.cql.logical.nodes import Attribute, Plan, Project, RelationSource, StreamSource

# Time units and their length in milliseconds.
UNIT_MS = {"millisecond": 1, "second": 1000, "minute": 60_000, "hour": 3_600_000, "day": 86_400_000}


@dataclass(frozen=True)
class SourceDef:
    """A registered stream or relation."""

    name: str
    kind: str  # 'stream' | 'relation'
    attrs: tuple[Attribute, ...]
    keys: tuple[tuple[str, ...], ...] = ()
    static: bool = False
    time_unit: str = "second"
    slack: int = 0
    timestamp: str = "application"  # or 'system': the server stamps arrivals

    def plan(self) -> Plan:
        attrs = tuple(Attribute(a.name, a.type, self.name) for a in self.attrs)
        if self.kind == "stream":
            return StreamSource(self.name, attrs, self.time_unit)
        return RelationSource(self.name, attrs, self.static)


@dataclass(frozen=True)
class ViewDef:
    """A named query; its logical plan is inlined where the view is read."""

    name: str
    query: ast.Query
    plan: Plan = field(compare=False)

    @property
    def kind(self) -> str:
        return "stream" if self.plan.is_stream else "relation"

    @property
    def attrs(self) -> tuple[Attribute, ...]:
        return self.plan.schema


# option name → (validator returning the normalized value or raising ValueError, description)
def _unit(v):
    from cqlstream.cql.parser import _UNIT_CANON

    canon = _UNIT_CANON.get(str(v).lower())
    if canon is None:
        raise ValueError("expected millisecond, second, minute, hour or day")
    return canon


def _nonneg_int(v):
    if isinstance(v, bool) or not isinstance(v, int) or v < 0:
        raise ValueError("expected a non-negative integer")
    return v


def _ts_mode(v):
    v = str(v).lower()
    if v not in ("application", "system"):
        raise ValueError("expected 'application' or 'system'")
    return v


_OPTIONS = {
    "unit": ("time_unit", _unit),
    "time_unit": ("time_unit", _unit),
    "slack": ("slack", _nonneg_int),
    "timestamp": ("timestamp", _ts_mode),
}


class Catalog:
    """Streams, relations and views by (case-insensitive) name, plus the function registry."""

    def __init__(self, functions: FunctionRegistry | None = None):
        self._entries: dict[str, SourceDef | ViewDef] = {}
        self.functions = functions or FunctionRegistry()

    def __contains__(self, name: str) -> bool:
        return name.lower() in self._entries

    def get(self, name: str) -> SourceDef | ViewDef | None:
        return self._entries.get(name.lower())

    def names(self) -> list[str]:
        return [e.name for e in self._entries.values()]

    def entries(self) -> list[SourceDef | ViewDef]:
        return list(self._entries.values())

    def drop(self, name: str) -> None:
        self._entries.pop(name.lower(), None)

    def _claim(self, name: str, pos) -> None:
        if name.lower() in self._entries:
            raise CqlError("duplicate_name", f"'{name}' is already registered", pos)

    def register_source(self, stmt: ast.RegisterSource) -> SourceDef:
        self._claim(stmt.name, stmt.pos)
        attrs, seen = [], set()
        for a in stmt.attrs:
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
        opts = {}
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
        d = SourceDef(stmt.name, stmt.kind, tuple(attrs), tuple(stmt.keys), stmt.static, **opts)
        self._entries[stmt.name.lower()] = d
        return d

    def register_view(self, stmt: ast.RegisterView, text: str | None = None) -> ViewDef:
        from cqlstream.cql.analyzer import analyze

        self._claim(stmt.name, stmt.pos)
        plan = analyze(stmt.query, self, text=text).plan
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
        self._entries[stmt.name.lower()] = v
        return v

    def execute_ddl(self, text: str) -> list:
        """Register every statement of a `;`-separated DDL text (streams, relations, views)."""
        from cqlstream.cql.parser import parse_script

        out = []
        for stmt in parse_script(text):
            try:
                if isinstance(stmt, ast.RegisterSource):
                    out.append(self.register_source(stmt))
                elif isinstance(stmt, ast.RegisterView):
                    out.append(self.register_view(stmt, text))
                else:
                    raise CqlError("not_ddl", "expected a register statement, found a query", stmt.pos)
            except CqlError as e:
                raise e.with_text(text) from None
        return out

    @classmethod
    def from_ddl(cls, text: str, functions: FunctionRegistry | None = None) -> Catalog:
        cat = cls(functions)
        cat.execute_ddl(text)
        return cat
