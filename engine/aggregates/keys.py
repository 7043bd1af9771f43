"""Group keys → dense group ids, persistently across batches (NULL is a key value of its own).

Per key column a value → code map (`IntInterner`: a sorted array searched with np.searchsorted,
plus a direct lookup table when the integer keys span a small range; `ObjInterner`: strings
through a dict touched once per distinct value of the batch), chained over the key columns by
interning (previous id, code) pairs.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from cqlstream.cql.types import DataType
from cqlstream.engine.batch import dtype_of
from cqlstream.engine.kernels import factorize

_EMPTY_I = np.zeros(0, np.int64)


class IntInterner:
    """Persistent map int64 key → dense id 0, 1, 2, ... (in order of discovery), vectorized.

    Authoritative form: sorted `keys` with their `ids` (np.searchsorted). Accelerator: when the
    known keys span a small range, a direct lookup `table` (id or −1) over [lo, lo + len)."""

    def __init__(self) -> None:
        self.keys = _EMPTY_I
        self.ids = _EMPTY_I
        self.n = 0
        self.lo = 0
        self.table: np.ndarray | None = None

    def nbytes(self) -> int:
        return self.keys.nbytes + self.ids.nbytes + (0 if self.table is None else self.table.nbytes)

    def map(self, x: np.ndarray, compact: np.ndarray | None = None) -> np.ndarray:
        """Ids of keys `x`. `compact`: the same keys renumbered into a narrower range in the same
        order (equal ↔ equal, x order ↔ compact order), so the batch factorizes by a cheap sort."""
        if not len(x):
            return _EMPTY_I
        mn, mx = int(x.min()), int(x.max())
        t = self.table
        if t is not None and mn >= self.lo and mx < self.lo + len(t):
            out = t[x - self.lo]
            miss = out < 0
            if not miss.any():
                return out
            self._add(np.unique(x[miss]))  # all within the table's range: it stays
            assert self.table is not None
            return self.table[x - self.lo]
        if compact is None:
            u, inv = factorize(x)
        else:
            _, inv = factorize(compact)
            at = np.empty(int(inv.max()) + 1, np.int64)
            at[inv] = np.arange(len(x), dtype=np.int64)  # one row of each distinct key
            u = x[at]
        ids = self._add(u)
        self._retable()
        return ids[inv]

    def _add(self, u: np.ndarray) -> np.ndarray:
        """Ids of the sorted unique keys `u`, adding the unknown ones."""
        pos = np.searchsorted(self.keys, u)
        found = np.zeros(len(u), bool)
        inb = pos < len(self.keys)
        found[inb] = self.keys[pos[inb]] == u[inb]
        ids = np.empty(len(u), np.int64)
        ids[found] = self.ids[pos[found]]
        new = ~found
        k = int(new.sum())
        if k:
            ids[new] = np.arange(self.n, self.n + k, dtype=np.int64)
            self.n += k
            self.keys = np.insert(self.keys, pos[new], u[new])
            self.ids = np.insert(self.ids, pos[new], ids[new])
            t = self.table
            if t is not None:
                un = u[new]
                if int(un[0]) >= self.lo and int(un[-1]) < self.lo + len(t):
                    t[un - self.lo] = ids[new]
                else:
                    self.table = None
        return ids

    def _retable(self) -> None:
        if self.table is not None or not len(self.keys):
            return
        lo, hi = int(self.keys[0]), int(self.keys[-1])
        span = hi - lo + 1
        if span <= max(1 << 16, 4 * self.n) and span <= 1 << 24:
            self.lo = lo
            self.table = np.full(span, -1, np.int64)
            self.table[self.keys - lo] = self.ids


class ObjInterner:
    """Persistent map of string (object) values → dense ids. The batch is factorized in C
    (np.unique over a fixed-width unicode copy); only each distinct value of the batch touches
    the dict (a per-distinct-value loop, not per tuple)."""

    def __init__(self) -> None:
        self.d: dict[object, int] = {}

    def nbytes(self) -> int:
        return 100 * len(self.d)

    def map(self, x: np.ndarray, compact: np.ndarray | None = None) -> np.ndarray:
        """Ids of keys `x`. `compact`: the same keys renumbered into a narrower range in the same
        order (equal ↔ equal, x order ↔ compact order), so the batch factorizes by a cheap sort."""
        if not len(x):
            return _EMPTY_I
        u, inv = factorize(x)
        d = self.d
        ids = np.empty(len(u), np.int64)
        for i, v in enumerate(u.tolist()):  # per distinct value of the batch
            code = d.get(v)
            if code is None:
                code = d[v] = len(d)
            ids[i] = code
        return ids[inv]


def int_key(v: np.ndarray, kind: str) -> np.ndarray:
    """Values of a numeric/bool column as int64 keys (equal values ⇔ equal keys)."""
    if kind == "float":
        w = v.astype(np.float64) + 0.0  # -0.0 → 0.0
        w = np.where(np.isnan(w), np.nan, w)
        return w.view(np.int64)
    if v.dtype == object:  # NULL-typed column: placeholders only
        return np.zeros(len(v), np.int64)
    return v.astype(np.int64, copy=False)


class GroupKeys:
    """Dense group ids for the key columns (NULL is a value of its own), persistent."""

    def __init__(self, types: Iterable[DataType]) -> None:
        self.types = list(types)
        self.cols = [ObjInterner() if dtype_of(t) is object and t.kind != "null" else IntInterner() for t in self.types]
        self.pairs = [IntInterner() for _ in self.types[1:]]

    @property
    def n(self) -> int:
        """An upper bound of the ids handed out so far (ids are < n)."""
        if not self.types:
            return 1
        if len(self.types) == 1:
            c = self.cols[0]
            return (len(c.d) if isinstance(c, ObjInterner) else c.n) + 1
        return self.pairs[-1].n

    def nbytes(self) -> int:
        return sum(c.nbytes() for c in self.cols) + sum(p.nbytes() for p in self.pairs)

    def map(self, vals: list[np.ndarray], nulls: list[np.ndarray | None], n: int) -> np.ndarray:
        if not self.types:
            return np.zeros(n, np.int64)
        gid: np.ndarray | None = None
        for i, (t, v, m) in enumerate(zip(self.types, vals, nulls)):
            interner = self.cols[i]
            enc = (lambda x: x) if isinstance(interner, ObjInterner) else (lambda x, kind=t.kind: int_key(x, kind))
            if m is None:
                code = interner.map(enc(v)) + 1
            else:  # NULL: code 0 (only real values are interned)
                code = np.zeros(n, np.int64)
                code[~m] = interner.map(enc(v[~m])) + 1
            gid = code if gid is None else self._pair(i - 1, gid, code)
        assert gid is not None
        return gid

    def _pair(self, i: int, gid: np.ndarray, code: np.ndarray) -> np.ndarray:
        """Intern (prefix id, code) pairs as (gid << 32) | code; the batch is factorized on
        gid · w + code (w > every code: same order, far narrower), which a plain sort handles."""
        w = int(code.max()) + 1
        g_hi = int(gid.max())
        compact = gid * w + code if g_hi < (1 << 62) // w else None
        return self.pairs[i].map((gid << 32) | code, compact)
