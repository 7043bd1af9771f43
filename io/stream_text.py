"""STREAM's result text: one `[τ]:+:v1, v2` / `[τ]:-:v1, v2` line per element.

Values: integers in decimal, floats as C's `%g`, booleans `true`/`false`, text as stored, NULL as
`null`, separated by ", ". `format_output` writes whole batches (vectorized); `format_line` is the
same text for one element of Python values (clients, and the rare values the fast path cannot pad).

Writing builds each output line from fixed-width fields padded with NUL bytes — packed into uint64
words when every field fits in 8 bytes, else in one byte matrix per chunk — and one pass per chunk
removes the padding (`bytes.translate`, or with `nogil` a boolean-mask selection, which releases
the GIL at ~20% more CPU: io/result_writer.py's WRITER_NOGIL says which the writer threads use, and why).
A batch that offers its rows as a change record (a grouped aggregate's `−`/`+` pairs) is
formatted from the record by io/change_text.py, with the same bytes.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import numpy as np

from cqlstream.engine.batch import Batch
from cqlstream.engine.deferred_batch import ChangeView, DeferredBatch
from cqlstream.io.lazy_compute import pc

_PAD = 0  # padding byte inside the fixed-width line matrix, removed at the end
Chunk = bytes | memoryview  # the text of a chunk of lines (a buffer: files and b"".join take either)


def _unpad(a: np.ndarray, nogil: bool) -> Chunk:
    """The bytes of C-contiguous array `a` without its NUL padding. `bytes.translate` is the
    cheapest (~0.95 ns per byte, with the copy `tobytes` makes) but holds the GIL throughout; with
    `nogil` a boolean-mask selection does it in numpy loops that release the GIL, for ~20% more
    CPU (np.compress, used before, builds an index array first: ~50% more)."""
    if not nogil:
        return a.tobytes().translate(None, b"\0")
    v = a.reshape(-1).view(np.uint8)
    return v[v != _PAD].data


_NULL = np.frombuffer(b"null", np.uint8)
_BOOL = np.frombuffer(b"false" + b"true\0", np.uint8).reshape(2, 5)


def _int_digits(v: np.ndarray) -> np.ndarray:
    """(n, w) uint8 matrix: decimal text of int64 `v`, right-aligned, padded with NUL."""
    n = len(v)
    if n == 0:
        return np.zeros((0, 1), np.uint8)
    neg = v < 0
    with np.errstate(over="ignore"):
        a = np.where(neg, -v, v).view(np.uint64) if v.dtype == np.int64 else np.abs(v).astype(np.uint64)
    top = int(a.max())
    nd = len(str(top))
    anyneg = bool(neg.any())
    w = nd + anyneg
    out = np.zeros((w, n), np.uint8)  # slot-major, transposed at the end
    a = a.astype(np.uint32) if top < (1 << 32) else a
    ten = a.dtype.type(10)
    for k in range(nd):
        q = a // ten
        d = (a - q * ten).astype(np.uint8)
        d += 48
        if k:
            d[a == 0] = _PAD
        out[w - 1 - k] = d
        a = q
    if anyneg:
        out[0] = np.where(neg, 45, _PAD)
    return out.T  # a transposed view: the line matrix assignment copies it once


def _int_field(v: np.ndarray) -> np.ndarray:
    """Decimal text of integers as an (n, w) NUL-padded matrix; small value ranges format a lookup
    table once and gather rows from it, sorted columns (timestamps) format each run's value once."""
    n = len(v)
    if n == 0:
        return np.zeros((0, 1), np.uint8)
    v = np.asarray(v, np.int64)
    lo, hi = int(v.min()), int(v.max())
    if hi - lo <= max(1 << 12, n // 2):
        table = _int_digits(np.arange(lo, hi + 1, dtype=np.int64))
        return _gather_rows(table, v - lo)
    if n > 1 and bool(np.all(v[1:] >= v[:-1])):
        starts = np.flatnonzero(np.concatenate(([True], v[1:] != v[:-1])))
        if len(starts) <= n // 2:
            table = _int_digits(v[starts])
            idx = np.repeat(np.arange(len(starts)), np.diff(np.append(starts, n)))
            return _gather_rows(table, idx)
    return _int_digits(v)


def _gather_rows(table: np.ndarray, idx: np.ndarray) -> np.ndarray:
    """table[idx] for an (r, w) uint8 table, moving each row as one wide element."""
    table = np.ascontiguousarray(table)
    r, w = table.shape
    if w in (1, 2, 4, 8):
        dt = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}[w]
        return table.view(dt).ravel()[idx].view(np.uint8).reshape(len(idx), w)
    wide = np.zeros((r, 8 if w < 8 else 16), np.uint8)
    if w <= 16:
        wide[:, :w] = table
        if w < 8:
            got = wide.view(np.uint64).ravel()[idx].view(np.uint8).reshape(len(idx), 8)
        else:
            got = wide.view(np.complex128).ravel()[idx].view(np.uint8).reshape(len(idx), 16)
        return got[:, :w]
    return table[idx]


