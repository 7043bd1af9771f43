"""CQL data types: a small closed set, resolved from type names, with SQL-style promotion rules."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from cqlstream.cql.errors import CqlError

if TYPE_CHECKING:  # annotations only: the AST module costs ~50 ms to import (writer process, batches)
    from cqlstream.cql import ast


@dataclass(frozen=True)
class DataType:
    """`kind` is one of int, float, byte, char, varchar, bool, timestamp, null."""

    kind: str
    length: int | None = None

    def __str__(self) -> str:
        name = _DISPLAY[self.kind]
        return f"{name}({self.length})" if self.length is not None else name

    @property
    def numeric(self) -> bool:
        return self.kind in ("int", "float", "timestamp", "null")

    @property
    def textual(self) -> bool:
        return self.kind in ("char", "varchar", "byte", "null")


_DISPLAY = {
    "int": "INTEGER",
    "float": "FLOAT",
    "byte": "BYTE",
    "char": "CHAR",
    "varchar": "VARCHAR",
    "bool": "BOOLEAN",
    "timestamp": "TIMESTAMP",
    "null": "NULL",
}

INT = DataType("int")
FLOAT = DataType("float")
BYTE = DataType("byte")
BOOL = DataType("bool")
TIMESTAMP = DataType("timestamp")
NULL = DataType("null")
VARCHAR = DataType("varchar")

# Type names as users write them → (kind, whether a length is allowed / required).
_NAMES = {
    "integer": ("int", "none"),
    "int": ("int", "none"),
    "bigint": ("int", "none"),
    "float": ("float", "none"),
    "real": ("float", "none"),
    "double": ("float", "none"),
    "byte": ("byte", "none"),
    "char": ("char", "required"),
    "varchar": ("varchar", "optional"),
    "string": ("varchar", "none"),
    "text": ("varchar", "none"),
    "boolean": ("bool", "none"),
    "bool": ("bool", "none"),
    "timestamp": ("timestamp", "none"),
}


def resolve(name: ast.TypeName) -> DataType:
    """Type name as written → DataType, or a CqlError naming the type."""
    entry = _NAMES.get(name.name.lower())
    if entry is None:
        known = "integer, float, byte, char(n), varchar(n), string, boolean, timestamp"
        raise CqlError("unknown_type", f"unknown type '{name.name}' (known: {known})", name.pos)
    kind, length_rule = entry
    if length_rule == "none" and name.length is not None:
        raise CqlError("bad_type", f"type '{name.name}' takes no length", name.pos)
    if length_rule == "required" and name.length is None:
        raise CqlError("bad_type", f"type '{name.name}' needs a length, e.g. {name.name}(16)", name.pos)
    if name.length is not None and name.length <= 0:
        raise CqlError("bad_type", f"length of '{name.name}' must be positive", name.pos)
    return DataType(kind, name.length)


def comparable(a: DataType, b: DataType) -> bool:
    """Whether `a <op> b` is well typed (NULL compares with anything)."""
    if a.kind == "null" or b.kind == "null":
        return True
    if a.numeric and b.numeric:
        return True
    if a.textual and b.textual:
        return True
    return a.kind == b.kind


def arithmetic(a: DataType, b: DataType) -> DataType | None:
    """Result type of + - * / % on numbers, None if not numeric (int op int stays int)."""
    if not (a.numeric and b.numeric):
        return None
    if "float" in (a.kind, b.kind):
        return FLOAT
    if "null" in (a.kind, b.kind):
        return b if a.kind == "null" else a
    return INT


def common(a: DataType, b: DataType) -> DataType | None:
    """The type both can be widened to (CASE branches, COALESCE, UNION columns), None if none."""
    if a == b:
        return a
    if a.kind == "null":
        return b
    if b.kind == "null":
        return a
    if a.numeric and b.numeric:
        return arithmetic(a, b)
    if a.textual and b.textual:
        return VARCHAR
    return None


def kind_of_name(text: str) -> str:
    """The kind of a type as written or displayed (`INTEGER`, `char(8)`, `float`): what a client
    that reads a schema over the API needs to decode values; unknown names raise KeyError."""
    name = text.split("(", 1)[0].strip().lower()
    if name in _NAMES:
        return _NAMES[name][0]
    return {v.lower(): k for k, v in _DISPLAY.items()}[name]
