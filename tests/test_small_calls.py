"""The fixed cost of small operator calls (bench/README.md, session 18): the paths that replaced
numpy's Python wrappers and the per-call constant columns must give exactly what they replaced.

- constant operands of arithmetic, comparisons and division (engine/exprs.py `_scalar`): each
  expression with a constant equals the same expression reading a column holding that constant
  (the general path), values, dtype and NULL mask, over negative, zero and NULL values, constants
  on either side, integer (truncating) and float division, and a zero divisor (NULL);
- the same queries through the engine against the reference evaluator at 1, 7 and all events
  per push, paper and compat mode;
- `kernels.run_lengths` / `filled` against `np.diff(np.append(...))` / `np.full`.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from cqlstream.cql.logical import expr as X
from cqlstream.cql.types import DataType
from cqlstream.engine.batch import Batch
from cqlstream.engine.exprs import Evaluator
from cqlstream.engine.kernels import filled, run_lengths
from tests.engine_harness import assert_same

INT, FLOAT, BOOL = DataType("int"), DataType("float"), DataType("bool")

OPS = {  # op → result type given the operands' type
    "+": lambda t: t,
    "-": lambda t: t,
    "*": lambda t: t,
    "div": lambda t: INT,
    "/": lambda t: FLOAT,
    "=": lambda t: BOOL,
    "<>": lambda t: BOOL,
    "<": lambda t: BOOL,
    ">=": lambda t: BOOL,
}


def _batch(values: list[int | None], kind: str, const: object) -> Batch:
    """Column 0: the values (None = NULL); column 1: the constant in every row."""
    dt = np.int64 if kind == "int" else np.float64
    nulls = np.array([v is None for v in values], bool)
    col = np.array([0 if v is None else v for v in values], dt)
    n = len(values)
    return Batch(
        [col, np.full(n, const, dt)],
        [nulls if nulls.any() else None, None],
        np.arange(n, dtype=np.int64),
        np.ones(n, np.int8),
        np.arange(n, dtype=np.uint64),
    )


def _same(got: tuple, want: tuple) -> None:
    (gv, gm), (wv, wm) = got, want
    assert gv.dtype == wv.dtype and gv.shape == wv.shape
    if gv.dtype.kind == "f":
        assert np.array_equal(gv, wv, equal_nan=True)
    else:
        assert np.array_equal(gv, wv)
    gm = np.zeros(len(gv), bool) if gm is None else gm
    wm = np.zeros(len(wv), bool) if wm is None else wm
    assert np.array_equal(gm, wm)


@given(
    st.lists(st.one_of(st.integers(-40, 40), st.none()), max_size=12),
    st.sampled_from(sorted(OPS)),
    st.integers(-7, 7),
    st.sampled_from(["int", "float"]),
    st.booleans(),
)
def test_constant_operand_equals_a_constant_column(values, op, const, kind, const_first):
    t = INT if kind == "int" else FLOAT
    if op == "div" and kind != "int":
        op = "/"
    value = const if kind == "int" else float(const) / 2
    b = _batch(values, kind, value)
    col, ccol, c = X.ColRef(0, t), X.ColRef(1, t), X.Const(value, t)
    args, general = ((c, col), (ccol, col)) if const_first else ((col, c), (col, ccol))
    rt = OPS[op](t)
    ev = Evaluator()
    _same(ev.eval(X.Op(op, args, rt), b), ev.eval(X.Op(op, general, rt), b))


def test_integer_division_by_a_constant_truncates():
    b = _batch([-7, -6, -1, 0, 1, 6, 7, None], "int", 0)
    ev = Evaluator()
    for d in (3, -3, 1, -1):
        v, m = ev.eval(X.Op("div", (X.ColRef(0, INT), X.Const(d, INT)), INT), b)
        want = [int(x / d) for x in (-7, -6, -1, 0, 1, 6, 7)]  # toward zero, as C
        assert v[:7].tolist() == want and m is not None and m.tolist() == [False] * 7 + [True]
    v, m = ev.eval(X.Op("div", (X.ColRef(0, INT), X.Const(0, INT)), INT), b)
    assert m is not None and m.all()  # by zero: NULL (the general path)


DDL = "register stream S (a int, b int); register relation R (a int, b float);"
QUERIES = [
    "select a / 3, a * 2 + 1, 5 - b from S where a <> 2 and 3 >= b",
    "Istream(select a / 2, b * 100 + a from S [Range 2] where a = 1 or b > 0)",
    "select a, b / 2.0, b + 0.5 from R where b < 2.5",
    "select a / 0, 7 / a from S",
]


@st.composite
def stream_events(draw):
    events, t = [], draw(st.integers(0, 2))
    for _ in range(draw(st.integers(0, 16))):
        t += draw(st.sampled_from([0, 0, 1, 2]))
        events.append((t, tuple(draw(st.one_of(st.integers(-5, 5), st.none())) for _ in range(2))))
    return events


@st.composite
def relation_events(draw):
    events, held, t = [], [], 0
    for _ in range(draw(st.integers(0, 10))):
        t += draw(st.sampled_from([0, 1, 2]))
        if held and draw(st.booleans()):
            events.append((t, -1, held.pop(draw(st.integers(0, len(held) - 1)))))
        else:
            row = (draw(st.integers(-3, 3)), draw(st.sampled_from([-1.5, 0.0, 1.25, 2.5, None])))
            held.append(row)
            events.append((t, 1, row))
    return events


@pytest.mark.parametrize("query", QUERIES)
@given(s=stream_events(), r=relation_events(), compat=st.booleans())
def test_queries_with_constants_equal_reference(query, s, r, compat):
    assert_same(DDL, query, {"S": s, "R": r}, compat=compat)


@given(st.lists(st.integers(0, 3), max_size=30))
def test_run_lengths_and_filled(xs):
    x = np.array(sorted(xs), np.int64)
    first = (np.flatnonzero(np.concatenate(([True], x[1:] != x[:-1]))) if len(x) else np.zeros(0, np.int64)).astype(
        np.int64
    )
    got = run_lengths(first, len(x))
    want = np.diff(np.append(first, len(x)))
    assert got.dtype == np.int64 and got.tolist() == want.tolist()
    assert int(got.sum()) == len(x)
    for value, dt in ((True, bool), (-1, np.int8), (2**62, np.int64)):
        f = filled(len(xs), value, dt)
        assert f.dtype == np.full(len(xs), value, dt).dtype and f.tolist() == np.full(len(xs), value, dt).tolist()
