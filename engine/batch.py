"""Delta batches: the unit that flows through queues (docs/architecture.md, the data path).

Columnar: one numpy array per attribute (+ an optional NULL mask), and per element a timestamp,
a sign (+1 insert / −1 delete) and a tuple-instance id (a delete carries the id of the insert it
retracts). Elements are sorted by ts; within one ts, arrival order is kept.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from cqlstream.cql.types import DataType
from cqlstream.engine.errors import EngineError

_DTYPES = {"int": np.int64, "timestamp": np.int64, "float": np.float64, "bool": np.bool_}


def dtype_of(t: DataType) -> type:
    """numpy dtype holding a column of type `t` (strings are object arrays of str)."""
    return _DTYPES.get(t.kind, object)


def empty_column(t: DataType, n: int = 0) -> np.ndarray:
    return np.zeros(n, dtype=dtype_of(t)) if t.kind in _DTYPES else np.full(n, "", dtype=object)


# zero-length arrays shared by every empty batch (Batch.empty)
_EMPTY: dict[str, np.ndarray] = {kind: np.zeros(0, dtype=dt) for kind, dt in _DTYPES.items()}
_EMPTY_OBJ = np.zeros(0, dtype=object)
_EMPTY_TS, _EMPTY_SIGN, _EMPTY_ID = np.zeros(0, np.int64), np.zeros(0, np.int8), np.zeros(0, np.uint64)


@dataclass
class Batch:
    """A columnar batch of delta events: the column arrays and their null masks, each row's
    timestamp, sign (+1 insert, -1 delete) and tuple id."""

    cols: list[np.ndarray]
    nulls: list[np.ndarray | None]
    ts: np.ndarray  # int64
    sign: np.ndarray  # int8
    id: np.ndarray  # uint64

    def __len__(self) -> int:
        return len(self.ts)

    @property
    def width(self) -> int:
        return len(self.cols)

    @staticmethod
    def empty(types: Sequence[DataType]) -> Batch:
        """A batch of no rows. Its arrays are shared zero-length ones (nothing can be written
        into them): operators with nothing pending get one per input at every call."""
        return Batch(
            [_EMPTY.get(t.kind, _EMPTY_OBJ) for t in types], [None] * len(types), _EMPTY_TS, _EMPTY_SIGN, _EMPTY_ID
        )

    def take(self, idx: np.ndarray | slice | Sequence[int]) -> Batch:
        """Rows at positions/mask `idx` (numpy fancy index semantics). A slice gives views; a
        boolean mask is turned into positions once (indexing every column by the mask would
        scan it once per column, ~3× the cost at LR's widths) and every array is gathered by
        `ndarray.take`."""
        if isinstance(idx, slice):
            return Batch(
                [c[idx] for c in self.cols],
                [None if m is None else m[idx] for m in self.nulls],
                self.ts[idx],
                self.sign[idx],
                self.id[idx],
            )
        ix = np.asarray(idx)
        if ix.dtype == np.bool_:
            if ix.shape != self.ts.shape:
                raise IndexError(f"boolean index of {ix.shape} rows for a batch of {len(self)}")
            ix = ix.nonzero()[0]  # (np.flatnonzero of a 1-D mask, without its ravel and dispatch)
        elif ix.dtype != np.intp:
            ix = ix.astype(np.intp)
        return Batch(
            [c.take(ix) for c in self.cols],
            [None if m is None else m.take(ix) for m in self.nulls],
            self.ts.take(ix),
            self.sign.take(ix),
            self.id.take(ix),
        )

    def copy_range(self, start: int, stop: int) -> Batch:
        """Rows start..stop−1 as copies (not views that keep the whole batch alive)."""
        return Batch(
            [c[start:stop].copy() for c in self.cols],
            [None if m is None else m[start:stop].copy() for m in self.nulls],
            self.ts[start:stop].copy(),
            self.sign[start:stop].copy(),
            self.id[start:stop].copy(),
        )

    def slice(self, start: int, stop: int) -> Batch:
        return self.take(slice(start, stop))

    def with_columns(self, cols: Iterable[np.ndarray], nulls: Iterable[np.ndarray | None]) -> Batch:
        return Batch(list(cols), list(nulls), self.ts, self.sign, self.id)

    def null_mask(self, i: int) -> np.ndarray:
        m = self.nulls[i]
        return np.zeros(len(self), bool) if m is None else m

    def rows(self) -> list[tuple]:
        """Python tuples with None for NULL (tests, text output of small results)."""
        cols = [c.tolist() for c in self.cols]
        masks = [None if m is None else m.tolist() for m in self.nulls]
        out = []
        for r in range(len(self)):
            out.append(tuple(None if (m is not None and m[r]) else c[r] for c, m in zip(cols, masks)))
        return out

    def elements(self) -> list[tuple[int, int, tuple]]:
        """(ts, sign, row) per element, for tests and small results."""
        return list(zip(self.ts.tolist(), self.sign.tolist(), self.rows()))

    def nbytes(self) -> int:
        n = self.ts.nbytes + self.sign.nbytes + self.id.nbytes
        for c in self.cols:
            n += c.nbytes if c.dtype != object else 8 * len(c) + sum(map(len, c[:64])) * max(len(c) // 64, 1)
        return n


# ------------------------------------------------------------------ column pruning

# Placeholders are slices of one huge zero-stride array per dtype (a slice costs ~0.2 µs,
# np.broadcast_to ~5 µs: a selection blanking 13 columns at every call paid more than it saved)
_HUGE = 1 << 40
_FILLS: dict[np.dtype, np.ndarray] = {}
_NULLS = np.broadcast_to(np.ones(1, bool), (_HUGE,))


def _blank(dtype: np.dtype, n: int) -> tuple[np.ndarray, np.ndarray]:
    f = _FILLS.get(dtype)
    if f is None:
        one = np.full(1, "", dtype=object) if dtype.kind == "O" else np.zeros(1, dtype=dtype)
        f = _FILLS[dtype] = np.broadcast_to(one, (_HUGE,))
    return f[:n], _NULLS[:n]


def placeholder(t: DataType, n: int) -> tuple[np.ndarray, np.ndarray]:
    """(values, null mask) of a column of n rows that nothing reads (engine/column_pruning.py):
    NULL in every row, as read-only zero-stride views that cost nothing to make; writing into one
    raises, so a consumer that should not see it fails loudly."""
    return _blank(np.dtype(dtype_of(t)), n)


@dataclass
class BlankedBatch(Batch):
    """A batch whose columns `blank` are placeholders (column pruning): taking rows of it or
    concatenating such batches makes new placeholders for those columns instead of copying them.
    Other operations give plain batches (whose placeholder columns are then copied as any)."""

    blank: frozenset[int] = frozenset()

    def take(self, idx: np.ndarray | slice | Sequence[int]) -> Batch:
        keep = [c for c in range(len(self.cols)) if c not in self.blank]
        part = Batch([self.cols[c] for c in keep], [self.nulls[c] for c in keep], self.ts, self.sign, self.id).take(idx)
        return _spread(part, keep, self.blank, [c.dtype for c in self.cols])


def _spread(part: Batch, keep: list[int], blank: frozenset[int], dtypes: list[np.dtype]) -> BlankedBatch:
    """`part` (columns `keep`) widened with placeholders in the columns `blank`."""
    n = len(part)
    cols: list[np.ndarray] = []
    nulls: list[np.ndarray | None] = []
    at = {c: i for i, c in enumerate(keep)}
    for c, dt in enumerate(dtypes):
        if c in blank:
            v, m = _blank(dt, n)
            cols.append(v)
            nulls.append(m)
        else:
            cols.append(part.cols[at[c]])
            nulls.append(part.nulls[at[c]])
    return BlankedBatch(cols, nulls, part.ts, part.sign, part.id, blank)


def blanked(b: Batch, types: Sequence[DataType], keep: frozenset[int] | None) -> Batch:
    """`b` with the columns not in `keep` replaced by placeholders (None: `b` itself)."""
    if keep is None:
        return b
    blank = frozenset(c for c in range(len(types)) if c not in keep)
    if not blank:
        return b
    n = len(b)
    cols, nulls = list(b.cols), list(b.nulls)
    for c in blank:
        cols[c], nulls[c] = placeholder(types[c], n)
    return BlankedBatch(cols, nulls, b.ts, b.sign, b.id, blank)


def _concat_blanked(batches: list[BlankedBatch]) -> Batch:
    """concat of blanked batches: the columns blank in all of them stay placeholders."""
    blank = frozenset.intersection(*(b.blank for b in batches))
    keep = [c for c in range(batches[0].width) if c not in blank]
    parts = [Batch([b.cols[c] for c in keep], [b.nulls[c] for c in keep], b.ts, b.sign, b.id) for b in batches]
    return _spread(concat(parts), keep, blank, [c.dtype for c in batches[0].cols])


def concat(batches: list[Batch], types: Sequence[DataType] | None = None) -> Batch:
    nonempty = [b for b in batches if len(b)]
    if not nonempty:
        if batches:
            return batches[0]
        if types is None:
            raise EngineError("internal", "concat of no batches needs the column types")
        return Batch.empty(types)
    batches = nonempty
    if len(batches) == 1:
        return batches[0]
    width = batches[0].width
    if all(isinstance(b, BlankedBatch) for b in batches):
        return _concat_blanked(batches)  # type: ignore[arg-type]
    cols = [np.concatenate([b.cols[i] for b in batches]) for i in range(width)]
    nulls: list[np.ndarray | None] = []
    for i in range(width):
        if all(b.nulls[i] is None for b in batches):
            nulls.append(None)
        else:
            nulls.append(np.concatenate([b.null_mask(i) for b in batches]))
    return Batch(
        cols,
        nulls,
        np.concatenate([b.ts for b in batches]),
        np.concatenate([b.sign for b in batches]),
        np.concatenate([b.id for b in batches]),
    )


def from_rows(
    rows: Sequence[Sequence[object]],
    types: Sequence[DataType],
    ts: npt.ArrayLike,
    sign: npt.ArrayLike | None = None,
    ids: npt.ArrayLike | None = None,
) -> Batch:
    """Build a batch from Python tuples (None = NULL)."""
    n = len(rows)
    cols: list[np.ndarray] = []
    nulls: list[np.ndarray | None] = []
    for i, t in enumerate(types):
        vals = [r[i] for r in rows]
        mask = np.array([v is None for v in vals], bool) if n else np.zeros(0, bool)
        if t.kind in _DTYPES:
            filler = False if t.kind == "bool" else 0
            arr = np.array([filler if v is None else v for v in vals], dtype=dtype_of(t)) if n else empty_column(t)
        else:
            arr = np.empty(n, dtype=object)
            arr[:] = ["" if v is None else v for v in vals]
        cols.append(arr)
        nulls.append(mask if mask.any() else None)
    ts = np.asarray(ts, np.int64)
    sign = np.ones(n, np.int8) if sign is None else np.asarray(sign, np.int8)
    ids = np.zeros(n, np.uint64) if ids is None else np.asarray(ids, np.uint64)
    return Batch(cols, nulls, ts, sign, ids)


# ---------------------------------------------------------------- tuple-instance ids

_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)


def splitmix64(x: np.ndarray) -> np.ndarray:
    """SplittableRandom's mixer over uint64 arrays (wrapping arithmetic)."""
    return splitmix64_inplace(x.astype(np.uint64))  # (a copy)


def splitmix64_inplace(z: np.ndarray) -> np.ndarray:
    """`splitmix64` of a uint64 array, computed in it (one temporary instead of seven)."""
    with np.errstate(over="ignore"):
        z += _GOLDEN
        t = z >> np.uint64(30)
        z ^= t
        z *= _M1
        np.right_shift(z, np.uint64(27), out=t)
        z ^= t
        z *= _M2
        np.right_shift(z, np.uint64(31), out=t)
        z ^= t
        return z


def combine_ids(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Id of a joined tuple instance from its parts' ids (same inputs → same id, so the
    delete of a join result carries the id of its insert)."""
    with np.errstate(over="ignore"):
        return splitmix64(splitmix64(a) ^ (b.astype(np.uint64) * _GOLDEN))


def _is_sorted(a: np.ndarray) -> bool:
    return len(a) < 2 or bool((a[1:] >= a[:-1]).all())


def match_deletes(cand_ids: np.ndarray, del_ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Pair deletes with the instances they retract: the k-th delete of an id (in delete order)
    retracts the k-th candidate with that id (in candidate order). Returns (candidate positions,
    delete positions) of the matched pairs; unmatched deletes are left out."""
    cand_order = np.arange(len(cand_ids)) if _is_sorted(cand_ids) else np.lexsort((np.arange(len(cand_ids)), cand_ids))
    cand_sorted = cand_ids[cand_order]
    del_order = np.arange(len(del_ids)) if _is_sorted(del_ids) else np.lexsort((np.arange(len(del_ids)), del_ids))
    dsorted = del_ids[del_order]
    pos = cand_sorted.searchsorted(dsorted, side="left")
    if len(dsorted) > 1 and not bool((dsorted[1:] != dsorted[:-1]).all()):
        pos = pos + (np.arange(len(dsorted)) - dsorted.searchsorted(dsorted, side="left"))
    ok = pos < len(cand_sorted)
    ok[ok] = cand_sorted[pos[ok]] == dsorted[ok]
    return cand_order[pos[ok]], del_order[ok]
