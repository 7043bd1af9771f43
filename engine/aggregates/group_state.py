"""The per-group state of an Aggregate operator: numpy arrays indexed by dense group id.

Per group: its key values (stored once, when the group is first seen), its current output row
(whether it exists, the id it was inserted with, the aggregate values and their NULL flags) and
the running totals of the additive quantities its aggregates read (int64, or a compensated
(hi, lo) float pair). Arrays grow on demand and are renumbered when dead groups are compacted.
A count(x) whose argument was never NULL has the row count's totals: it keeps no array of its
own until a NULL of x comes (`rows_counts`, `unshare`). An aggregate value that is never NULL
(count) has its NULL flags neither written nor read (`null_free`): one gather, one copy, two
comparisons and one scatter less per batch.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import cast

import numpy as np
from numpy.typing import DTypeLike

from cqlstream.engine.aggregates.quantities import ROWS, Quantity, Totals
from cqlstream.engine.batch import Batch

Fill = Callable[[np.ndarray, object], np.ndarray]


def _filled(dt: DTypeLike, fill: object, n: int) -> np.ndarray:
    if dt is object or dt == np.dtype(object):
        a = np.empty(n, object)
        a[:] = ""
        return a
    return np.full(n, fill, dt)


class GroupState:
    """Per-group arrays (see the module docstring); `cap` is their common length."""

    def __init__(
        self,
        key_dtypes: Sequence[DTypeLike],
        out_dtypes: Sequence[DTypeLike],
        quantities: Sequence[Quantity],
        null_free: Sequence[bool] = (),
    ) -> None:
        self.cap = 0
        # per aggregate value: never NULL, so its `out_nulls` entries are stale (not carried) and
        # read as all False (False for all without the argument: every flag carried)
        self.null_free = list(null_free) or [False] * len(out_dtypes)
        self.exists = _filled(np.bool_, False, 0)  # the group has an output row
        self.row_id = _filled(np.uint64, 0, 0)  # the id its output row was inserted with
        self.key_vals = [_filled(dt, 0, 0) for dt in key_dtypes]
        self.key_nulls = [_filled(np.bool_, False, 0) for _ in key_dtypes]
        # per key column: a NULL key value was ever stored (until then its flags need no writes or reads)
        self.null_keys = [False] * len(key_dtypes)
        self.out_vals = [_filled(dt, 0, 0) for dt in out_dtypes]
        self.out_nulls = [_filled(np.bool_, True, 0) for _ in out_dtypes]
        # count(x) (not DISTINCT) while no NULL x was counted: its totals are the row count's, so it
        # has no array here (one gather and one scatter of the carried totals less per batch)
        self.rows_counts = {q for q in quantities if q.measure == "count" and not q.distinct}
        self.totals = {q: _filled(np.int64, 0, 0) for q in quantities if not q.floating and q not in self.rows_counts}
        self.fsum_hi = {q: _filled(np.float64, 0.0, 0) for q in quantities if q.floating}
        self.fsum_lo = {q: _filled(np.float64, 0.0, 0) for q in quantities if q.floating}
        self.ensure(1)

    def _rebuild(self, fn: Fill) -> None:
        """Replace every array a (default value fill) by fn(a, fill)."""
        self.exists = fn(self.exists, False)
        self.row_id = fn(self.row_id, 0)
        self.key_vals = [fn(a, 0) for a in self.key_vals]
        self.key_nulls = [fn(a, False) for a in self.key_nulls]
        self.out_vals = [fn(a, 0) for a in self.out_vals]
        self.out_nulls = [fn(a, True) for a in self.out_nulls]
        self.totals = {q: fn(a, 0) for q, a in self.totals.items()}
        self.fsum_hi = {q: fn(a, 0.0) for q, a in self.fsum_hi.items()}
        self.fsum_lo = {q: fn(a, 0.0) for q, a in self.fsum_lo.items()}

    def _arrays(self) -> list[np.ndarray]:
        return [
            self.exists,
            self.row_id,
            *self.key_vals,
            *self.key_nulls,
            *self.out_vals,
            *self.out_nulls,
            *self.totals.values(),
            *self.fsum_hi.values(),
            *self.fsum_lo.values(),
        ]

    def ensure(self, n: int) -> None:
        """Room for group ids < n (capacity doubles)."""
        if n <= self.cap:
            return
        cap = max(n, 2 * self.cap, 16)

        def grow(a: np.ndarray, fill: object) -> np.ndarray:
            new = _filled(a.dtype, fill, cap)
            new[: len(a)] = a
            return new

        self._rebuild(grow)
        self.cap = cap

    def compact(self, live: np.ndarray, newg: np.ndarray, cap: int) -> None:
        """Keep only groups `live`, renumbered to `newg`, in arrays of length `cap`."""

        def move(a: np.ndarray, fill: object) -> np.ndarray:
            new = _filled(a.dtype, fill, cap)
            new[newg] = a[live]
            return new

        self._rebuild(move)
        self.cap = cap

    def nbytes(self) -> int:
        return sum(a.nbytes if a.dtype != object else 8 * len(a) for a in self._arrays())

    def unshare(self, q: Quantity) -> None:
        """count(x) `q` is about to count a NULL x: from now on its totals are its own, starting
        from the row count's (equal to them up to now)."""
        if q in self.rows_counts:
            self.rows_counts.discard(q)
            self.totals[q] = self.totals[ROWS].copy()

    def carry_totals(self, totals: dict[Quantity, Totals], lastc: np.ndarray, G: np.ndarray) -> None:
        """Store the per-cell `totals` of cells `lastc` (each touched group's last cell) as the
        carried totals of their groups `G`."""
        for q, val in totals.items():
            if q in self.rows_counts:  # the row count's, carried once
                continue
            if isinstance(val, tuple):
                hi, lo = val[0].take(lastc), val[1].take(lastc)
                empty = cast(np.ndarray, totals[q.count]).take(lastc) <= 0
                self.fsum_hi[q][G] = np.where(empty, 0.0, hi)  # no values left: exactly 0
                self.fsum_lo[q][G] = np.where(empty, 0.0, lo)
            else:
                self.totals[q][G] = val.take(lastc)

    def reset(self, g: np.ndarray) -> None:
        """Groups `g` (empty now) back to the totals of a group never seen, so their ids can be
        handed out again (key values are stored anew when they are). Their carried row needs no
        reset: an empty group's `exists` is already False (carried from its last cell), and the
        values, NULL flags and id of a row that does not exist are never read (a cell's previous
        row is only emitted, or compared, where it existed). Text values are dropped all the same,
        so the strings are not kept alive."""
        for a in self.out_vals:
            if a.dtype == object:
                a[g] = ""
        for a in self.totals.values():
            a[g] = 0
        for a in (*self.fsum_hi.values(), *self.fsum_lo.values()):
            a[g] = 0.0

    def store_keys(self, g: np.ndarray, rows: np.ndarray, kv: list[np.ndarray], kn: list[np.ndarray | None]) -> None:
        """Remember the key values of groups `g`, new this batch, from their rows `rows` of the
        batch's key columns (output columns)."""
        if not len(g):
            return
        for i in range(len(self.key_vals)):
            m = kn[i]
            self.key_vals[i][g] = kv[i].take(rows)
            if m is not None:
                self.key_nulls[i][g] = m.take(rows)
                self.null_keys[i] = True
            elif self.null_keys[i]:  # ids reused: an earlier group's NULL flag may be there
                self.key_nulls[i][g] = False

    def key_null(self, i: int, g: np.ndarray) -> np.ndarray | None:
        """The NULL flags of key column i of groups `g`, or None when none is NULL."""
        if not self.null_keys[i]:
            return None
        m = self.key_nulls[i].take(g)
        return m if m.any() else None

    def __setstate__(self, state: dict[str, object]) -> None:
        """A checkpoint taken before `null_keys` existed: every column may hold NULL keys; before
        `rows_counts`: every count has its own totals; before `null_free`: every value's NULL flags
        are carried (so they stay carried: the checkpoint's flags are the truth)."""
        self.__dict__.update(state)
        if "null_free" not in state:
            self.null_free = [False] * len(self.out_vals)
        if "rows_counts" not in state:  # every quantity with an array of its own
            self.rows_counts = set()
        if "null_keys" not in state:
            self.null_keys = [True] * len(self.key_vals)

    def current_rows(self, at: int) -> Batch:
        """Every existing group's output row (keys, then aggregate values) as `+` at `at`."""
        live = np.flatnonzero(self.exists)
        cols, nulls = [], []
        free = [False] * len(self.key_vals) + self.null_free
        for v, m, f in zip(self.key_vals + self.out_vals, self.key_nulls + self.out_nulls, free):
            cols.append(v[live])
            ml = None if f else m[live]
            nulls.append(ml if ml is not None and ml.any() else None)
        n = len(live)
        return Batch(cols, nulls, np.full(n, at, np.int64), np.ones(n, np.int8), self.row_id[live].copy())
