"""What the synopsis operators (join and aggregate) share about their inputs: the columns each
stream contributes, its tuples as an int64 matrix for the synopses, and the per-stream listing of
the control table."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from cqlstream.engine.batch import Batch
from cqlstream.engine.bounded_synopsis import SynopsisJoin


def columns_by_stream(
    names: Sequence[str], streams: Iterable[str], columns: Iterable[Iterable[int]]
) -> list[list[int]]:
    """Per input (by stream name), the sorted union of the columns its occurrences read."""
    wanted: dict[str, set[int]] = {}
    for stream, cols in zip(streams, columns):
        wanted.setdefault(stream, set()).update(cols)
    return [sorted(wanted.get(n, ())) for n in names]


def int_matrix(b: Batch, read: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
    """The batch as an int64 matrix of the stream's width (unread columns zero) and the mask of
    rows without a NULL in a read column (such a row never joins)."""
    m = np.zeros((len(b), b.width), dtype=np.int64)
    keep = np.ones(len(b), dtype=bool)
    for c in read:
        m[:, c] = b.cols[c]
        null = b.nulls[c]
        if null is not None:
            keep &= ~null
    return m, keep


def per_stream(join: SynopsisJoin) -> list[dict[str, Any]]:
    """The control table's per-stream entry counts of a synopsis join."""
    return [{"stream": tb.occ.label, "entries": len(tb.keys), "bucketed": tb.bucketed} for tb in join.tables]
