"""The bloom mode of EXCEPT and INTERSECT (bag and DISTINCT): the right input is kept as a
counting Bloom filter of `summary_bytes` one-byte counters instead of a table of its values; the
left input stays exact.

Why counting: the right side is a relation and takes deletes (a window expiring, a relation
updated). A plain Bloom filter cannot forget, so after a delete it would go on removing (except)
or admitting (intersect) left tuples for ever. A counting filter subtracts the delete, and its
least counter over a value's probes is an estimate `r̂` of the value's right multiplicity that is
never below the true `r` (collisions only add; saturated counters stick at 255). The output
multiplicity of a value is the operator's function of (left count, r̂) instead of (left, r):

    except              max(0, l − r̂) ≤ max(0, l − r)      a sub-bag: rows wrongly removed
    except distinct     l > 0 and r̂ = 0  ⇒  l > 0 and r = 0  a subset
    intersect           min(l, r̂) ≥ min(l, r), ≤ l          a super-bag within the left input
    intersect distinct  l > 0 and r̂ > 0  ⇐  l > 0 and r > 0  a superset

so EXCEPT's errors are false negatives only and INTERSECT's false positives only, at every
instant. `r̂` of a value is read at the end of each instant in which the value changes on either
side (the filter then holds exactly that instant's right input, so results do not depend on
batching) and kept with the value's left count while the value is live on the left; another
value's insert can raise a value's counters later without it being re-read, which leaves the kept
`r̂` ≥ `r` still (its `r` has not changed). State: the exact left values plus `summary_bytes`.

The control table reports the filter's false-positive rate now and the rows estimated to be wrong:
the left rows whose value reads r̂ = 0 are certainly without a right partner; the values without
one that the filter hits instead are, per value, a fraction fp of all those without one, so about
rows(r̂ = 0) · fp / (1 − fp) rows are wrong (removed by except, kept by intersect).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from cqlstream.engine.batch import Batch
from cqlstream.engine.operators.valuecount import Changes, ValueTable
from cqlstream.engine.summaries.counting_bloom import CountingBloom
from cqlstream.engine.summaries.hashing import row_hash

BITS_PER_VALUE = 8  # counters per expected distinct right value, sets the probe count (k ≈ 5.5)
WRONG_KIND = {"except": "removed", "intersect": "kept"}


def instant_bounds(ts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Start and end offsets of each run of equal ts (ts non-decreasing)."""
    cut = np.flatnonzero(ts[1:] != ts[:-1]) + 1
    return np.concatenate([[0], cut]), np.concatenate([cut, [len(ts)]])


class BloomSetOp:
    """Except / intersect with the right side in a counting Bloom filter (module docstring)."""

    def __init__(self, op: str, nbytes: int) -> None:
        self.op = op
        self.filter = CountingBloom(nbytes, expected=max(1, nbytes // BITS_PER_VALUE))
        self.right_rows = 0  # right deltas applied to the filter

    def nbytes(self) -> int:
        return self.filter.nbytes()

    def estimates(self, b: Batch, right: np.ndarray) -> np.ndarray:
        """Per row of the ts-sorted merged batch: r̂ of its value at the end of its instant."""
        h = row_hash(b.cols, b.nulls)
        est = np.zeros(len(b), np.int64)
        f = self.filter
        for a, e in zip(*instant_bounds(b.ts)):
            r = right[a:e]
            if r.any():
                f.update(h[a:e][r], b.sign[a:e][r])
            est[a:e] = f.estimate(h[a:e])
        self.right_rows += int(right.sum())
        return est

    def changes(self, t: ValueTable, b: Batch, right: np.ndarray, enc: Any) -> Changes:
        """Per (value, instant): (left count, kept r̂) before and after. Side 0 of the table counts
        the left input; side 1 holds r̂, re-read for each value the instant touches (0 while the
        value is not live on the left, so right-only values leave no state)."""
        est = self.estimates(b, right)
        deltas = np.zeros((2, len(b)), np.int64)
        deltas[0] = np.where(right, 0, b.sign)
        ch = t.changes(enc, b.ts, deltas)
        new1 = np.where(ch.after[0] > 0, est[ch.first], 0)
        before1 = ch.before[1].copy()  # the kept r̂ for each value's first group
        later = ~ch.slot_start
        before1[1:][later[1:]] = new1[:-1][later[1:]]
        ch.before[1] = before1
        ch.after[1] = new1
        t.count[1, ch.slot[ch.slot_end]] = new1[ch.slot_end]
        return ch

    def counters(self, t: ValueTable) -> dict[str, Any]:
        fp = self.filter.fp_rate()
        left, rhat = t.count[0], t.count[1]
        clear = int(left[(left > 0) & (rhat == 0)].sum())
        return {
            "summary_fp_rate": round(fp, 9),
            "summary_est_wrong_rows": round(clear * fp / (1.0 - fp), 3) if fp < 1 else float(left.sum()),
            "summary_wrong_kind": WRONG_KIND[self.op],
            "summary_saturated_counters": self.filter.saturated,
        }

    def info(self, t: ValueTable) -> dict[str, Any]:
        """What the query reply and EXPLAIN say about this operator's summary."""
        c = self.counters(t)
        return {
            "summary": "bloom",
            "state": f"counting Bloom filter of the right input, {self.nbytes()} B, k={self.filter.k}",
            "fp_rate": c["summary_fp_rate"],
            "est_wrong_rows": c["summary_est_wrong_rows"],
            "wrong_kind": c["summary_wrong_kind"],
            "bound": "sub-bag of the exact result" if self.op == "except" else "super-bag of the exact result",
        }


def setop_summaries(op: str) -> tuple[str, ...]:
    """The summary modes a set operation allows: bloom for except and intersect only (a union
    has no right side to summarize)."""
    return ("exact", "bloom") if op in WRONG_KIND else ("exact",)
