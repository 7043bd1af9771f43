"""The shortcuts of the aggregates' group keys and exact sums (session 16): the direct table over
a whole small packed layout, a compaction that keeps the sorted packed keys instead of
re-interning them, and the exact float sums computed with padded prefix sums.

Each shortcut is checked against the path it replaces: the same ids as a dict model (and as a
fresh instance interning the live keys), the same bits as the plain compensated-sum formulas.
"""

from __future__ import annotations

from functools import partial

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cqlstream.cql.types import FLOAT, INT, VARCHAR
from cqlstream.engine.aggregates.cells import group_base
from cqlstream.engine.aggregates.exact_sum import fsum_cells, two_sum
from cqlstream.engine.aggregates.keys import GroupKeys

SETTINGS = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow])
TYPES = {"int": INT, "float": FLOAT, "str": VARCHAR}


def _col(vals: list, kind: str) -> tuple[np.ndarray, np.ndarray | None]:
    m = np.array([v is None for v in vals], bool)
    if kind == "int":
        v = np.array([0 if x is None else x for x in vals], np.int64)
    elif kind == "float":
        v = np.array([0.0 if x is None else x for x in vals], np.float64)
    else:
        v = np.array(["" if x is None else x for x in vals], object)
    return v, (m if m.any() else None)


def _value(kind: str, spread: int) -> st.SearchStrategy:
    if kind == "int":
        return st.one_of(st.integers(-spread, spread), st.just(None))
    if kind == "float":
        return st.one_of(st.sampled_from([0.5, 2.0, -1.25, 3.0]), st.just(None))
    return st.one_of(st.sampled_from(["x", "y", "zz"]), st.just(None))


@settings(max_examples=120, **SETTINGS)
@given(st.data())
def test_whole_layout_table_maps_keys_past_the_known_ones(data):
    """Small int keys: after the first batch the direct table spans the whole layout, and later
    batches, with keys below, among and past those known, map through it to the model's ids
    (new keys in key order, one row given for each)."""
    ncols = data.draw(st.integers(1, 3))
    gk = GroupKeys([INT] * ncols)
    seen: dict[tuple, int] = {}
    for _ in range(data.draw(st.integers(2, 7))):
        n = data.draw(st.integers(1, 15))
        rows = [tuple(data.draw(_value("int", 3)) for _ in range(ncols)) for _ in range(n)]
        cols = [_col([r[i] for r in rows], "int") for i in range(ncols)]
        before = gk.n
        gid = gk.map([c[0] for c in cols], [c[1] for c in cols], n).tolist()
        new = sorted({r for r in rows if r not in seen}, key=lambda r: tuple((x is not None, x or 0) for x in r[::-1]))
        for i, r in enumerate(new):
            seen[r] = before + i
        assert gid == [seen[r] for r in rows]
        new_ids, new_rows = (a.tolist() for a in gk.fresh)
        assert sorted(new_ids) == list(range(before, gk.n))
        assert all(seen[rows[i]] == g for g, i in zip(new_ids, new_rows))
        it = gk.packed
        assert it is not None and it.table is not None and len(it.table) == it.full  # the whole layout


