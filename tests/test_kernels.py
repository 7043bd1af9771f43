"""Property tests of the shared numpy kernels (engine/kernels.py) against plain Python models."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from cqlstream.engine import kernels as K

small_ints = st.integers(-5, 5)
any_ints = st.integers(-(2**40), 2**40) | small_ints | st.integers(0, 70000)


def _sorted_positions(keys):
    return sorted(range(len(keys)), key=lambda i: (keys[i], i))


@given(st.lists(any_ints, max_size=60), st.booleans())
def test_stable_order_is_a_stable_argsort(keys, give_bounds):
    k = np.array(keys, np.int64)
    lo, hi = (min(keys), max(keys)) if give_bounds and keys else (None, None)
    assert K.stable_order(k, lo, hi).tolist() == _sorted_positions(keys)


@settings(max_examples=20, deadline=None)
@given(st.integers(0, 2**32 - 1), st.sampled_from([4096, 5000, 20000]), st.sampled_from([1, 10, 1000, 70000, 2**40]))
def test_stable_order_of_large_batches(seed, n, span):
    """Long key arrays take the radix or the packed path, depending on n and the key span."""
    keys = np.random.default_rng(seed).integers(-3, span, n).tolist()
    assert K.stable_order(np.array(keys, np.int64)).tolist() == _sorted_positions(keys)


@given(st.lists(st.integers(-(2**62), 2**62), max_size=40))
def test_stable_order_of_keys_too_wide_to_pack(keys):
    assert K.stable_order(np.array(keys, np.int64)).tolist() == _sorted_positions(keys)


@given(st.lists(st.tuples(st.integers(-20, 20), st.integers(-3, 8)), max_size=30))
def test_concat_ranges(ranges):
    lo = np.array([a for a, _ in ranges], np.int64)
    hi = np.array([a + n for a, n in ranges], np.int64)
    model = [x for a, n in ranges for x in range(a, a + n)]
    assert K.concat_ranges(lo, hi).tolist() == model


@given(st.lists(st.tuples(st.integers(0, 30), st.integers(-2, 6)), max_size=30))
def test_expand_and_expand_pairs(ranges):
    start = np.array([a for a, _ in ranges], np.int64)
    cnt = np.array([n for _, n in ranges], np.int64)
    pairs = [(i, a + k) for i, (a, n) in enumerate(ranges) for k in range(max(n, 0))]
    rep, pos = K.expand(start, cnt)
    assert list(zip(rep.tolist(), pos.tolist())) == pairs
    p = np.arange(len(ranges), dtype=np.int64) * 10
    rows = np.arange(40, dtype=np.int64) + 100
    pp, rr = K.expand_pairs(p, rows, start, cnt)
    assert list(zip(pp.tolist(), rr.tolist())) == [(10 * i, 100 + x) for i, x in pairs]


@given(st.lists(st.integers(-5, 5), min_size=1, max_size=40))
def test_segments(data):
    d = np.array(data, np.int64)
    starts = np.array([i == 0 or data[i] > 2 for i in range(len(data))])
    out, acc = [], 0
    for x, s in zip(data, starts):
        acc = x if s else acc + x
        out.append(acc)
    assert K.seg_cumsum(d, starts).tolist() == out
    ends = K.starts_to_ends(starts).tolist()
    assert ends == [bool(starts[i + 1]) if i + 1 < len(data) else True for i in range(len(data))]


values = st.one_of(
    st.lists(any_ints, max_size=30).map(lambda v: np.array(v, np.int64)),
    st.lists(st.sampled_from([0.0, -0.0, 1.5, -2.0, float("nan"), 1e300]), max_size=30).map(
        lambda v: np.array(v, np.float64)
    ),
    st.lists(st.sampled_from(["", "a", "b", "ab", "é"]), max_size=30).map(lambda v: np.array(v, dtype=object)),
)


def _same_partition(codes, keys):
    """Equal keys ↔ equal codes."""
    seen: dict = {}
    back: dict = {}
    return all(seen.setdefault(k, c) == c and back.setdefault(c, k) == k for c, k in zip(codes, keys))


def _key(x):
    """A Python model key of one value: NaN equals NaN, -0.0 equals 0.0."""
    return "nan" if isinstance(x, float) and x != x else (x + 0.0 if isinstance(x, float) else x)


@given(values)
def test_factorize_codes_in_value_order(col):
    uniq, codes = K.factorize(col)
    keys = [_key(x) for x in col.tolist()]
    assert _same_partition(codes.tolist(), keys)
    assert len(uniq) == len(set(keys))
    assert [_key(x) for x in uniq[codes].tolist()] == keys
    assert all(uniq[i] < uniq[i + 1] for i in range(len(uniq) - 1) if uniq[i + 1] == uniq[i + 1])


@given(st.lists(st.integers(0, 5000), max_size=40), st.booleans())
def test_dense_codes(keys, wide):
    width = (1 << 50) if wide else 5001
    codes, k = K.dense_codes(np.array(keys, np.int64), width)
    rank = {v: i for i, v in enumerate(sorted(set(keys)))}
    assert codes.tolist() == [rank[v] for v in keys]
    assert k == len(rank)


@given(st.lists(any_ints, max_size=20), st.lists(any_ints, max_size=20))
def test_joint_dense(a, b):
    (ca, cb), n = K.joint_dense(np.array(a, np.int64), np.array(b, np.int64))
    rank = {v: i for i, v in enumerate(sorted(set(a + b)))}
    assert (ca.tolist(), cb.tolist(), n) == ([rank[v] for v in a], [rank[v] for v in b], len(rank))


@st.composite
def null_columns(draw):
    n = draw(st.integers(0, 25))
    cols, nulls = [], []
    for _ in range(draw(st.integers(1, 3))):
        kind = draw(st.sampled_from(["int", "wide", "float", "str", "bool"]))
        if kind == "int":
            v = np.array(draw(st.lists(small_ints, min_size=n, max_size=n)), np.int64)
        elif kind == "wide":
            v = np.array(draw(st.lists(st.integers(-(2**60), 2**60), min_size=n, max_size=n)), np.int64)
        elif kind == "float":
            v = np.array(draw(st.lists(st.sampled_from([0.0, 1.5, -3.0]), min_size=n, max_size=n)), np.float64)
        elif kind == "bool":
            v = np.array(draw(st.lists(st.booleans(), min_size=n, max_size=n)), bool)
        else:
            v = np.array(draw(st.lists(st.sampled_from(["x", "y", "zz"]), min_size=n, max_size=n)), dtype=object)
        m = draw(st.none() | st.lists(st.booleans(), min_size=n, max_size=n).map(lambda x: np.array(x, bool)))
        cols.append(v)
        nulls.append(m)
    return n, cols, nulls


def _row_keys(n, cols, nulls):
    """Model: each row as a tuple, NULL as (0,) (sorts before every value, as (1, v))."""
    return [
        tuple(
            (0,) if m is not None and m[i] else (1, c[i].item() if hasattr(c[i], "item") else c[i])
            for c, m in zip(cols, nulls)
        )
        for i in range(n)
    ]


@given(null_columns())
def test_column_codes_null_is_its_own_code(case):
    n, cols, nulls = case
    for c, m in zip(cols, nulls):
        codes, k = K.column_codes(c, m)
        keys = _row_keys(n, [c], [m])
        assert _same_partition(codes.tolist(), keys)
        assert all(0 <= x < k for x in codes.tolist())
        if m is not None and m.any():
            assert set(codes[m].tolist()) == {0}


@given(null_columns())
def test_row_codes_are_dense_and_in_lexicographic_order(case):
    n, cols, nulls = case
    codes, k = K.row_codes(cols, nulls)
    keys = _row_keys(n, cols, nulls)
    rank = {v: i for i, v in enumerate(sorted(set(keys)))}
    assert codes.tolist() == [rank[r] for r in keys]
    assert k == len(rank)


def test_row_codes_without_columns():
    codes, k = K.row_codes([], [], 4)
    assert codes.tolist() == [0, 0, 0, 0] and k == 1


@settings(deadline=None)  # the first example imports pyarrow
@given(st.lists(st.sampled_from(["a", "b", "c", ""]) | st.integers(0, 3), max_size=30))
def test_factorize_objects_in_order_of_appearance(vals):
    v = np.empty(len(vals), object)
    v[:] = vals
    first: dict = {}
    model = [first.setdefault((type(x), x), len(first)) for x in vals]
    assert K.factorize_objects(v).tolist() == model


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.integers(-(2**62), 2**62 - 1), max_size=40),
    st.sampled_from([1, 3, 1 << 20, 1 << 40, 1 << 62]),
)
def test_unique_inverse_equals_np_unique(vals, spread):
    x = np.asarray([v % spread - spread // 2 for v in vals], np.int64)
    got = K.unique_inverse(x)
    u, inv = np.unique(x, return_inverse=True)
    if got is None:  # only when the values span too much to pack
        assert (int(x.max()) - int(x.min())).bit_length() + max(len(x) - 1, 0).bit_length() > 62
        return
    assert got[0].tolist() == u.tolist() and got[1].tolist() == inv.reshape(-1).tolist()


@settings(max_examples=25, deadline=None)
@given(
    st.integers(0, 2**32 - 1),
    st.sampled_from([2, 100, 4096, 20000, 70000, 200000]),
    st.sampled_from([1, 10, 1000, 40000, 70000, 2**40]),
)
def test_sorted_order_gives_the_order_and_the_sorted_keys(seed, n, span):
    """Every path (uint32 words, radix, int64 words, argsort) gives numpy's stable argsort and
    the keys in that order, of the keys' own dtype."""
    keys = np.random.default_rng(seed).integers(-3, span, n)
    order, skeys = K.sorted_order(keys)
    want = np.argsort(keys, kind="stable")
    assert order.dtype == np.int64 and np.array_equal(order, want)
    assert skeys.dtype == keys.dtype and np.array_equal(skeys, keys[want])
    assert np.array_equal(K.stable_order(keys, int(keys.min()), int(keys.max())), want)


@settings(max_examples=60, deadline=None)
@given(st.lists(any_ints, max_size=60), st.integers(0, 3))
def test_unique_rows_names_the_last_row_of_each_value(keys, repeat):
    x = np.array(keys * (repeat + 1), np.int64)
    got = K.unique_rows(x)
    assert got is not None
    uniq, inv, last = got
    assert uniq.tolist() == sorted(set(x.tolist()))
    assert np.array_equal(uniq[inv], x)
    assert last.tolist() == [max(i for i, v in enumerate(x.tolist()) if v == u) for u in uniq.tolist()]
