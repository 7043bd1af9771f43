"""The DataFrame's schema against the stream's catalog schema: which Spark column feeds which
field, checked before the streaming query starts (missing and mistyped columns named together)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from pyspark.sql import types as T

from cqlstream.io.decoders import Target
from cqlstream.spark_bridge.errors import SparkSourceError

_INTEGRAL = (T.ByteType, T.ShortType, T.IntegerType, T.LongType)
# engine type kind -> the Spark types that convert to it without loss of meaning
_ACCEPTS: dict[str, tuple[type, ...]] = {
    "int": _INTEGRAL,
    "timestamp": _INTEGRAL,
    "float": (*_INTEGRAL, T.FloatType, T.DoubleType, T.DecimalType),
    "bool": (T.BooleanType,),
    "char": (T.StringType,),
    "varchar": (T.StringType,),
    "byte": (T.StringType,),
}
_TIME = (*_INTEGRAL, T.TimestampType, T.TimestampNTZType)


@dataclass(frozen=True)
class ColumnMap:
    """The Spark column of the event time, of the sign (relations) and of each field, in field order."""

    time: str
    time_is_timestamp: bool
    sign: str | None
    fields: tuple[tuple[str, str], ...]  # (field name, Spark column name)

    def spark_columns(self) -> list[str]:
        return [self.time, *([self.sign] if self.sign else []), *(c for _, c in self.fields)]


def map_columns(
    schema: T.StructType, target: Target, time_column: str, sign_column: str, renames: Mapping[str, str] = {}
) -> ColumnMap:
    """Match `target`'s fields to `schema`'s columns (case-insensitively; `renames` maps a field to a
    column of another name); raise a `SparkSourceError` naming every missing and every mistyped column."""
    by_name = {f.name.lower(): f for f in schema.fields}
    missing: list[str] = []
    mistyped: list[str] = []

    def find(name: str, accepted: tuple[type, ...], want: str) -> str | None:
        f = by_name.get(name.lower())
        if f is None:
            missing.append(name)
            return None
        if not isinstance(f.dataType, accepted):
            mistyped.append(f"{f.name} ({f.dataType.simpleString()}, expected {want})")
        return f.name

    time = find(time_column, _TIME, "an integer or a timestamp")
    sign = find(sign_column, (*_INTEGRAL,), "+1/-1 integers") if target.relation else None
    low = {f.lower(): col for f, col in renames.items()}
    fields = tuple(
        (c, find(low.get(c.lower(), c), _ACCEPTS.get(k, (T.StringType,)), k) or c) for c, k in target.columns
    )
    if missing or mistyped:
        parts = []
        if missing:
            parts.append("missing column(s): " + ", ".join(missing))
        if mistyped:
            parts.append("mistyped column(s): " + ", ".join(mistyped))
        have = ", ".join(f"{f.name} {f.dataType.simpleString()}" for f in schema.fields)
        raise SparkSourceError(
            f"the DataFrame cannot feed '{target.name}': " + "; ".join(parts) + f" (the DataFrame has: {have})",
            tuple(missing),
            tuple(mistyped),
        )
    assert time is not None
    time_is_ts = isinstance(by_name[time.lower()].dataType, (T.TimestampType, T.TimestampNTZType))
    return ColumnMap(time, time_is_ts, sign, fields)


# engine type kind -> the Spark type a file source reads it as
_SPARK_TYPE = {"int": "BIGINT", "timestamp": "BIGINT", "float": "DOUBLE", "bool": "BOOLEAN"}


def ddl_for(target: Target, time_column: str, sign_column: str, renames: Mapping[str, str] = {}) -> str:
    """The Spark schema (DDL) a file of rows for `target` is read with: the event time as BIGINT,
    the sign for relations, each field by its engine type (text as STRING)."""
    low = {f.lower(): col for f, col in renames.items()}
    cols = [f"`{time_column}` BIGINT"] + ([f"`{sign_column}` INT"] if target.relation else [])
    cols += [f"`{low.get(c.lower(), c)}` {_SPARK_TYPE.get(k, 'STRING')}" for c, k in target.columns]
    return ", ".join(cols)
