"""Shared numpy kernels of the operators: stable ordering, range expansion and key factorising.

Every operator groups rows by a key while keeping arrival (ts) order inside a group, expands
[start, end) ranges of a sorted state into index arrays, and turns (multi-column, NULL-able) key
values into dense int64 codes. One implementation of each lives here, vectorized, with no
Python per row; tests/test_kernels.py checks them against plain Python models.
"""

from __future__ import annotations

import numpy as np

_EMPTY_I = np.zeros(0, np.int64)
_BIG = 1 << 62

# ---------------------------------------------------------------- stable order


def stable_order(key: np.ndarray, lo: int | None = None, hi: int | None = None) -> np.ndarray:
    """`np.argsort(key, kind="stable")` for integer keys, fast: a radix sort of uint16 when many
    keys span few values (< 2^16 and < n/4), else one (SIMD) np.sort of packed
    (key − lo) << b | position words when they fit in 63 bits (numpy's plain sort is much faster
    than a stable argsort). `lo`/`hi` bound the keys (lo ≤ key ≤ hi) when the caller knows them;
    else they are measured. (Merging a few already sorted runs, e.g. two ts-sorted sides, stays
    with numpy's stable argsort: timsort finds the runs and is faster there.)"""
    return _order(key, lo, hi, False)[0]


