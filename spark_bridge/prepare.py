"""One micro-batch made ready for a stream: Spark's columns renamed to the stream's push fields,
event times as the stream's ticks, rows sorted by event time (numpy), and the heartbeat Spark's
watermark rule gives. The same for every sink (in process or over HTTP)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from cqlstream.io.decoders import Target
from cqlstream.spark_bridge.errors import SparkSourceError

if TYPE_CHECKING:
    from cqlstream.spark_bridge.schema import ColumnMap  # imports pyspark


@dataclass(frozen=True)
class Prepared:
    """A micro-batch in the stream's push shape (`ts`, [`sign`], fields; ts ascending) and the time
    the stream may advance to after it (`mark`: max event time − watermark delay; None when empty)."""

    batch_id: int
    table: pa.Table
    mark: int | None

    @property
    def rows(self) -> int:
        return int(self.table.num_rows)


def prepare(batch_id: int, table: pa.Table, cols: ColumnMap, target: Target, tick_micros: int, delay: int) -> Prepared:
    """Rename, convert event time, sort: `table` holds the Spark columns `cols` names."""
    ticks = _ticks(table.column(cols.time), cols.time, tick_micros)
    order = np.argsort(ticks, kind="stable")
    ticks = ticks[order]
    idx = pa.array(order)
    data = {target.ts_field: pa.array(ticks, pa.int64())}
    if cols.sign is not None:
        data[target.sign_field] = table.column(cols.sign).take(idx)
    for field, col in cols.fields:
        data[field] = table.column(col).take(idx)
    mark = int(ticks[-1]) - delay if len(ticks) else None
    return Prepared(batch_id, pa.table(data), mark)


def _ticks(column: pa.ChunkedArray, name: str, tick_micros: int) -> np.ndarray:
    """Event times as int64 ticks: Spark TIMESTAMPs floored to the tick, integers as they are."""
    arr = column.combine_chunks()
    if arr.null_count:
        raise SparkSourceError(f"column '{name}' has a null event time (row {_first_null(arr)} of the batch)")
    if pa.types.is_timestamp(arr.type):
        micros = pc.cast(arr, pa.timestamp("us", arr.type.tz)).cast(pa.int64()).to_numpy()
        return np.asarray(micros // tick_micros, np.int64)
    return np.asarray(pc.cast(arr, pa.int64()).to_numpy(), np.int64)


def _first_null(arr: pa.Array) -> int:
    return int(np.argmax(~np.asarray(arr.is_valid().to_numpy(zero_copy_only=False), bool)))
