"""Checks every decoded push passes before it reaches the engine, whatever its format: values the
engine could hold but no reader could use later. Each check is columnar (numpy / pyarrow kernels
over a whole column); only a failing column is scanned again to name its first bad row.

- timestamps within ±TS_LIMIT (window ends, watermarks and slacks add to them in int64);
- floats finite: NaN, ±Infinity and numbers beyond float64's range (1e400) are refused;
- text valid Unicode without NUL (a lone surrogate could not be written as UTF-8 by any result
  format), and no longer than its declared `char(N)` / `varchar(N)` (in characters).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from cqlstream.io.errors import IngestError
from cqlstream.io.lazy_compute import pc

# the largest |timestamp| (and heartbeat) accepted: with |t| ≤ 2^62, t ± a window, slack or 1 stays
# inside int64 for every window and slack up to 2^62, and the bound is the one the HTTP API's
# heartbeat and `until` parameters already use
TS_LIMIT = 1 << 62


def check_timestamps(ts: np.ndarray | None, field: str) -> None:
    """Refuse a timestamp outside ±TS_LIMIT, naming the first such row."""
    if ts is None or not len(ts):
        return
    bad = (ts > TS_LIMIT) | (ts < -TS_LIMIT)
    if bad.any():
        i = int(np.argmax(bad))
        raise IngestError(
            f"row {i} field '{field}': timestamp {int(ts[i])} is outside the accepted range ±2^62 ({TS_LIMIT})",
            i,
            field,
        )


def check_floats(col: np.ndarray, mask: np.ndarray | None, field: str) -> None:
    """Refuse NaN and ±Infinity (NULL rows are not looked at)."""
    bad = ~np.isfinite(col)
    if mask is not None:
        bad &= ~mask
    if bad.any():
        i = int(np.argmax(bad))
        raise IngestError(
            f"row {i} field '{field}': {col[i]!r} is not accepted: a float must be finite "
            "(NaN and ±Infinity are refused, and so are numbers beyond ±1.8e308)",
            i,
            field,
        )


def check_texts(
    col: np.ndarray | pa.Array | pa.ChunkedArray, mask: np.ndarray | None, field: str, length: int | None
) -> None:
    """Refuse a lone surrogate, a NUL character or (with a declared `length`) a longer string.
    `col` is a numpy column of str (NULL rows in `mask`) or an Arrow string column (NULLs its own)."""
    if not len(col):
        return
    arr: pa.Array | pa.ChunkedArray
    if isinstance(col, np.ndarray):
        try:
            arr = pa.array(col, type=pa.string(), from_pandas=False)
        except (UnicodeEncodeError, pa.ArrowInvalid, pa.ArrowTypeError):
            i = next(i for i, v in enumerate(col.tolist()) if not _encodable(v))
            raise IngestError(
                f"row {i} field '{field}': the text is not valid Unicode (a lone surrogate such as \\ud800 "
                "cannot be stored)",
                i,
                field,
            ) from None
        if mask is not None:
            arr = pc.if_else(pa.array(mask), pa.scalar(None, pa.string()), arr)
    else:
        arr = col  # Arrow strings are valid UTF-8: no surrogates
    nul = pc.match_substring(arr, "\x00")
    if pc.any(nul).as_py():
        i = _first(nul)
        raise IngestError(f"row {i} field '{field}': the text contains a NUL character (U+0000)", i, field)
    if length is not None:
        lengths = pc.utf8_length(arr)
        long = pc.greater(lengths, length)
        if pc.any(long).as_py():
            i = _first(long)
            raise IngestError(
                f"row {i} field '{field}': text of {lengths[i].as_py()} characters is longer than the "
                f"declared length {length}",
                i,
                field,
            )


def _encodable(v: object) -> bool:
    try:
        str(v).encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _first(flags: pa.Array | pa.ChunkedArray) -> int:
    """The first true position of a boolean column (NULLs are not true)."""
    return int(pc.index(pc.fill_null(flags, False), True).as_py())


__all__ = ["TS_LIMIT", "check_floats", "check_texts", "check_timestamps"]
