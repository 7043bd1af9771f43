"""The approximation knobs `summary` and `summary_bytes` (shared by Distinct, the set operations
and the window join) and Distinct's bloom mode. For Distinct, `summary` = exact (the value table,
the default) or bloom (a Bloom filter of `summary_bytes`), traded against precision when exact
state does not fit.

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

    def info(self) -> dict[str, Any]:
        """What the query reply and EXPLAIN say about this operator's summary."""
        return {
            "summary": "bloom",
            "state": f"Bloom filter of the values seen, {self.nbytes()} B, k={self.filter.k}",
            "fp_rate": round(self.filter.fp_rate(), 9),
            "est_wrong_rows": round(self.est_false_negatives(), 3),
            "wrong_kind": "dropped",
            "bound": "subset of the exact result (insert-only input)",
        }

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
    allowed = op.summaries()
    if v not in allowed:
        raise KnobError(f"summary must be one of {list(allowed)} for {op.kind}, got {v!r}")
    if v != op.summary:
        _before_data(op)
    op.summary = v
    op.summary_changed()


def _set_summary_bytes(op: Any, v: object) -> None:
    if isinstance(v, bool) or not isinstance(v, int) or v < 8:
        raise KnobError(f"summary_bytes must be an integer of at least 8, got {v!r}")
    if v != op.summary_bytes:
        _before_data(op)
    op.summary_bytes = v
    op.summary_changed()


# An operator with these knobs has `summary`, `summary_bytes`, `summaries()` (the modes it
# allows, "exact" first) and `summary_changed()` (builds the summary state for the new setting).
SUMMARY_KNOBS = (
    K.Knob("summary", lambda op: op.summary, _set_summary),
    K.Knob("summary_bytes", lambda op: op.summary_bytes, _set_summary_bytes),
)


def summary_line(info: dict[str, Any]) -> str:
    """One EXPLAIN line for an operator's summary in force."""
    rest = ", ".join(f"{k} {v}" for k, v in info.items() if k not in ("summary", "state", "operator", "kind"))
    return f"summary {info['summary']}: {info['state']}" + (f"; {rest}" if rest else "")


def query_summaries(pnode: Any) -> list[dict[str, Any]]:
    """The summaries in force under a query's plan node: one entry per operator not exact, with
    its entity id and kind (operators say so through `summary_info()`)."""
    out, todo, seen = [], [pnode], set()
    while todo:
        p = todo.pop()
        if p is None or id(p) in seen:
            continue
        seen.add(id(p))
        info = getattr(p.op, "summary_info", lambda: None)()
        if info is not None:
            out.append({"operator": p.op.eid, "kind": p.op.kind, **info})
        todo.extend(p.inputs)
    return sorted(out, key=lambda i: str(i["operator"]))


def explain_lines(pnode: Any) -> list[str]:
    """The `Summaries:` section of a query's EXPLAIN (nothing when every operator is exact)."""
    infos = query_summaries(pnode)
    return ["Summaries:"] + [f"  - {i['operator']} {i['kind']}: {summary_line(i)}" for i in infos] if infos else []
