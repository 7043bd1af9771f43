"""The writer threads' way of removing the line padding (`format_chunks(..., nogil=True)`: a
boolean-mask selection, which releases the GIL) must give exactly the bytes of the inline way (`bytes.translate`), on both
line assemblies (uint64 words and byte matrices), with NULLs, text and chunk boundaries."""

from __future__ import annotations

import threading

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from cqlstream.io import stream_text
from cqlstream.io.result_writer import ResultWriter
from cqlstream.io.stream_text import format_chunks, format_output
from tests.test_stream_script import _batch


def _both(b):
    inline = b"".join(format_chunks(b))
    threaded = b"".join(format_chunks(b, nogil=True))
    return inline, threaded


@settings(max_examples=80, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.integers(-(2**40), 2**40) | st.none(),
            st.floats(allow_nan=True, allow_infinity=True) | st.none(),
            st.text(max_size=6) | st.none(),
            st.integers(0, 1000),
            st.booleans(),
        ),
        min_size=1,
        max_size=60,
    ),
    st.booleans(),
)
def test_nogil_bytes_equal_inline_bytes(rows, narrow):
    ints = [r[0] for r in rows]
    ts = sorted(r[3] for r in rows)
    sign = [1 if r[4] else -1 for r in rows]
    icol = np.array([0 if v is None else v for v in ints], np.int64)
    cols = [icol % 1000 if narrow else icol]  # narrow: every field fits a uint64 word
    masks = [np.array([v is None for v in ints])]
    if not narrow:
        flts, txts = [r[1] for r in rows], [r[2] for r in rows]
        cols += [
            np.array([0.0 if v is None else v for v in flts], np.float64),
            np.array(["" if v is None else v for v in txts] + [None], dtype=object)[:-1],
        ]
        masks += [np.array([v is None for v in flts]), np.array([v is None for v in txts])]
    nulls = [m if m.any() else None for m in masks]
    b = _batch(cols, ts=ts, sign=sign, nulls=nulls)
    inline, threaded = _both(b)
    assert threaded == inline == format_output(b)


def test_nogil_across_chunks():
    n = 150_000
    a = np.arange(n) * 7 - 5000
    for cols in ([a, a % 100], [a, a * 0.5]):  # words, byte matrix
        inline, threaded = _both(_batch(cols, ts=np.arange(n) // 3, sign=np.where(a % 2 == 0, 1, -1)))
        assert threaded == inline
        assert inline.count(b"\n") == n and b"\0" not in inline


def test_writer_threads_remove_the_padding_without_the_gil(tmp_path, monkeypatch):
    """A writer thread formats with `nogil` (the engine's thread is not held up by its padding
    removal) and writes the inline bytes; the inline writer keeps `bytes.translate`."""
    seen: list[tuple[str, bool]] = []
    unpad = stream_text._unpad

    def spy(a, nogil):
        seen.append((threading.current_thread().name, nogil))
        return unpad(a, nogil)

    monkeypatch.setattr(stream_text, "_unpad", spy)
    n = 100_000
    a = np.arange(n) * 7 - 5000
    text = np.array([f"k{v % 13}" if v % 5 else "" for v in a.tolist()], dtype=object)
    rnd = [
        (0, _batch([a, a % 100], ts=np.arange(n) // 3, sign=np.where(a % 3 == 0, 1, -1))),
        (0, _batch([a], ts=[n] * n)),
        (0, _batch([text, a * 0.25], ts=n + np.arange(n), nulls=[a % 7 == 0, a % 11 == 0])),  # text, floats, NULLs
        (0, _batch([a[:0]], ts=[])),  # an empty result
    ]
    out = []
    for workers in (0, 1):
        path = tmp_path / f"w{workers}.txt"
        with open(path, "wb") as f:
            w = ResultWriter([f], workers=workers)
            w.write(rnd)
            w.write(rnd[1:])  # a second round
            w.close()
        out.append(path.read_bytes())
    assert out[0] == out[1] and out[0].count(b"\n") == 5 * n and b"null" in out[0]
    assert {g for name, g in seen if name.startswith("cqlstream-writer")} == {True}
    assert {g for name, g in seen if name == threading.current_thread().name} == {False}
