"""STREAM output text built in uint64 words (io/stream_text.py `_format_chunk`): lines whose
fields all fit in 8 bytes (integers of up to 8 characters, booleans, NULLs) must be exactly the
per-line reference text, whatever the chunk boundaries and value ranges (table, run and direct
digit paths, negative numbers, fields straddling two words)."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from cqlstream.io import stream_text
from cqlstream.io.stream_text import format_output
from tests.test_stream_script import _batch, _ref_line

_small = st.integers(-70_000, 70_000)
_word = st.integers(-9_999_999, 99_999_999)  # the widest integers that fit in 8 characters


@settings(max_examples=150, deadline=None)
@given(
    st.lists(
        st.tuples(
            _word | _small | st.none(),
            _small | st.none(),
            st.booleans() | st.none(),
            st.integers(0, 99_999_999),
            st.booleans(),
        ),
        min_size=1,
        max_size=80,
    ),
    st.integers(1, 4),
)
def test_word_lines_match_reference_text(rows, ncols):
    a = [r[0] for r in rows]
    b = [r[1] for r in rows]
    c = [r[2] for r in rows]
    ts = sorted(r[3] for r in rows)
    sign = [1 if r[4] else -1 for r in rows]
    cols = [
        np.array([0 if v is None else v for v in a], np.int64),
        np.array([0 if v is None else v for v in b], np.int64),
        np.array([False if v is None else v for v in c], bool),
        np.array([0 if v is None else v for v in b], np.int64) * 3,
    ]
    vals = [a, b, c, [None if v is None else 3 * v for v in b]]
    nulls = [np.array([v is None for v in x]) for x in vals]
    nulls = [m if m.any() else None for m in nulls]
    got = format_output(_batch(cols[:ncols], ts=ts, sign=sign, nulls=nulls[:ncols])).decode()
    want = "".join(_ref_line(t, s, row) for t, s, row in zip(ts, sign, zip(*vals[:ncols])))
    assert got == want


def test_word_lines_across_chunks_and_paths(monkeypatch):
    monkeypatch.setattr(stream_text, "_CHUNK", 8000)  # two full chunks, then 1,000 rows
    rng = np.random.default_rng(3)
    n = 17_000
    ts = np.sort(rng.integers(0, 40_000_000, n))  # runs of equal timestamps are rare here
    ts[:6000] = np.repeat(np.arange(30), 200) + 12_345_678  # ... and frequent here
    cols = [
        rng.integers(0, 100, n),
        rng.integers(-9_999_999, 9_999_999, n),  # table / direct digits
        rng.integers(-5_000, 5_000, n),
        rng.integers(100_000, 103_000, n),
    ]  # small span above 2**16
    sign = np.where(rng.random(n) < 0.5, 1, -1)
    got = format_output(_batch(cols, ts=ts, sign=sign)).decode()
    want = "".join(_ref_line(int(t), int(s), tuple(int(c[i]) for c in cols)) for i, (t, s) in enumerate(zip(ts, sign)))
    assert got == want


def test_wide_fields_fall_back_to_the_byte_matrix():
    cols = [np.array([1, 2], np.int64), np.array([123456789, -12345678], np.int64), np.array([0.5, 2.0])]
    got = format_output(_batch(cols, ts=[5, 6])).decode()
    assert got == "[5]:+:1, 123456789, 0.5\n[6]:+:2, -12345678, 2\n"


def test_small_integers_before_and_after_their_table_is_built(monkeypatch):
    """Values within ±2**16 are formatted directly until as many were written as the table
    holds, then from the table: the same text either way (short and long columns, negatives)."""
    rng = np.random.default_rng(7)
    for n in (3, 2_500):
        ts = np.sort(rng.integers(0, 60_000, n))
        cols = [rng.integers(-65_536, 65_536, n), rng.integers(0, 300, n)]
        sign = np.where(rng.random(n) < 0.5, 1, -1)
        want = "".join(
            _ref_line(int(t), int(s), tuple(int(c[i]) for c in cols)) for i, (t, s) in enumerate(zip(ts, sign))
        )
        for seen, table in ((0, None), (1 << 20, None), (0, stream_text._small_table())):
            monkeypatch.setattr(stream_text, "_small_words", table)
            monkeypatch.setattr(stream_text, "_small_formatted", seen)
            assert format_output(_batch(cols, ts=ts, sign=sign)).decode() == want
    monkeypatch.setattr(stream_text, "_small_words", None)
    monkeypatch.setattr(stream_text, "_small_formatted", 0)
    format_output(_batch([np.arange(10)], ts=np.arange(10)))
    assert stream_text._small_words is None  # a few values: no table built