@settings(max_examples=120, **SETTINGS)
@given(st.data())
def test_compaction_gives_the_ids_of_a_fresh_instance(data):
    """`GroupKeys.compacted` (the live keys kept sorted and re-packed) numbers the live groups as
    a fresh instance interning their keys does, with the same layout, and both map later batches
    alike; with string columns it falls back to interning them."""
    kinds = data.draw(st.lists(st.sampled_from(["int", "int", "float", "str"]), min_size=1, max_size=3))
    spread = data.draw(st.sampled_from([3, 1000, 2**40]))
    gk = GroupKeys([TYPES[k] for k in kinds])
    model: dict[int, tuple] = {}  # live group id → its key
    for _ in range(data.draw(st.integers(1, 5))):
        n = data.draw(st.integers(1, 12))
        rows = [tuple(data.draw(_value(k, spread)) for k in kinds) for _ in range(n)]
        cols = [_col([r[i] for r in rows], k) for i, k in enumerate(kinds)]
        for g, r in zip(gk.map([c[0] for c in cols], [c[1] for c in cols], n).tolist(), rows):
            model[g] = r
        if gk.packed is not None and len(model) > 1 and data.draw(st.booleans()):  # some groups empty: released
            gone = data.draw(st.lists(st.sampled_from(sorted(model)), unique=True, max_size=len(model) - 1))
            gk.release(np.array(gone, np.int64))
            for g in gone:
                del model[g]
    live = np.array(data.draw(st.lists(st.sampled_from(sorted(model)), unique=True, min_size=1)), np.int64)
    cols = [_col([model[g][i] for g in live.tolist()], k) for i, k in enumerate(kinds)]
    kv, kn = [c[0] for c in cols], [c[1] for c in cols]
    fresh, newg = gk.compacted(live, kv, kn)
    ref = GroupKeys(gk.types)
    assert newg.tolist() == ref.map(kv, kn, len(live)).tolist()
    assert fresh.n == ref.n and fresh.layout == ref.layout
    n = data.draw(st.integers(1, 10))
    rows = [tuple(data.draw(_value(k, spread)) for k in kinds) for _ in range(n)]
    cols = [_col([r[i] for r in rows], k) for i, k in enumerate(kinds)]
    args = ([c[0] for c in cols], [c[1] for c in cols], n)
    assert fresh.map(*args).tolist() == ref.map(*args).tolist()


def _fsum_cells_plain(x, ce, cell_gs, carry_hi, carry_lo):
    """The formulas as first written (before the in-place rewrite), for the bitwise comparison."""
    s = np.cumsum(x)
    prev = np.empty_like(s)
    if len(s):
        prev[0] = 0.0
        prev[1:] = s[:-1]
    with np.errstate(invalid="ignore", over="ignore"):
        bb = s - prev
        err = (prev - (s - bb)) + (x - bb)
        err = np.where(np.isfinite(err), err, 0.0)
        c = np.cumsum(err)
        s_pad = np.concatenate([[0.0], s])
        c_pad = np.concatenate([[0.0], c])
        d, e1 = two_sum(s_pad[ce + 1], -s_pad[cell_gs])
        hi, e2 = two_sum(d, carry_hi)
        lo = (e1 + e2) + (c_pad[ce + 1] - c_pad[cell_gs]) + carry_lo
        hi, lo = two_sum(hi, lo)
        lo = np.where(np.isfinite(lo), lo, 0.0)
    return hi, lo


finite = st.sampled_from([0.1, -0.1, 1e16, -1e16, 3.0, 2.5e-300, -7.75, 1e308, -1e308, 0.0, -0.0])


@settings(max_examples=200, **SETTINGS)
@given(st.lists(st.one_of(finite, st.sampled_from([float("inf"), float("nan")])), min_size=1, max_size=40), st.data())
def test_exact_sums_are_bitwise_those_of_the_plain_formulas(x, data):
    """Cells of one event each and of several, groups of several cells, carried totals."""
    n = len(x)
    ends = sorted(set(data.draw(st.lists(st.integers(0, n - 1), max_size=n))) | {n - 1})
    ce = np.array(ends, np.int64)
    starts = [0] + [e + 1 for e in ends[:-1]]  # a cell's group starts at or before the cell
    gs = np.array([data.draw(st.sampled_from(starts[: i + 1])) for i in range(len(ends))], np.int64)
    gs = np.maximum.accumulate(gs)  # groups are contiguous: a later cell's group starts no earlier
    hi0 = np.array([data.draw(finite) for _ in ends])
    lo0 = np.array([data.draw(st.sampled_from([0.0, 1e-17, -3e-20])) for _ in ends])
    xs = np.array(x, np.float64)
    with np.errstate(over="ignore", invalid="ignore"):  # (infinite prefix sums are part of the test)
        first = np.searchsorted(np.array(starts, np.int64), gs)  # each cell's group's first cell
        got = fsum_cells(xs, ce, partial(group_base, first=first), hi0, lo0)
        want = _fsum_cells_plain(xs, ce, gs, hi0, lo0)
    for a, b in zip(got, want):
        assert a.tobytes() == b.tobytes()
