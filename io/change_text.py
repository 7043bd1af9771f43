"""STREAM text of a change record's `−`/`+` row pairs, made from the record itself.

A grouped aggregate's result rows (engine/deferred_batch.py `ChangeRows`) are, per changed cell,
a `−` old row and a `+` new row with the same instant and group key. Formatting from the record
rather than from laid-out rows skips the layout (gathers and interleaving of every column) and
makes the text of the instant and the key once per cell, i.e. for half the lines: lines are
packed in uint64 words as in io/stream_text.py, a word holding only the instant, the key and
constant bytes is made once per cell and written into both lines of the pair (with its sign),
the words holding values once per line. Same bytes as the laid-out rows' text; a chunk with a
field wider than 8 bytes (floats, text, integers of 9+ characters) goes the usual way.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from cqlstream.engine.deferred_batch import ChangeRows, ChangeView, DeferredBatch
from cqlstream.io.stream_text import _CHUNK, _U8, Chunk, _field_words, _format_chunk, _int_words, _unpad, fold_bytes

_MINUS, _PLUS = 45, 43  # the sign of a pair's first line and of its second


def _wordable(dt: np.dtype) -> bool:
    """Whether `_field_words` can give a column of this dtype as words (value ranges permitting)."""
    return dt == np.bool_ or (dt.kind in "iu" and dt != np.uint64)


def change_chunks(batch: DeferredBatch, view: ChangeView, nogil: bool = False) -> Iterator[Chunk]:
    """The text of `batch` (whose rows are `view`'s record), chunk by chunk: up to _CHUNK / 2
    cells per chunk, from the record; a chunk this cannot make from it is `batch`'s rows there."""
    rec, picks = view.rec, view.picks
    nk = len(rec.keys)
    dts = [rec.keys[p].dtype if p < nk else rec.new[p - nk][0].dtype for p in picks]
    if not all(map(_wordable, dts)):  # floats, text: the rows' text, the usual way
        n = len(batch)
        for i in range(0, n, _CHUNK):
            yield _format_chunk(batch.slice(i, min(i + _CHUNK, n)), nogil)
        return
    order = rec.layout[0]
    nullable = nullable_values(rec)
    cells = _CHUNK // 2
    at = 0  # the first row of the chunk
    for lo in range(0, len(order), cells):
        oc = order[lo : lo + cells]
        dm, im = rec.dels[oc], rec.ins[oc]
        n = int(np.count_nonzero(dm)) + int(np.count_nonzero(im))
        if n:
            text = pairs_text(rec, picks, oc, dm, im, nullable, nogil)
            yield _format_chunk(batch.slice(at, at + n), nogil) if text is None else text
        at += n


def _place(terms: dict[int, list[np.ndarray]], at: int, x: np.ndarray, w: int) -> None:
    """Words `x` of a field of width `w` at byte `at`: word q gets x << 8r, word q + 1 the spill."""
    q, r = divmod(at, 8)
    terms.setdefault(q, []).append(x << np.uint64(8 * r) if r else x)
    if r + w > 8:
        terms.setdefault(q + 1, []).append(x >> np.uint64(64 - 8 * r))


def nullable_values(rec: ChangeRows) -> frozenset[int]:
    """The record columns (keys first) of the values that are NULL in some cell."""
    nk = len(rec.keys)
    return frozenset(nk + j for j, ((_, pn), (_, nl)) in enumerate(zip(rec.old, rec.new)) if pn.any() or nl.any())


def pairs_text(
    rec: ChangeRows,
    picks: tuple[int, ...],
    oc: np.ndarray,
    dm: np.ndarray,
    im: np.ndarray,
    nullable: frozenset[int],
    nogil: bool = False,
) -> Chunk | None:
    """The lines of cells `oc` (in ts order; `dm`/`im`: which have a `−` / `+` row), or None
    when a field does not fit in 8 bytes. `nullable`: `nullable_values(rec)`."""
    k = len(oc)
    nk = len(rec.keys)
    ts = _int_words(rec.ts[oc] + rec.tmin)
    if ts is None:
        return None
    both = bool(dm.all() and im.all())
    cells = rec.cell[oc]
    shared: dict[int, list[np.ndarray]] = {}  # word -> terms made once per cell
    sides: tuple[dict[int, list[np.ndarray]], dict[int, list[np.ndarray]]] = ({}, {})  # per line of the pair
    consts: dict[int, int] = {}
    signs: tuple[dict[int, int], dict[int, int]] = ({}, {})
    # constant bytes; None: the sign; (words, None, width): a field made once per cell;
    # (words of the `−` line, words of the `+` line, width): a value field
    pieces: list[bytes | tuple[np.ndarray, np.ndarray | None, int] | None] = [b"[", (ts[0], None, ts[1]), b"]:"]
    pieces += [None, b":"]
    for j, p in enumerate(picks):
        if j:
            pieces.append(b", ")
        if p < nk:
            km = rec.key_nulls[p]
            f = _field_words(rec.keys[p][oc], None if km is None else km[oc])
            if f is None:
                return None
            pieces.append((f[0], None, f[1]))
            continue
        (pv, pn), (v, nl) = rec.old[p - nk], rec.new[p - nk]
        # (a missing row's values are formatted too, then blanked: they only widen the padding)
        om, nm = (pn[cells], nl[cells]) if p in nullable else (None, None)
        fo, fn = _field_words(pv[cells].astype(v.dtype, copy=False), om), _field_words(v[cells], nm)
        if fo is None or fn is None:
            return None
        pieces.append((fo[0], fn[0], max(fo[1], fn[1])))
    pieces.append(b"\n")
    at = 0
    for piece in pieces:
        if isinstance(piece, bytes):
            at = fold_bytes(consts, at, piece)
        elif piece is None:
            q, r = divmod(at, 8)
            signs[0][q], signs[1][q] = _MINUS << (8 * r), _PLUS << (8 * r)
            at += 1
        else:
            xo, xn, w = piece
            if xn is None:
                _place(shared, at, xo, w)
            else:
                _place(sides[0], at, xo, w)
                _place(sides[1], at, xn, w)
            at += w
    K = (at + 7) // 8
    words = np.empty((k, 2, K), _U8)
    for q in range(K):
        base: np.ndarray | None = None  # the cell's shared bits of word q
        for x in shared.get(q, ()):
            base = x.copy() if base is None else np.bitwise_or(base, x, out=base)
        const = consts.get(q, 0)
        for s in (0, 1):
            out = words[:, s, q]  # a strided view: each line of the pair
            c = np.uint64(const | signs[s].get(q, 0))
            t = sides[s].get(q, [])
            if not t:
                if base is None:
                    out[...] = c
                else:
                    np.bitwise_or(base, c, out=out)
                continue
            if base is None:
                np.bitwise_or(t[0], c, out=out)
            else:
                np.bitwise_or(base, t[0], out=out)
                if c:
                    np.bitwise_or(out, c, out=out)
            for x in t[1:]:
                np.bitwise_or(out, x, out=out)
    if not both:  # a group appearing (no `−`) or emptied (no `+`): its missing line all padding
        words[np.flatnonzero(~dm), 0] = 0
        words[np.flatnonzero(~im), 1] = 0
    return _unpad(words, nogil)


__all__ = ["change_chunks", "nullable_values", "pairs_text"]
