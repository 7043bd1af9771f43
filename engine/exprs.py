"""Vectorized evaluation of typed scalar expressions over a batch, with NULL masks (SQL 3VL).

`evaluate(expr, batch) -> (values, nulls)`: values is a numpy array of the expression's type,
nulls a boolean mask or None. Semantics follow docs/semantics.md.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import DTypeLike

from cqlstream.cql.functions import FunctionRegistry, ScalarFunction
from cqlstream.cql.logical import expr as X
from cqlstream.cql.types import DataType
from cqlstream.engine.batch import Batch, dtype_of
from cqlstream.engine.errors import EngineError

if TYPE_CHECKING:
    from cqlstream.cql.analyzer import RelationArg

Col = tuple[np.ndarray, "np.ndarray | None"]
OpKernel = Callable[["Evaluator", X.Op, Batch], Col]  # an operator over a batch
FnKernel = Callable[[X.Func, list[Col], int], Col]  # a built-in function over its evaluated arguments


def _or_masks(*masks: np.ndarray | None) -> np.ndarray | None:
    out: np.ndarray | None = None
    for m in masks:
        if m is not None:
            out = m if out is None else (out | m)
    return out


def _full(n: int, value: object, t: DataType) -> np.ndarray:
    dt = dtype_of(t)
    if dt is object:
        arr = np.empty(n, dtype=object)
        arr[:] = [value] * n if n else []
        return arr
    return np.full(n, value, dtype=dt)


class Evaluator:
    """Evaluates expressions; holds the function registry (UDF implementations)."""

    def __init__(self, functions: FunctionRegistry | None = None) -> None:
        self.functions = functions or FunctionRegistry()

    def eval(self, e: X.Expr, b: Batch) -> Col:
        return getattr(self, "_" + type(e).__name__)(e, b)

    def predicate(self, e: X.Expr, b: Batch) -> np.ndarray:
        """Boolean mask of rows where the predicate is TRUE (NULL counts as false)."""
        v, m = self.eval(e, b)
        v = v.astype(bool, copy=False)
        return v if m is None else (v & ~m)

    # ---------------------------------------------------------- leaves
    def _ColRef(self, e: X.ColRef, b: Batch) -> Col:
        return b.cols[e.index], b.nulls[e.index]

    def _Const(self, e: X.Const, b: Batch) -> Col:
        n = len(b)
        if e.value is None:
            return _full(n, 0 if dtype_of(e.type) is not object else None, e.type), np.ones(n, bool)
        return _full(n, e.value, e.type), None

    # ---------------------------------------------------------- operators
    def _Op(self, e: X.Op, b: Batch) -> Col:
        return _OPS[e.op](self, e, b)

    def _Func(self, e: X.Func, b: Batch) -> Col:
        args = [self.eval(a, b) for a in e.args]
        kernel = _FUNCS.get(e.name)
        if kernel is not None:
            return kernel(e, args, len(b))
        fn = self.functions.scalar(e.name)
        if fn is None or fn.impl is None:
            raise EngineError("no_implementation", f"function {e.name} has no implementation")
        return _call_udf(fn, e, args, len(b))

    def _CaseWhen(self, e: X.CaseWhen, b: Batch) -> Col:
        if e.default.type.kind == "null":  # no ELSE: NULL of the CASE's own type
            out = _full(len(b), 0 if dtype_of(e.type) is not object else "", e.type)
            mask = np.ones(len(b), bool)
        else:
            out, default_mask = self.eval(e.default, b)
            out = out.astype(dtype_of(e.type), copy=True)
            mask = np.zeros(len(b), bool) if default_mask is None else default_mask.copy()
        for cond, res in reversed(e.whens):
            hit = self.predicate(cond, b)
            if res.type.kind == "null":  # THEN NULL: its values are placeholders of no type
                mask[hit] = True
                continue
            rv, rm = self.eval(res, b)
            out[hit] = rv[hit].astype(out.dtype, copy=False) if out.dtype != object else rv[hit]
            mask[hit] = False if rm is None else rm[hit]
        return out, (mask if mask.any() else None)

    def _Cast(self, e: X.Cast, b: Batch) -> Col:
        v, m = self.eval(e.operand, b)
        return _cast(v, m, e.operand.type, e.type)

    def _RelationArg(self, e: RelationArg, b: Batch) -> Col:
        return _full(len(b), e.name, e.type), None


def _cast(v: np.ndarray, m: np.ndarray | None, src: DataType, dst: DataType) -> Col:
    k = dst.kind
    if k in ("char", "varchar", "byte"):
        if src.kind == "float":
            out = np.array([format_float(x) for x in v.tolist()], dtype=object)
        else:
            out = np.array(
                [str(x) if not isinstance(x, bool) else ("true" if x else "false") for x in v.tolist()], dtype=object
            )
        return (out if len(out) else np.zeros(0, object)), m
    if v.dtype != object:
        if k in ("int", "timestamp") and v.dtype == np.float64:
            bad = ~np.isfinite(v)
            out = np.trunc(np.where(bad, 0, v)).astype(np.int64)
            return out, _or_masks(m, bad if bad.any() else None)
        return v.astype(dtype_of(dst)), m
    # text → number / bool: parse each value, unparsable → NULL
    parsers: dict[str, Callable[[str], object]] = {
        "int": int,
        "timestamp": int,
        "float": float,
        "bool": lambda s: {"true": True, "false": False}[s.strip().lower()],
    }
    parse = parsers[k]
    vals: list[object] = []
    unparsable: list[bool] = []
    for x in v.tolist():
        try:
            vals.append(parse(x))
            unparsable.append(False)
        except (ValueError, KeyError, TypeError):
            vals.append(0)
            unparsable.append(True)
    bad_arr = np.array(unparsable, bool)
    return np.array(vals, dtype=dtype_of(dst)), _or_masks(m, bad_arr if bad_arr.any() else None)


def format_float(x: float) -> str:
    """C's %g (6 significant digits), STREAM's float output form."""
    return "%g" % x


# ---------------------------------------------------------------- operator kernels


def _binary(ev: Evaluator, e: X.Op, b: Batch) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    (a, am), (c, cm) = ev.eval(e.args[0], b), ev.eval(e.args[1], b)
    return a, c, _or_masks(am, cm)


def _scalar(e: X.Expr, other: X.Expr) -> np.ndarray | None:
    """A non-NULL numeric or boolean constant beside a non-constant operand, as a 0-d array of
    its type: numpy broadcasts it with the same result dtype and values as the column of it that
    `_Const` would build (one full array per call: `Dir * 100`, `Type = 0`, `Scd / 60`). None
    for anything else (text constants: the object kernels zip their operands row by row)."""
    if not isinstance(e, X.Const) or e.value is None or isinstance(other, X.Const):
        return None
    dt = dtype_of(e.type)
    return None if dt is object else np.asarray(e.value, dt)


def _binary_scalar(ev: Evaluator, e: X.Op, b: Batch) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """`_binary`, with a constant operand as a 0-d array (`_scalar`) for kernels that only
    broadcast their operands (arithmetic, comparisons of non-text values)."""
    x, y = e.args[0], e.args[1]
    cy = _scalar(y, x)
    if cy is not None:
        a, am = ev.eval(x, b)
        if a.dtype != object:
            return a, cy, am
    cx = _scalar(x, y)
    if cx is not None:
        c, cm = ev.eval(y, b)
        if c.dtype != object:
            return cx, c, cm
    return _binary(ev, e, b)


def _arith(fn: np.ufunc) -> OpKernel:
    def k(ev: Evaluator, e: X.Op, b: Batch) -> Col:
        a, c, m = _binary_scalar(ev, e, b)
        with np.errstate(over="ignore", invalid="ignore"):
            out = fn(a.astype(dtype_of(e.type), copy=False), c.astype(dtype_of(e.type), copy=False))
        return out, m

    return k


def _div(ev: Evaluator, e: X.Op, b: Batch) -> Col:
    d = _scalar(e.args[1], e.args[0])
    if d is not None and d != 0:  # a constant divisor (`Scd / 60`): no zero test, no safe copy
        a, m = ev.eval(e.args[0], b)
        if e.op == "div":  # integer division truncating toward zero
            a = a.astype(np.int64, copy=False)
            dv = d.astype(np.int64)
            q = a // dv
            neg = q < 0
            if neg.any():  # floor → truncation where the quotient is negative and inexact
                q = q + (neg & (q * dv != a))
            return q, m
        with np.errstate(invalid="ignore", divide="ignore"):
            return a.astype(np.float64) / d.astype(np.float64), m
    a, c, m = _binary(ev, e, b)
    zero = c == 0
    safe = np.where(zero, 1, c)
    if e.op == "div":  # integer division truncating toward zero
        a = a.astype(np.int64, copy=False)
        safe = safe.astype(np.int64, copy=False)
        q = a // safe
        q = q + ((q < 0) & (q * safe != a))
        out = q
    else:
        with np.errstate(invalid="ignore", divide="ignore"):
            out = a.astype(np.float64) / safe.astype(np.float64)
    return out, (_or_masks(m, zero) if zero.any() else m)


def _mod(ev: Evaluator, e: X.Op, b: Batch) -> Col:
    a, c, m = _binary(ev, e, b)
    zero = c == 0
    safe = np.where(zero, 1, c)
    out = np.fmod(a, safe).astype(dtype_of(e.type))
    return out, (_or_masks(m, zero) if zero.any() else m)


def _compare(fn: Callable[[Any, Any], Any]) -> OpKernel:
    def k(ev: Evaluator, e: X.Op, b: Batch) -> Col:
        a, c, m = _binary_scalar(ev, e, b)
        if a.dtype == object or c.dtype == object:
            out = (
                np.fromiter((fn(x, y) for x, y in zip(a.tolist(), c.tolist())), bool, len(a))
                if m is None
                else np.fromiter(
                    (False if bad else fn(x, y) for x, y, bad in zip(a.tolist(), c.tolist(), m.tolist())), bool, len(a)
                )
            )
        else:
            out = fn(a, c)
        return np.asarray(out, bool), m

    return k


def _and(ev: Evaluator, e: X.Op, b: Batch) -> Col:
    (a, am), (c, cm) = ev.eval(e.args[0], b), ev.eval(e.args[1], b)
    a, c = a.astype(bool, copy=False), c.astype(bool, copy=False)
    if am is None and cm is None:
        return a & c, None
    a_false = ~a if am is None else (~a & ~am)
    c_false = ~c if cm is None else (~c & ~cm)
    definitely_false = a_false | c_false
    either = _or_masks(am, cm)
    assert either is not None  # not both None: that case returned above
    mask = either & ~definitely_false
    return (a & c) & ~mask, mask


def _or(ev: Evaluator, e: X.Op, b: Batch) -> Col:
    (a, am), (c, cm) = ev.eval(e.args[0], b), ev.eval(e.args[1], b)
    a, c = a.astype(bool, copy=False), c.astype(bool, copy=False)
    if am is None and cm is None:
        return a | c, None
    a_true = a if am is None else (a & ~am)
    c_true = c if cm is None else (c & ~cm)
    definitely_true = a_true | c_true
    either = _or_masks(am, cm)
    assert either is not None  # not both None: that case returned above
    mask = either & ~definitely_true
    return definitely_true, mask


def _not(ev: Evaluator, e: X.Op, b: Batch) -> Col:
    v, m = ev.eval(e.args[0], b)
    return ~v.astype(bool, copy=False), m


def _neg(ev: Evaluator, e: X.Op, b: Batch) -> Col:
    v, m = ev.eval(e.args[0], b)
    return -v, m


def _is_null(ev: Evaluator, e: X.Op, b: Batch) -> Col:
    _, m = ev.eval(e.args[0], b)
    return (np.zeros(len(b), bool) if m is None else m.copy()), None


def _in(ev: Evaluator, e: X.Op, b: Batch) -> Col:
    a, am = ev.eval(e.args[0], b)
    hit = np.zeros(len(b), bool)
    unknown = np.zeros(len(b), bool)
    for item in e.args[1:]:
        v, vm = ev.eval(item, b)
        eq = (
            np.asarray(a == v, bool)
            if a.dtype != object and v.dtype != object
            else np.fromiter((x == y for x, y in zip(a.tolist(), v.tolist())), bool, len(a))
        )
        if vm is not None:
            unknown |= vm
            eq &= ~vm
        hit |= eq
    if am is not None:
        unknown |= am
        hit &= ~am
    mask = unknown & ~hit
    return hit, (mask if mask.any() else None)


@functools.lru_cache(maxsize=256)
def like_regex(pattern: str) -> re.Pattern:
    parts = [".*" if ch == "%" else "." if ch == "_" else re.escape(ch) for ch in pattern]
    return re.compile("".join(parts), re.DOTALL)


def _like(ev: Evaluator, e: X.Op, b: Batch) -> Col:
    a, c, m = _binary(ev, e, b)
    if isinstance(e.args[1], X.Const):
        rx = like_regex(e.args[1].value)
        out = np.fromiter((rx.fullmatch(x) is not None for x in a.tolist()), bool, len(a))
    else:
        out = np.fromiter(
            (like_regex(p).fullmatch(x) is not None for x, p in zip(a.tolist(), c.tolist())), bool, len(a)
        )
    return out, m


def _text(v: np.ndarray, t: DataType | None) -> list[str]:
    if v.dtype == np.float64:
        return [format_float(x) for x in v.tolist()]
    if v.dtype == np.bool_:
        return ["true" if x else "false" for x in v.tolist()]
    return [str(x) for x in v.tolist()]


def _concat_op(ev: Evaluator, e: X.Op, b: Batch) -> Col:
    (a, am), (c, cm) = ev.eval(e.args[0], b), ev.eval(e.args[1], b)
    out = np.empty(len(b), dtype=object)
    out[:] = [x + y for x, y in zip(_text(a, None), _text(c, None))]
    return out, _or_masks(am, cm)


_OPS: dict[str, OpKernel] = {
    "+": _arith(np.add),
    "-": _arith(np.subtract),
    "*": _arith(np.multiply),
    "/": _div,
    "div": _div,
    "%": _mod,
    "=": _compare(lambda x, y: x == y),
    "<>": _compare(lambda x, y: x != y),
    "<": _compare(lambda x, y: x < y),
    "<=": _compare(lambda x, y: x <= y),
    ">": _compare(lambda x, y: x > y),
    ">=": _compare(lambda x, y: x >= y),
    "and": _and,
    "or": _or,
    "not": _not,
    "neg": _neg,
    "is_null": _is_null,
    "in": _in,
    "like": _like,
    "||": _concat_op,
}


# ---------------------------------------------------------------- built-in functions


def _strmap(fn: Callable[..., Any], rtype: DTypeLike = object) -> FnKernel:
    def k(e: X.Func, args: list[Col], n: int) -> Col:
        (v, m), *rest = args
        extra = [a[0].tolist() for a in rest]
        vals = v.tolist()
        res = [fn(x, *[r[i] for r in extra]) for i, x in enumerate(vals)] if extra else [fn(x) for x in vals]
        out = np.array(res, dtype=rtype) if rtype is not object else np.empty(n, dtype=object)
        if rtype is object:
            out[:] = res
        return out, _or_masks(m, *[a[1] for a in rest])

    return k


def _round(e: X.Func, args: list[Col], n: int) -> Col:
    (v, m), *rest = args
    d = rest[0][0] if rest else np.zeros(n, np.int64)
    if v.dtype != np.float64:
        if not rest:
            return v.copy(), m
        scale = 10.0**d
        vf = v.astype(np.float64)
        out = np.sign(vf) * np.floor(np.abs(vf) * scale + 0.5) / scale
        return out.astype(v.dtype), _or_masks(m, rest[0][1] if rest else None)
    scale = 10.0**d
    out = np.sign(v) * np.floor(np.abs(v) * scale + 0.5) / scale
    return out, _or_masks(m, rest[0][1] if rest else None)


def _float_fn(fn: Callable[..., np.ndarray], domain: Callable[..., np.ndarray] | None = None) -> FnKernel:
    def k(e: X.Func, args: list[Col], n: int) -> Col:
        vals = [a[0].astype(np.float64) for a in args]
        bad = domain(*vals) if domain else np.zeros(n, bool)
        with np.errstate(all="ignore"):
            out = fn(*[np.where(bad, 1.0, x) for x in vals])
        bad = bad | ~np.isfinite(out)
        return np.where(bad, 0.0, out), _or_masks(*[a[1] for a in args], bad if bad.any() else None)

    return k


def _coalesce(e: X.Func, args: list[Col], n: int) -> Col:
    out: np.ndarray = np.array(args[-1][0], dtype=dtype_of(e.type), copy=True)
    mask = np.zeros(n, bool) if args[-1][1] is None else args[-1][1].copy()
    for v, m in reversed(args[:-1]):
        have = np.ones(n, bool) if m is None else ~m
        out[have] = v[have]
        mask[have] = False
    return out, (mask if mask.any() else None)


def _nullif(e: X.Func, args: list[Col], n: int) -> Col:
    (a, am), (c, cm) = args
    eq = np.fromiter((x == y for x, y in zip(a.tolist(), c.tolist())), bool, n)
    if cm is not None:
        eq &= ~cm
    return a, _or_masks(am, eq if eq.any() else None)


def _extreme(pick: Callable[[np.ndarray, np.ndarray], np.ndarray]) -> FnKernel:
    def k(e: X.Func, args: list[Col], n: int) -> Col:
        dt = dtype_of(e.type)
        vals: list[np.ndarray] = [a[0].astype(dt, copy=False) for a in args]
        masks = [np.zeros(n, bool) if a[1] is None else a[1] for a in args]
        out = vals[0].copy()
        have = ~masks[0]
        for v, m in zip(vals[1:], masks[1:]):
            better = ~m & (~have | pick(v, out))
            out = np.where(better, v, out)
            have = have | ~m
        return out, (None if have.all() else ~have)

    return k


def _substr(s: str, start: int, length: int | None = None) -> str:
    begin = max(start - 1, 0)
    return s[begin:] if length is None else s[begin : begin + max(length, 0)]


def _concat_fn(e: X.Func, args: list[Col], n: int) -> Col:
    texts = [_text(v, None) for v, _ in args]
    masks = [m for _, m in args]
    out = np.empty(n, dtype=object)
    out[:] = ["".join(t[i] for t, m in zip(texts, masks) if m is None or not m[i]) for i in range(n)]
    return out, None


_FUNCS: dict[str, FnKernel] = {
    "abs": lambda e, a, n: (np.abs(a[0][0]), a[0][1]),
    "round": _round,
    "floor": lambda e, a, n: (np.floor(a[0][0]).astype(np.int64), a[0][1]),
    "ceil": lambda e, a, n: (np.ceil(a[0][0]).astype(np.int64), a[0][1]),
    "ceiling": lambda e, a, n: (np.ceil(a[0][0]).astype(np.int64), a[0][1]),
    "sqrt": _float_fn(np.sqrt, lambda x: x < 0),
    "exp": _float_fn(np.exp),
    "ln": _float_fn(np.log, lambda x: x <= 0),
    "power": _float_fn(np.power),
    "lower": _strmap(str.lower),
    "upper": _strmap(str.upper),
    "trim": _strmap(str.strip),
    "length": _strmap(len, np.int64),
    "substr": _strmap(_substr),
    "concat": _concat_fn,
    "coalesce": _coalesce,
    "nullif": _nullif,
    "greatest": _extreme(lambda v, out: v > out),
    "least": _extreme(lambda v, out: v < out),
}


def _call_udf(fn: ScalarFunction, e: X.Func, args: list[Col], n: int) -> Col:
    impl = fn.impl
    assert impl is not None  # Evaluator._Func checks it
    if fn.vectorized:
        res = np.asarray(impl(*[v for v, _ in args]))
        return res.astype(dtype_of(e.type), copy=False), _or_masks(*[m for _, m in args])
    lists = [v.tolist() for v, _ in args]
    masks = [None if m is None else m.tolist() for _, m in args]
    values: list[object] = []
    for i in range(n):
        row = [None if (mk is not None and mk[i]) else col[i] for col, mk in zip(lists, masks)]
        values.append(impl(*row))
    nulls = np.array([r is None for r in values], bool)
    dt = dtype_of(e.type)
    if dt is object:
        out = np.empty(n, dtype=object)
        out[:] = ["" if r is None else r for r in values]
    else:
        out = np.array([0 if r is None else r for r in values], dtype=dt)
    return out, (nulls if nulls.any() else None)
