"""The catalog: registered streams, relations and views, looked up case-insensitively.

A plain store of checked definitions; registering them from DDL statements (which needs the
analyzer, for views) is cql/ddl.py. A source definition carries what the engine needs to accept
input (time unit, slack, timestamp mode) and what rewrites may use (keys, static relations, CIDR §2.2).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from cqlstream.cql import ast
from cqlstream.cql.errors import CqlError, Pos
from cqlstream.cql.functions import FunctionRegistry
from cqlstream.cql.logical.nodes import Attribute, Plan, RelationSource, StreamSource

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
    constraints: tuple[ast.ConstraintDef, ...] = ()  # declared k-constraints (docs/k-constraints.md)

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


class Catalog:
    """Streams, relations and views by (case-insensitive) name, plus the function registry."""

    def __init__(self, functions: FunctionRegistry | None = None) -> None:
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

    def claim(self, name: str, pos: Pos | None = None) -> None:
        """Refuse a name that is registered already (CqlError `duplicate_name`)."""
        if name.lower() in self._entries:
            raise CqlError("duplicate_name", f"'{name}' is already registered", pos)

    def add(self, entry: SourceDef | ViewDef) -> None:
        """Store a checked definition under its (case-insensitive) name."""
        self._entries[entry.name.lower()] = entry
