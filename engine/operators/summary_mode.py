"""The approximation knob of Distinct: `summary` = exact (the value table, the default) or
bloom (a Bloom filter of `summary_bytes`), traded against precision when exact state does not fit.

In bloom mode a value is emitted the first time the filter has not seen it; a false positive of
the filter drops a new value (a false negative of the result), never adds one. A filter cannot
forget, so deletes of the input are ignored (and counted): use it over insert-only inputs (a
stream under an unbounded window). The control table shows the filter's estimated
false-positive rate now and the estimated number of values it dropped so far.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from cqlstream.engine import knobs as K
from cqlstream.engine.batch import Batch
from cqlstream.engine.errors import KnobError
from cqlstream.engine.summaries.bloom import BloomFilter
from cqlstream.engine.summaries.hashing import row_hash

SUMMARIES = ("exact", "bloom")
DEFAULT_BYTES = 1 << 20
BITS_PER_VALUE = 10  # the filter's probe count assumes about this many bits per distinct value


class BloomDistinct:
    """Distinct over a Bloom filter: the insert-only path, vectorized per batch."""

    def __init__(self, nbytes: int) -> None:
        self.filter = BloomFilter(nbytes, expected=max(1, 8 * nbytes // BITS_PER_VALUE))
        self.ignored_deletes = 0
        self.inserts = 0
        self.emitted = 0

    def nbytes(self) -> int:
        return self.filter.nbytes()

    def process(self, b: Batch, take_ids: Any) -> Batch:
        ins = b.sign > 0
        self.ignored_deletes += int(len(b) - ins.sum())
        if not ins.all():
            b = b.take(np.flatnonzero(ins))
        new = ~self.filter.test_and_add(row_hash(b.cols, b.nulls))
        n_new = int(new.sum())
        self.inserts += len(b)
        self.emitted += n_new
        out = b.take(np.flatnonzero(new))
        out.sign = np.ones(n_new, np.int8)
        out.id = take_ids(n_new)
        return out

    def est_false_negatives(self) -> float:
        """Distinct values offered (estimated from the filter's fill, as every value's bits are
        set whether it was emitted or not; at most the inserts seen) less those emitted."""
        f = self.filter
        x = f.fill_ratio()
        offered = float(self.inserts) if x >= 1 else min(self.inserts, -f.m / f.k * np.log1p(-x))
        return max(0.0, offered - self.emitted)

    def counters(self) -> dict[str, float]:
        return {
            "summary_fp_rate": round(self.filter.fp_rate(), 9),
            "summary_est_false_negatives": round(self.est_false_negatives(), 3),
            "summary_false_positives": 0,  # a dropped value never comes back as a wrong one
            "summary_ignored_deletes": self.ignored_deletes,
        }


def _before_data(op: Any) -> None:
    if op.counters.tuples_in:
        raise KnobError("summary and summary_bytes can be set only before the operator has seen data")


def _set_summary(op: Any, v: object) -> None:
    if v not in SUMMARIES:
        raise KnobError(f"summary must be one of {list(SUMMARIES)}, got {v!r}")
    if v != op.summary:
        _before_data(op)
    op.summary = v
    op.bloom = BloomDistinct(op.summary_bytes) if v == "bloom" else None


def _set_summary_bytes(op: Any, v: object) -> None:
    if isinstance(v, bool) or not isinstance(v, int) or v < 8:
        raise KnobError(f"summary_bytes must be an integer of at least 8, got {v!r}")
    if v != op.summary_bytes:
        _before_data(op)
    op.summary_bytes = v
    if op.summary == "bloom":
        op.bloom = BloomDistinct(v)


SUMMARY_KNOBS = (
    K.Knob("summary", lambda op: op.summary, _set_summary),
    K.Knob("summary_bytes", lambda op: op.summary_bytes, _set_summary_bytes),
)