def sorted_order(key: np.ndarray, lo: int | None = None, hi: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(`stable_order(key, lo, hi)`, the keys in that order): the packed sort gives the sorted
    keys by a shift of its words, not a gather of `key` at the order."""
    order, skey = _order(key, lo, hi, True)
    return order, key.take(order) if skey is None else skey


def _order(key: np.ndarray, lo: int | None, hi: int | None, keys: bool) -> tuple[np.ndarray, np.ndarray | None]:
    """stable_order, and with `keys` the sorted keys where the packed sort has them (else None)."""
    n = len(key)
    if n < 2:
        return np.arange(n, dtype=np.int64), None
    if lo is None or hi is None:
        lo, hi = int(key.min()), int(key.max())
    span = hi - lo
    if span <= 0:
        return np.arange(n, dtype=np.int64), None
    nb = (n - 1).bit_length()
    if span.bit_length() + nb <= 32:  # uint32 words: their sort is ~2x the int64 one's, and beats the radix sort
        return _packed_sort(key, lo, nb, np.uint32, keys)
    if span < 1 << 16 and n >= 4096 and 4 * span < n:  # measured: where the radix sort wins
        k = key - lo if lo else key
        return (k.astype(np.uint16)).argsort(kind="stable"), None
    if span.bit_length() + nb > 62:
        return key.argsort(kind="stable"), None
    return _packed_sort(key, lo, nb, np.int64, keys)


def _packed_sort(
    key: np.ndarray, lo: int, nb: int, word: type[np.unsignedinteger] | type[np.signedinteger], keys: bool
) -> tuple[np.ndarray, np.ndarray | None]:
    """One plain sort of (key − lo) << nb | position words of type `word` (the caller checked they
    fit): the positions in stable key order, and with `keys` the sorted keys (a shift of the words)."""
    words = (key - np.int64(lo) if lo else key).astype(word, copy=lo == 0)
    words <<= word(nb)
    words |= np.arange(len(key), dtype=word)
    words.sort()
    skey = None
    if keys:
        skey = (words >> word(nb)).astype(np.int64, copy=False)
        if lo:
            skey += np.int64(lo)
        skey = skey.astype(key.dtype, copy=False)
    words &= word((1 << nb) - 1)
    return words.astype(np.int64, copy=False), skey


# ---------------------------------------------------------------- segments


def starts_to_ends(starts: np.ndarray) -> np.ndarray:
    """Segment-end flags from segment-start flags (a segment ends where the next one starts)."""
    ends = np.empty(len(starts), bool)
    if len(starts):
        ends[:-1] = starts[1:]
        ends[-1] = True
    return ends


def run_starts(x: np.ndarray) -> np.ndarray:
    """Mask of the first element of every run of equal adjacent values of `x`."""
    first = np.empty(len(x), bool)
    if len(x):
        first[0] = True
        np.not_equal(x[1:], x[:-1], out=first[1:])
    return first


def run_lengths(first: np.ndarray, n: int) -> np.ndarray:
    """Lengths of the runs of an array of `n` elements that start at the ascending positions
    `first` (first[0] = 0): `np.diff(np.append(first, n))` without its two wrappers (~4 µs of
    Python a call, paid by every small operator call)."""
    sizes = np.empty(len(first), np.int64)
    if len(first):
        np.subtract(first[1:], first[:-1], out=sizes[:-1])
        sizes[-1] = n - first[-1]
    return sizes


def filled(n: int, value: object, dtype: type | np.dtype) -> np.ndarray:
    """`np.full(n, value, dtype)` (also `np.ones`) without its Python wrapper: an operator call
    on a few rows makes dozens of these, and the wrapper costs more than the filling."""
    out = np.empty(n, dtype)
    out.fill(value)
    return out


def run_ends(x: np.ndarray) -> np.ndarray:
    """Positions of the last element of every run of equal adjacent values of `x`."""
    ends = np.empty(len(x), bool)
    if len(x):
        np.not_equal(x[1:], x[:-1], out=ends[:-1])
        ends[-1] = True
    return ends.nonzero()[0]


def seg_cumsum(d: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """Cumulative sum of `d` restarting at every True of `starts` (starts[0] must be True)."""
    cs = d.cumsum()
    base = (cs - d)[starts]
    return cs - base.repeat(run_lengths(starts.nonzero()[0], len(d)))


# ---------------------------------------------------------------- range expansion


def concat_ranges(lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Concatenation of arange(lo[i], hi[i]) for all i (empty where hi[i] ≤ lo[i])."""
    lens = hi - lo
    total = int(lens[lens > 0].sum()) if len(lens) else 0
    if not total:
        return _EMPTY_I
    keep = lens > 0
    lo, lens = lo[keep], lens[keep]
    starts = lens.cumsum() - lens
    return (lo - starts).repeat(lens) + np.arange(total, dtype=np.int64)


def expand(start: np.ndarray, cnt: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Pairs (i, start[i] + k) for k < cnt[i], in order of i then k: returns (rep, pos)."""
    cnt = np.maximum(cnt, 0)
    tot = int(cnt.sum()) if len(cnt) else 0
    rep = (np.arange(len(cnt))).repeat(cnt)
    if not tot:
        return rep, rep.copy()
    first = cnt.cumsum() - cnt
    pos = start[rep] + (np.arange(tot) - first[rep])
    return rep, pos


def expand_pairs(p: np.ndarray, rows: np.ndarray, start: np.ndarray, cnt: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(p[i], rows[start[i] + k]) for k < cnt[i], in order: `expand` without the gathers by rep."""
    cnt = np.maximum(cnt, 0)
    tot = int(cnt.sum())
    if not tot:
        return p[:0], rows[:0]
    first = cnt.cumsum()
    first -= cnt
    pos = (start - first).repeat(cnt)
    pos += np.arange(tot)
    return p.repeat(cnt), rows[pos]


# ---------------------------------------------------------------- key factorising


def unique_inverse(x: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """`np.unique(x, return_inverse=True)` for int64 keys without its argsort: a presence table
    when the values span a small range, else one plain (SIMD) sort of packed (x − lo) << b |
    position words; None when neither fits (the caller falls back to np.unique)."""
    got = unique_rows(x)
    return None if got is None else got[:2]


def unique_rows(x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """`unique_inverse(x)` and the last row of x holding each distinct value (an interner stores
    a new key's values from it); the packed sort has those rows at the ends of its runs."""
    n = len(x)
    if not n:
        return x[:0], np.zeros(0, np.int64), np.zeros(0, np.int64)
    lo, hi = int(x.min()), int(x.max())
    span = hi - lo
    if span <= 4 * n + 1024:  # small range: no sort at all
        k = x - lo if lo else x
        present = np.zeros(span + 1, bool)
        present[k] = True
        rank = present.cumsum(dtype=np.int64)
        rank -= 1
        inv = rank[k]
        last = np.empty(int(rank[-1]) + 1, np.int64)
        last[inv] = np.arange(n, dtype=np.int64)  # (numpy writes in order: the last row wins)
        return present.nonzero()[0] + lo, inv, last
    nb = (n - 1).bit_length()
    if span.bit_length() + nb > 62:
        return None
    packed = x - np.int64(lo)
    packed <<= nb
    packed |= np.arange(n, dtype=np.int64)
    packed.sort()
    pos = packed & ((1 << nb) - 1)
    packed >>= nb
    new = np.empty(n, bool)
    new[0] = True
    np.not_equal(packed[1:], packed[:-1], out=new[1:])
    inv = np.empty(n, np.int64)
    rank = new.cumsum()
    rank -= 1
    inv[pos] = rank
    starts = new.nonzero()[0]  # positions, not the mask: a mask gather is ~2x slower
    uniq = packed.take(starts)
    uniq += lo
    ends = starts[1:] - 1  # a run's last word: its largest row
    return uniq, inv, pos.take(np.append(ends, n - 1))


def factorize(col: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(sorted distinct values, code per row) of one column: equal values ↔ equal codes, codes in
    value order. Strings (object columns) are sorted in C as a fixed-width unicode copy."""
    if col.dtype == np.int64:
        got = unique_inverse(col)
        if got is not None:
            return got
    if col.dtype == object:
        try:
            col = col.astype(str)
        except (TypeError, ValueError):  # pragma: no cover - non-str objects: numpy's object sort
            pass
    uniq, inv = np.unique(col, return_inverse=True)
    return uniq, inv.reshape(-1).astype(np.int64, copy=False)


def dense_codes(key: np.ndarray, width: int) -> tuple[np.ndarray, int]:
    """Renumber non-negative keys < width densely (0..k−1, in key order); returns (codes, k)."""
    n = len(key)
    if width <= 4 * n + 1024:  # small key range: a presence table instead of a sort
        present = np.zeros(width, bool)
        present[key] = True
        rank = present.cumsum() - 1
        return rank[key], int(rank[-1]) + 1 if width else 0
    got = unique_inverse(key.astype(np.int64, copy=False))
    uniq, inv = got if got is not None else np.unique(key, return_inverse=True)
    return inv.reshape(-1).astype(np.int64, copy=False), len(uniq)


def joint_dense(*arrays: np.ndarray) -> tuple[list[np.ndarray], int]:
    """Dense joint codes (0..n−1, in value order) for int64 arrays, and n."""
    allv = np.concatenate(arrays)
    got = unique_inverse(allv) if allv.dtype == np.int64 else None
    u, inv = got if got is not None else np.unique(allv, return_inverse=True)
    cuts = np.cumsum([len(a) for a in arrays])[:-1]
    return np.split(inv.astype(np.int64), cuts), len(u)


def column_codes(col: np.ndarray, m: np.ndarray | None) -> tuple[np.ndarray, int]:
    """Per-row code of one column (equal values ↔ equal codes, NULL its own code 0) and the
    number of possible codes. Integers use value − min when the range is small enough;
    floats and strings go through np.unique."""
    null = m if m is not None and m.any() else None
    if col.dtype.kind in "iub":
        v = col.astype(np.int64, copy=False)
        live = v if null is None else v[~null]
        if len(live) == 0:
            return np.zeros(len(v), np.int64), 1
        lo, hi = int(live.min()), int(live.max())
        if hi - lo < (1 << 40):
            code = v - lo
            if null is not None:
                return np.where(null, 0, code + 1), hi - lo + 2
            return code, hi - lo + 1
    uniq, inv = factorize(col)
    if null is not None:
        return np.where(null, 0, inv + 1), len(uniq) + 1
    return inv, len(uniq)


def combine_codes(
    cols: list[np.ndarray], nulls: list[np.ndarray | None], key: np.ndarray, width: int
) -> tuple[np.ndarray, int]:
    """Extend the per-row codes `key` (0..width−1) by the columns' codes: equal (key, whole-tuple
    value) ↔ equal result code; the result is < the returned width < 2^62 (not dense)."""
    for col, m in zip(cols, nulls):
        if col.dtype.kind == "i" and len(col) and (m is None or not m.any()):
            lo, hi = int(col.min()), int(col.max())  # fast path: key·w + (v − lo), in place
            w = hi - lo + 1
            if w < (1 << 40) and width * w < _BIG:
                key *= w
                key += col
                if lo:
                    key -= lo
                width *= w
                continue
        code, w = column_codes(col, m)
        if width * w >= _BIG:
            key, width = dense_codes(key, width)  # re-densify: then width ≤ n, so no overflow
            if width * w >= _BIG:  # a wide integer range over a huge batch
                code, w = dense_codes(code, w)
        key = key * w + code
        width *= w
    return key, width


def row_codes(cols: list[np.ndarray], nulls: list[np.ndarray | None], n: int | None = None) -> tuple[np.ndarray, int]:
    """Batch-local dense code per row (0..k−1, in lexicographic order of the values, NULL first)
    and k: equal whole-tuple values (NULL equal to NULL) get equal codes. `n`: the number of rows
    (needed only when there are no columns: then every row has code 0)."""
    if n is None:
        n = len(cols[0])
    if not cols:
        return np.zeros(n, np.int64), 1 if n else 0
    return dense_codes(*combine_codes(cols, nulls, np.zeros(n, np.int64), 1))


def factorize_objects(v: np.ndarray) -> np.ndarray:
    """Codes (in order of first appearance) of an object column's values: pyarrow's dictionary
    encoding for strings, a dict (one lookup per value) for other objects."""
    if not len(v):
        return np.zeros(0, np.int64)
    try:
        import pyarrow as pa

        arr = pa.array(v, type=pa.string())
        return np.asarray(arr.dictionary_encode().indices.to_numpy(zero_copy_only=False), np.int64)
    except Exception:  # non-str objects: a dict, one lookup per value
        d: dict[object, int] = {}
        return np.fromiter((d.setdefault(x, len(d)) for x in v.tolist()), np.int64, len(v))