_P10 = 10.0 ** np.arange(0, 23)


def _float_field(x: np.ndarray) -> np.ndarray:
    """C's `%g` of float64 `x` (6 significant digits) as an (n, 22) NUL-padded slot matrix.

    Slots: sign, '0', '.', 3 leading zeros (fixed form below 1), then 6 digits each followed by a
    possible '.', then 'e', exponent sign and 3 exponent digits; unused slots stay NUL. Values whose
    rounding is ambiguous within the float arithmetic used here (an exact decimal tie is within
    1e-9), or that are not finite / out of the exactly scalable range, are formatted by Python."""
    n = len(x)
    x = np.asarray(x, np.float64)
    S = np.zeros((22, n), np.uint8)
    if n == 0:
        return S.T.copy()
    neg = np.signbit(x)
    a = np.abs(x)
    fin = np.isfinite(a)
    zero = a == 0
    ok = fin & ~zero
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        e = np.floor(np.log10(np.where(ok, a, 1.0))).astype(np.int64)
        k = 5 - e  # scale by 10**k
        slow = ~ok | (k > 22) | (k < -22)
        kk = np.clip(k, -22, 22)
        s = np.where(kk >= 0, a * _P10[np.abs(kk)], a / _P10[np.abs(kk)])
        # log10 may be off by one next to powers of ten
        lowm = ok & (s < 1e5)
        highm = ok & (s >= 1e6)
        if lowm.any() or highm.any():
            e = e - lowm + highm
            k = 5 - e
            slow |= (k > 22) | (k < -22)
            kk = np.clip(k, -22, 22)
            s = np.where(kk >= 0, a * _P10[np.abs(kk)], a / _P10[np.abs(kk)])
        frac = s - np.floor(s)
        slow |= np.abs(frac - 0.5) < 1e-9
        m = np.rint(s)
    m = np.where(ok & ~slow, m, 100000.0).astype(np.int64)
    carry = m >= 1000000
    m = np.where(carry, m // 10, m)
    e = e + carry
    # digits and trailing zeros
    D = np.empty((6, n), np.uint8)
    rest = m.copy()
    for j in range(5, -1, -1):
        q = rest // 10
        D[j] = (rest - q * 10).astype(np.uint8) + 48
        rest = q
    tz = np.zeros(n, np.int64)
    run = np.ones(n, bool)
    for j in range(5, 0, -1):
        run &= D[j] == 48
        tz += run
    sig = 6 - tz  # significant digits kept
    expo = (e < -4) | (e >= 6)
    fixed_pos = ~expo & (e >= 0)
    fixed_neg = ~expo & (e < 0)
    S[0] = np.where(neg, 45, _PAD)
    S[1] = np.where(fixed_neg, 48, _PAD)
    S[2] = np.where(fixed_neg, 46, _PAD)
    for z in range(3):  # zeros after "0." : -e-1 of them (0..3)
        S[3 + z] = np.where(fixed_neg & (-e - 1 > z), 48, _PAD)
    shown = np.where(fixed_pos, np.maximum(sig, e + 1), sig)
    for j in range(6):
        S[6 + 2 * j] = np.where(j < shown, D[j], _PAD)
        if j < 5:
            dot = (fixed_pos & (e == j) & (sig > j + 1)) | (expo & (j == 0) & (sig > 1))
            S[7 + 2 * j] = np.where(dot, 46, _PAD)
    S[17] = np.where(expo, 101, _PAD)
    S[18] = np.where(expo, np.where(e < 0, 45, 43), _PAD)
    ae = np.abs(e)
    S[19] = np.where(expo & (ae >= 100), 48 + (ae // 100) % 10, _PAD)
    S[20] = np.where(expo, 48 + (ae // 10) % 10, _PAD)
    S[21] = np.where(expo, 48 + ae % 10, _PAD)
    # zeros: "0" / "-0"
    if zero.any():
        S[1:, zero] = _PAD
        S[6, zero] = 48
    out = S.T
    if slow.any():
        # not finite, near-tie roundings, |exponent| beyond exact scaling: Python's exact '%g'
        for i in np.flatnonzero(slow & ~zero).tolist():  # rare: only the flagged values
            b = np.frombuffer(("%g" % float(x[i])).encode(), np.uint8)
            out[i] = _PAD
            out[i, : len(b)] = b
    return out


def _text_field(col: np.ndarray) -> np.ndarray | None:
    """UTF-8 bytes of str values left-aligned in an (n, L) NUL-padded matrix (None if a value
    contains a NUL byte, which the padding could not tell apart)."""
    import pyarrow as pa  # only for text columns: a numeric output (and the writer process) never loads it

    n = len(col)
    arr = pa.array(col, type=pa.string(), from_pandas=False) if col.dtype == object else pa.array(col.astype(str))
    if arr.null_count:
        arr = pc.fill_null(arr, "")
    offs = np.frombuffer(arr.buffers()[1], np.int32, n + 1, arr.offset * 4)
    data_buf = arr.buffers()[2]
    start, stop = int(offs[0]), int(offs[-1])
    data = (
        np.frombuffer(data_buf, np.uint8, stop - start, start)
        if data_buf is not None and stop > start
        else np.zeros(0, np.uint8)
    )
    lens = np.diff(offs).astype(np.int64)
    width = int(lens.max()) if n else 0
    if width == 0:
        return np.zeros((n, 1), np.uint8)
    if (data == 0).any():
        return None
    out = np.zeros((n, width), np.uint8)
    if width == 1:
        out[lens == 1, 0] = data
        return out
    pos = np.arange(len(data), dtype=np.int64) + np.repeat(
        np.arange(n, dtype=np.int64) * width - (offs[:-1] - start), lens
    )
    out.reshape(-1)[pos] = data
    return out


def _value_field(col: np.ndarray, mask: np.ndarray | None) -> np.ndarray | None:
    f: np.ndarray | None
    if col.dtype == np.bool_:
        f = _BOOL[col.astype(np.int64)]
    elif col.dtype.kind in "iu":
        f = _int_field(col.astype(np.int64, copy=False))
    elif col.dtype.kind == "f":
        f = _float_field(col)
    else:
        if mask is not None and mask.any():
            col = col.copy()
            col[mask] = ""
        f = _text_field(col)
        if f is None:
            return None
    if mask is not None and mask.any():
        if f.shape[1] < 4:
            f = np.concatenate([f, np.zeros((len(f), 4 - f.shape[1]), np.uint8)], axis=1)
        f = f.copy() if not f.flags.writeable else f
        f[mask] = _PAD
        f[mask, :4] = _NULL
    return f


def value_text(v: object) -> str:
    """One value as STREAM writes it: NULL `null`, booleans `true`/`false`, floats `%g`, else str."""
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        return "%g" % v
    return str(v)


def format_line(ts: int, sign: int, row: Sequence[object]) -> str:
    """The STREAM line of one element (without its newline)."""
    return f"[{ts}]:{'+' if sign > 0 else '-'}:{', '.join(map(value_text, row))}"


def _format_slow(b: Batch) -> bytes:
    """Per-line formatting (only for values the fast path cannot pad: text containing NUL)."""
    out = [format_line(t, s, row) + "\n" for row, t, s in zip(b.rows(), b.ts.tolist(), b.sign.tolist())]
    return "".join(out).encode("utf-8")


# ---------------------------------------------------------------- line assembly in 64-bit words
#
# A line is laid out as fixed-width byte slots (each field padded with NUL to its widest value in
# the chunk), and the slots are packed into little-endian uint64 words: a field of at most 8 bytes
# is one uint64 per row, placed at its byte offset with two shifts (it may straddle two words).
# Every step is then a contiguous uint64 array operation (SIMD), instead of a strided copy of a
# few bytes per row; one `_unpad` removes the padding of the whole chunk. Lines with a
# wider field (floats, text, integers of 8+ characters) use the byte-slot matrix assembly below.

_U8 = np.dtype("<u8")


def _digit_words(v: np.ndarray, nd: int, sign_slot: bool) -> np.ndarray:
    """Decimal text of int64 `v` (|v| < 10**nd) right-aligned in nd + sign_slot ≤ 8 bytes, NUL
    padded, one little-endian uint64 per value; a '-' goes in the first byte."""
    w = nd + sign_slot
    neg = v < 0
    a = np.abs(v).astype(np.uint64)  # |v| < 10**8 here: no overflow
    out = np.zeros(len(v), _U8)
    ten = np.uint64(10)
    for k in range(nd):
        q = a // ten
        d = (a - q * ten) + np.uint64(48)
        if k:
            d[a == 0] = 0
        out |= d << np.uint64(8 * (w - 1 - k))
        a = q
    if sign_slot:
        out |= np.where(neg, np.uint64(45), np.uint64(0))
    return out


_SMALL = 1 << 16
_small_words: np.ndarray | None = None
_small_formatted = 0  # values within ±_SMALL formatted without the table so far


def _small_words_of(v: np.ndarray, nd: int, neg: bool) -> np.ndarray:
    """Words of values within ±2**16: from the table once as many values were formatted as it
    holds (it costs ~20 ms to build, which a run writing a few thousand lines, such as Linear
    Road, never pays back), before that directly. Same text either way."""
    global _small_formatted
    if _small_words is None and _small_formatted < 2 * _SMALL:
        _small_formatted += len(v)
        return _words_of(v, nd, neg)
    return _small_table()[v + _SMALL]


def _small_table() -> np.ndarray:
    """Text of every integer in [-2**16, 2**16) as a left-aligned NUL-padded uint64 (built once)."""
    global _small_words
    if _small_words is None:
        pos = _left_words(_SMALL + 1)  # 0 .. 2**16
        neg = (pos[_SMALL:0:-1] << np.uint64(8)) | np.uint64(45)  # "-" then the digits of 2**16 .. 1
        _small_words = np.concatenate([neg, pos[:_SMALL]])
    return _small_words


def _left_words(n: int) -> np.ndarray:
    """Decimal text of 0 .. n − 1 (n ≤ 10**7), left-aligned in NUL-padded uint64 words, built from
    each digit position's periodic pattern (repeat and tile: memory moves, no divisions). numpy's
    own `astype("S8")` gives the same words at ~20× the CPU (40-60 ms for 2**17 values)."""
    nd = len(str(n - 1))
    out = np.zeros(n, _U8)
    length = np.ones(n, np.uint8)  # characters of each value
    for k in range(1, nd):
        length[10**k :] += 1
    for k in range(nd):  # digit k (from the right) goes to byte length − 1 − k
        step = 10**k
        d = np.tile(np.repeat(np.arange(48, 58, dtype=_U8), step), n // (10 * step) + 1)[:n]
        top = step if k else 0  # the values that have this digit
        shift = (length[top:].astype(_U8) - np.uint64(1 + k)) * np.uint64(8)
        out[top:] |= d[top:] << shift
    return out


def _int_words(v: np.ndarray) -> tuple[np.ndarray, int] | None:
    """(uint64 words, width) of the decimal text of int64 `v` when every value fits in 8 bytes,
    else None. Values within ±2**16 come from a table built once per process; other small value
    ranges format a table per chunk; sorted columns (timestamps) format each run's value once and
    repeat it. (Where the text sits inside its slot does not matter: the NUL padding is removed.)"""
    n = len(v)
    lo, hi = int(v.min()), int(v.max())
    nd = len(str(max(abs(lo), abs(hi))))
    neg = lo < 0
    if nd + neg > 8:
        return None
    w = nd + neg
    if lo >= -_SMALL and hi < _SMALL:
        return _small_words_of(v, nd, neg), w
    if hi - lo < n // 2:  # a table smaller than the column
        return _words_of(np.arange(lo, hi + 1, dtype=np.int64), nd, neg)[v - lo], w
    if n > 1 and bool(np.all(v[1:] >= v[:-1])):
        starts = np.flatnonzero(np.concatenate(([True], v[1:] != v[:-1])))
        if len(starts) <= n // 2:
            return np.repeat(_words_of(v[starts], nd, neg), np.diff(np.append(starts, n))), w
    return _words_of(v, nd, neg), w


def _words_of(v: np.ndarray, nd: int, neg: bool) -> np.ndarray:
    """Text words of int64 values that fit in 8 characters: numpy's own conversion to 8-byte
    strings for a few values (one C call, left-aligned), the digit arithmetic for many (SIMD)."""
    if len(v) <= 2048:
        return np.ascontiguousarray(v).astype("S8").view(_U8)
    return _digit_words(v, nd, neg)


_NULL_WORD = np.frombuffer(b"null\0\0\0\0", _U8)[0]
_BOOL_WORDS = np.frombuffer(b"false\0\0\0true\0\0\0\0", _U8)


def _field_words(col: np.ndarray, mask: np.ndarray | None) -> tuple[np.ndarray, int] | None:
    """A column's text as (uint64 words, width ≤ 8), or None when it is wider (floats, text,
    large integers)."""
    if col.dtype.kind in "iu" and col.dtype != np.uint64:
        got = _int_words(col.astype(np.int64, copy=False))
    elif col.dtype == np.bool_:
        got = (_BOOL_WORDS[col.astype(np.intp)], 5)
    else:
        return None
    if got is None:
        return None
    x, w = got
    if mask is not None and mask.any():
        x = np.where(mask, _NULL_WORD, x)
        w = max(w, 4)
    return x, w


def fold_bytes(consts: dict[int, int], at: int, piece: bytes) -> int:
    """Constant bytes placed at byte offset `at` of a line, folded into its per-word constants
    (`consts`: word index → bits); returns the offset after them."""
    for j, c in enumerate(piece):
        q, r = divmod(at + j, 8)
        consts[q] = consts.get(q, 0) | (c << (8 * r))
    return at + len(piece)


def _format_chunk(b: Batch, nogil: bool = False) -> Chunk:
    n = len(b)
    ts = _int_words(b.ts)
    if ts is None:
        return _format_chunk_bytes(b, nogil)
    pieces: list[bytes | tuple[np.ndarray, int]] = [
        b"[",
        ts,
        b"]:",
        (np.where(b.sign > 0, np.uint64(43), np.uint64(45)), 1),
        b":",
    ]
    for i, col in enumerate(b.cols):  # constant bytes, or (uint64 words, width) per row
        if i:
            pieces.append(b", ")
        f = _field_words(col, b.nulls[i])
        if f is None:
            return _format_chunk_bytes(b, nogil)
        pieces.append(f)
    pieces.append(b"\n")
    # place every piece at its byte offset: word q gets x << 8r, and word q + 1 the spill-over
    terms: dict[int, list[np.ndarray]] = {}
    consts: dict[int, int] = {}
    at = 0
    for p in pieces:
        if isinstance(p, bytes):
            at = fold_bytes(consts, at, p)
            continue
        x, w = p
        q, r = divmod(at, 8)
        terms.setdefault(q, []).append(x << np.uint64(8 * r) if r else x)
        if r + w > 8:
            terms.setdefault(q + 1, []).append(x >> np.uint64(64 - 8 * r))
        at += w
    K = (at + 7) // 8
    words = np.empty((n, K), _U8)
    for q in range(K):
        t = terms.get(q, [])
        const = np.uint64(consts.get(q, 0))
        if not t:
            words[:, q] = const
            continue
        acc = t[0] | t[1] if len(t) > 1 else t[0] | const  # a fresh array: the pieces stay untouched
        for x in t[2:]:
            np.bitwise_or(acc, x, out=acc)
        if len(t) > 1 and const:
            np.bitwise_or(acc, const, out=acc)
        words[:, q] = acc
    return _unpad(words, nogil)


def _format_chunk_bytes(b: Batch, nogil: bool = False) -> Chunk:
    """Line assembly from byte-slot matrices (lines with fields wider than 8 bytes: floats, text,
    large integers)."""
    n = len(b)
    fields: list[bytes | np.ndarray] = []  # (matrix or constant bytes)
    fields.append(b"[")
    fields.append(_int_field(b.ts))
    fields.append(b"]:")
    fields.append(np.where(b.sign > 0, 43, 45).astype(np.uint8).reshape(n, 1))
    fields.append(b":")
    for i, col in enumerate(b.cols):
        if i:
            fields.append(b", ")
        f = _value_field(col, b.nulls[i])
        if f is None:
            return _format_slow(b)
        fields.append(f)
    fields.append(b"\n")
    widths = [len(f) if isinstance(f, bytes) else f.shape[1] for f in fields]
    W = sum(widths)
    mat = np.empty((n, W), np.uint8)
    at = 0
    for piece, w in zip(fields, widths):
        if isinstance(piece, bytes):
            mat[:, at : at + w] = np.frombuffer(piece, np.uint8)
        else:
            mat[:, at : at + w] = piece
        at += w
    return _unpad(mat, nogil)


def format_output(batch: Batch) -> bytes:
    """STREAM's text for a result batch: one `[τ]:+:v1, v2` / `[τ]:-:...` line per element, ints
    in decimal, floats as C's %g, text as stored, NULL as `null`, values separated by ", "."""
    n = len(batch)
    if n <= _CHUNK and _change_view(batch) is None:
        return bytes(_format_chunk(batch)) if n else b""  # already bytes without nogil (no copy)
    return b"".join(format_chunks(batch))


def _change_view(batch: Batch) -> ChangeView | None:
    """The change record `batch`'s rows are laid out from, when it offers one and its rows are
    not laid out yet (a writer thread's producer lays them out when the writer is behind, to take
    a share of its work: they are then formatted as they are)."""
    return batch.change_view() if isinstance(batch, DeferredBatch) and not batch.built else None


_CHUNK = 1 << 16  # rows per line matrix: a few MB, so the memory is reused (and cache-friendly)


def format_chunks(batch: Batch, nogil: bool = False) -> Iterator[Chunk]:
    """The text of a batch chunk by chunk (a large output is never joined into one copy).
    `nogil`: formatting on a thread beside the engine; spend some CPU to hold the GIL less."""
    view = _change_view(batch)
    if view is not None:  # a change record's rows: made from the record (io/change_text.py)
        from cqlstream.io.change_text import change_chunks  # (it builds on this module)

        assert isinstance(batch, DeferredBatch)
        yield from change_chunks(batch, view, nogil)
        return
    n = len(batch)
    for i in range(0, n, _CHUNK):
        yield _format_chunk(batch if n <= _CHUNK else batch.slice(i, min(i + _CHUNK, n)), nogil)


__all__ = ["format_chunks", "format_line", "format_output", "value_text"]
