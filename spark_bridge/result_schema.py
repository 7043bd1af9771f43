"""The Spark schema of a query's results: `ts` (long), `sign` (int, +1/-1), then the query's output
columns, each engine type mapped to the Spark type its NDJSON values convert to without loss."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from pyspark.sql import types as T
from pyspark.sql.pandas.types import to_arrow_schema

if TYPE_CHECKING:
    import pyarrow as pa

# engine type name (as the server spells it, without a length) -> Spark type of its values
_SPARK_TYPES: dict[str, T.DataType] = {
    "INTEGER": T.LongType(),  # the engine's integers are 64-bit
    "FLOAT": T.DoubleType(),
    "TIMESTAMP": T.LongType(),  # event-time ticks in the source's time unit, not wall-clock instants
    "BOOLEAN": T.BooleanType(),
    "CHAR": T.StringType(),
    "VARCHAR": T.StringType(),
    "BYTE": T.StringType(),
    "NULL": T.StringType(),  # a column of NULL literals: always null (Parquet has no void type)
}


def spark_type(engine_type: str) -> T.DataType:
    """The Spark type of an engine type name such as `INTEGER` or `CHAR(8)`; a ValueError names an unknown one."""
    base = engine_type.split("(", 1)[0].strip().upper()
    found = _SPARK_TYPES.get(base)
    if found is None:
        raise ValueError(f"no Spark type for the engine type '{engine_type}' (known: {', '.join(_SPARK_TYPES)})")
    return found


def results_schema(
    columns: Sequence[tuple[str, str]], ts_column: str = "ts", sign_column: str = "sign"
) -> T.StructType:
    """`ts`, `sign`, then one field per (name, engine type) of the query's output. A query column
    named like the time or sign column is refused: the ValueError says which option renames ours."""
    taken = {ts_column.lower(): "tsColumn", sign_column.lower(): "signColumn"}
    for name, _ in columns:
        if name.lower() in taken:
            raise ValueError(
                f"the query has a column named '{name}', like the results' {taken[name.lower()][:-6]} column: "
                f"set the option '{taken[name.lower()]}' to another name"
            )
    fields = [T.StructField(ts_column, T.LongType(), False), T.StructField(sign_column, T.IntegerType(), False)]
    fields += [T.StructField(name, spark_type(t), True) for name, t in columns]
    return T.StructType(fields)


def arrow_schema(schema: T.StructType, columns: Sequence[tuple[str, str]]) -> pa.Schema:
    """The Arrow schema of the record batches handed to Spark for `schema` (the one Spark planned
    with: ours, or one the user gave), which must have a field per result column, time and sign included."""
    if len(schema.fields) != len(columns) + 2:
        raise ValueError(
            f"the schema has {len(schema.fields)} columns; the results have {len(columns) + 2} "
            f"(time, sign, {', '.join(n for n, _ in columns)})"
        )
    return to_arrow_schema(schema, timezone="UTC")  # exactly what Spark checks the batches against
