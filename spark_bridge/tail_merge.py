"""The global tail of a distributed run: the partitions' partial aggregates merged into the query's
answer (cql/logical/partial_aggregates.py splits the query).

Every partition (a key bucket) gives, for each instant below the watermark, the changes of its
partial-aggregate relation, and all partitions give an instant in the same micro-batch. The merge
pushes a micro-batch's changes into the relation `Partials` of one engine running the tail query,
marks the time through the batch's last instant, and returns the elements that became final: the
query's relation (or stream) deltas, instant by instant. No Spark here: spark_bridge/scale_out.py
calls it from `foreachBatch` on the driver and keeps its state beside Spark's checkpoint
(`TailState`), one file per micro-batch, so a replayed batch starts from the state before it.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import numpy as np
import pyarrow as pa

from cqlstream.cql.logical.partial_aggregates import PARTIALS
from cqlstream.engine.batch import Batch
from cqlstream.spark_bridge.keyed_engine import GroupEngine, QuerySpec


def tail_spec(partials_ddl: str, tail: str, compat: bool) -> QuerySpec:
    """The engine of the merge: the tail query over the declared `Partials` relation."""
    return QuerySpec(partials_ddl, tail, (PARTIALS,), compat)


class TailMerge:
    """One engine over `Partials`: `merge` a micro-batch's partial changes, get the final results."""

    def __init__(self, spec: QuerySpec, engine: GroupEngine | None = None) -> None:
        self.engine = engine or GroupEngine(spec)

    def merge(self, partials: pa.Table) -> Batch:
        """`partials`: columns ts, sign and the partial relation's, every change of the instants it
        holds (in any order). Within an instant inserts go before deletes, so a partition's
        `−old, +new` never empties a group (or the global aggregate's one row) in between."""
        if partials.num_rows:
            ts = np.asarray(partials.column("ts").to_numpy(), np.int64)
            sign = np.asarray(partials.column("sign").to_numpy(), np.int64)
            order = np.lexsort((-sign, ts))
            self.engine.push(PARTIALS, partials.take(pa.array(order)))
            self.engine.advance(int(ts.max()) + 1)  # every change through the last instant is here
        return self.engine.drain()


def partials_table(batch: Batch, names: list[str]) -> pa.Table:
    """A result batch of the prefix as the Arrow table `merge` takes (ts, sign, named columns)."""
    cols = {"ts": pa.array(batch.ts, pa.int64()), "sign": pa.array(batch.sign.astype(np.int32))}
    for name, col, nulls in zip(names, batch.cols, batch.nulls):
        cols[name] = pa.array(col, mask=nulls)
    return pa.table(cols)


class TailState:
    """The merge engine's bytes after each micro-batch, as files `<batch id>.engine` in `folder`:
    batch b starts from the newest file of a batch before b (a batch Spark replays after a failure
    or restart recomputes from the same state), older files are removed once b's is written."""

    _NAME = re.compile(r"^(\d{12})\.engine$")

    def __init__(self, folder: str | os.PathLike[str]) -> None:
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)

    def _batches(self) -> list[int]:
        return sorted(int(m.group(1)) for p in self.folder.iterdir() if (m := self._NAME.match(p.name)))

    def load(self, batch_id: int, spec: QuerySpec) -> TailMerge:
        before = [b for b in self._batches() if b < batch_id]
        if not before:
            return TailMerge(spec)
        return TailMerge(spec, GroupEngine.loads((self.folder / f"{before[-1]:012d}.engine").read_bytes()))

    def save(self, batch_id: int, merge: TailMerge) -> None:
        path = self.folder / f"{batch_id:012d}.engine"
        tmp = path.with_suffix(".tmp")
        tmp.write_bytes(merge.engine.dumps())
        os.replace(tmp, path)  # atomic: a crash leaves the previous state or this one, whole
        older = [b for b in self._batches() if b < batch_id]
        for b in older[:-1]:  # keep the state before this batch too: this batch may be replayed
            (self.folder / f"{b:012d}.engine").unlink(missing_ok=True)
