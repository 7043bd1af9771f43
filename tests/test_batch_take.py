"""Batch.take, Batch.copy_range and concat (engine/batch.py) against the plain versions: numpy
fancy indexing of every array, slices, and Python lists of rows."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cqlstream.cql.types import FLOAT, INT, VARCHAR
from cqlstream.engine.batch import Batch, concat, from_rows

TYPES = [INT, FLOAT, VARCHAR]
row = st.tuples(
    st.integers(-5, 5) | st.none(), st.floats(-2, 2) | st.none(), st.sampled_from(["a", "bc", ""]) | st.none()
)


@st.composite
def batches(draw, min_size=0):
    rows = draw(st.lists(row, min_size=min_size, max_size=15))
    n = len(rows)
    return from_rows(
        rows,
        TYPES,
        ts=sorted(draw(st.lists(st.integers(0, 9), min_size=n, max_size=n))),
        sign=draw(st.lists(st.sampled_from([1, -1]), min_size=n, max_size=n)),
        ids=list(range(100, 100 + n)),
    )


def _plain_take(b: Batch, idx) -> Batch:
    return Batch(
        [c[idx] for c in b.cols], [None if m is None else m[idx] for m in b.nulls], b.ts[idx], b.sign[idx], b.id[idx]
    )


def _same(a: Batch, b: Batch) -> None:
    assert a.elements() == b.elements()
    assert a.id.tolist() == b.id.tolist()
    for x, y in zip(a.cols + [a.ts, a.sign, a.id], b.cols + [b.ts, b.sign, b.id]):
        assert x.dtype == y.dtype and x.shape == y.shape
    assert [m is None for m in a.nulls] == [m is None for m in b.nulls]


@st.composite
def indexes(draw, n):
    kind = draw(st.sampled_from(["mask", "array", "list", "slice", "empty"]))
    if kind == "mask":
        return np.array(draw(st.lists(st.booleans(), min_size=n, max_size=n)), bool)
    if kind == "slice":
        return slice(
            draw(st.integers(-n - 1, n + 1)), draw(st.integers(-n - 1, n + 1)), draw(st.sampled_from([None, 1, 2, -1]))
        )
    if kind == "empty":
        return np.zeros(0, np.int64) if draw(st.booleans()) else []
    pos = draw(st.lists(st.integers(-n, n - 1), max_size=20)) if n else []
    return pos if kind == "list" else np.array(pos, draw(st.sampled_from([np.int64, np.int32, np.intp])))


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_take_equals_fancy_indexing(data):
    b = data.draw(batches())
    idx = data.draw(indexes(len(b)))
    _same(b.take(idx), _plain_take(b, idx))


def test_take_rejects_a_mask_of_another_length():
    b = from_rows([(1, 1.0, "a"), (2, 2.0, "b")], TYPES, ts=[0, 1])
    with pytest.raises(IndexError):
        b.take(np.array([True, False, True]))


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_copy_range_is_the_slice_copied(data):
    b = data.draw(batches())
    start = data.draw(st.integers(0, len(b)))
    stop = data.draw(st.integers(start, len(b)))
    got = b.copy_range(start, stop)
    _same(got, b.slice(start, stop))
    for x, y in zip(got.cols + [got.ts, got.sign, got.id], b.cols + [b.ts, b.sign, b.id]):
        assert not np.shares_memory(x, y)  # copies: the source batch can be freed


@settings(max_examples=200, deadline=None)
@given(st.lists(batches(), max_size=4))
def test_concat_equals_the_rows_one_after_another(parts):
    got = concat(parts, TYPES)
    assert got.elements() == [e for p in parts for e in p.elements()]
    assert got.id.tolist() == [i for p in parts for i in p.id.tolist()]
