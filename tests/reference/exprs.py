"""Row-at-a-time evaluation of logical expressions (cql.logical.expr), SQL semantics, None = NULL.

Deliberately plain Python: one value at a time, no numpy. Choices docs/semantics.md leaves open
are marked "(choice)" below; the engine must make the same ones.
"""

from __future__ import annotations

import math
import re
from decimal import ROUND_HALF_UP, Decimal, InvalidOperation

from cqlstream.cql.logical import expr as X

# ------------------------------------------------------------------ values


def text(v) -> str:
    """Text form of a non-NULL value: ints decimal, floats C '%g' (choice, = STREAM output form),
    booleans true/false, strings as they are."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        return "%g" % v
    return str(v)


def conform(v, dtype):
    """A value as a column of `dtype` holds it: an int in a float column is a float. Nothing else
    is converted (a float where an int is declared stays visible, so type bugs show)."""
    if dtype.kind == "float" and isinstance(v, int) and not isinstance(v, bool):
        return float(v)
    return v


def _plain(v):
    """numpy scalars (from a UDF) → Python values."""
    if v is not None and not isinstance(v, (bool, int, float, str)) and hasattr(v, "item"):
        return v.item()
    return v


# ------------------------------------------------------------------ operators


def _idiv(a, b):
    """Integer division truncating toward zero."""
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b >= 0) else -q


def _arith(op, a, b):
    if a is None or b is None:
        return None
    if op == "+":
        return a + b
    if op == "-":
        return a - b
    if op == "*":
        return a * b
    if op in ("/", "div"):
        if b == 0:
            return None
        if isinstance(a, float) or isinstance(b, float):
            return a / b
        return _idiv(a, b)
    if op == "%":
        if b == 0:
            return None
        if isinstance(a, float) or isinstance(b, float):
            return math.fmod(a, b)
        return a - b * _idiv(a, b)  # sign of the dividend
    raise ValueError(op)


def _compare(op, a, b):
    if a is None or b is None:
        return None
    return {"=": a == b, "<>": a != b, "<": a < b, "<=": a <= b, ">": a > b, ">=": a >= b}[op]


def like(s: str, pattern: str) -> bool:
    """`%` any sequence, `_` exactly one character, case-sensitive, no escape character."""
    rx = "".join(".*" if c == "%" else "." if c == "_" else re.escape(c) for c in pattern)
    return re.fullmatch(rx, s, re.DOTALL) is not None


def _and(a, b):
    if a is False or b is False:
        return False
    if a is None or b is None:
        return None
    return True


def _or(a, b):
    if a is True or b is True:
        return True
    if a is None or b is None:
        return None
    return False


def _not(a):
    return None if a is None else (not a)


def _in(x, items):
    if x is None:
        return None
    if any(i is not None and i == x for i in items):
        return True
    return None if any(i is None for i in items) else False


# ------------------------------------------------------------------ built-in functions


def _round(x, d=0):
    """Half away from zero on the exact binary value of x; int stays int."""
    if x is None or d is None:
        return None
    if isinstance(x, float) and not math.isfinite(x):
        return x
    q = Decimal(1).scaleb(-d)
    try:
        r = (
            Decimal(x).quantize(q, rounding=ROUND_HALF_UP)
            if d >= 0
            else (Decimal(x) / q).quantize(Decimal(1), rounding=ROUND_HALF_UP) * q
        )
    except InvalidOperation:  # more digits than Decimal's context holds: nothing to round
        return x
    return float(r) if isinstance(x, float) else int(r)


def _floor(x):
    return None if x is None else math.floor(x)


def _ceil(x):
    return None if x is None else math.ceil(x)


def _math1(fn):
    """Float functions; a domain error (sqrt(-1), ln(0)) is NULL, overflow is inf (choice)."""

    def f(*args):
        if any(a is None for a in args):
            return None
        try:
            return float(fn(*(float(a) for a in args)))
        except ValueError:
            return None
        except OverflowError:
            return math.inf

    return f


def substr(s, start, *length):
    """SQL SUBSTRING(s FROM start [FOR length]), 1-based: the characters at positions
    start .. start+length-1 that exist; a negative length is NULL (choice)."""
    if s is None or start is None or (length and length[0] is None):
        return None
    lo = start
    if length:
        if length[0] < 0:
            return None
        hi = start + length[0]  # exclusive
    else:
        hi = max(len(s), start) + 1
    lo, hi = max(lo, 1), min(hi, len(s) + 1)
    return s[lo - 1 : hi - 1] if hi > lo else ""


def _strict(fn):
    """NULL in any argument → NULL."""

    def f(*args):
        if any(a is None for a in args):
            return None
        return fn(*args)

    return f


def _nullif(a, b):
    if a is None:
        return None
    return None if (b is not None and a == b) else a


BUILTINS = {
    "abs": _strict(abs),
    "round": _round,
    "floor": _floor,
    "ceil": _ceil,
    "ceiling": _ceil,
    "sqrt": _math1(math.sqrt),
    "exp": _math1(math.exp),
    "ln": _math1(math.log),
    "power": _math1(math.pow),
    "lower": _strict(str.lower),
    "upper": _strict(str.upper),
    "trim": _strict(lambda s: s.strip(" ")),
    "length": _strict(len),
    "substr": substr,
    "concat": lambda *a: "".join(text(v) for v in a if v is not None),
    "coalesce": lambda *a: next((v for v in a if v is not None), None),
    "nullif": _nullif,
    "greatest": _strict(lambda *a: max(a)),
    "least": _strict(lambda *a: min(a)),
}


# ------------------------------------------------------------------ casts


def cast(v, dtype):
    """CAST: text → number/bool parses (unparsable → NULL), float → int truncates, anything → text
    is its text form (cut to char(n)/varchar(n) length)."""
    if v is None:
        return None
    k = dtype.kind
    if k in ("char", "varchar", "byte"):
        s = text(v)
        return s[: dtype.length] if dtype.length is not None else s
    if isinstance(v, str):
        try:
            if k in ("int", "timestamp"):
                return int(v.strip())
            if k == "float":
                return float(v.strip())
            if k == "bool":
                return {"true": True, "false": False}[v.strip().lower()]
        except (ValueError, KeyError):
            return None
        return v
    if k in ("int", "timestamp"):
        if isinstance(v, float):
            return int(v) if math.isfinite(v) else None
        return int(v)
    if k == "float":
        return float(v)
    if k == "bool":
        return bool(v)
    return v


# ------------------------------------------------------------------ the evaluator


class ExprEval:
    """`ev(expr, row)` → value. `functions` (cql.functions.FunctionRegistry) resolves UDFs."""

    def __init__(self, functions=None):
        self.functions = functions

    def __call__(self, e, row):
        return conform(self._eval(e, row), e.type)

    def _eval(self, e, row):
        if isinstance(e, X.ColRef):
            return row[e.index]
        if isinstance(e, X.Const):
            return e.value
        if isinstance(e, X.Op):
            return self._op(e, row)
        if isinstance(e, X.Func):
            return self._func(e, row)
        if isinstance(e, X.CaseWhen):
            for cond, res in e.whens:
                if self(cond, row) is True:
                    return self(res, row)
            return self(e.default, row)
        if isinstance(e, X.Cast):
            return cast(self(e.operand, row), e.type)
        if type(e).__name__ == "RelationArg":
            return e.name  # a UDF given a relation receives its name (choice, as the engine)
        raise TypeError(f"cannot evaluate {type(e).__name__}: {e!r}")

    def _op(self, e, row):
        op = e.op
        if op == "and":  # both sides evaluated: no errors can arise, so no short-circuit needed
            return _and(self(e.args[0], row), self(e.args[1], row))
        if op == "or":
            return _or(self(e.args[0], row), self(e.args[1], row))
        args = [self(a, row) for a in e.args]
        if op in ("+", "-", "*", "/", "div", "%"):
            return _arith(op, args[0], args[1])
        if op in X.COMPARISONS:
            return _compare(op, args[0], args[1])
        if op == "||":
            return None if args[0] is None or args[1] is None else text(args[0]) + text(args[1])
        if op == "like":
            return None if args[0] is None or args[1] is None else like(args[0], args[1])
        if op == "neg":
            return None if args[0] is None else -args[0]
        if op == "not":
            return _not(args[0])
        if op == "is_null":
            return args[0] is None
        if op == "in":
            return _in(args[0], args[1:])
        raise ValueError(f"unknown operator {op}")

    def _func(self, e, row):
        args = [self(a, row) for a in e.args]
        name = e.name.lower()
        udf = self.functions.scalar(name) if self.functions is not None else None
        if udf is not None and udf.impl is not None:
            if udf.vectorized:  # the UDF takes arrays: call it on one-element arrays
                import numpy as np

                out = udf.impl(
                    *(np.array([a], dtype=object if a is None or isinstance(a, str) else None) for a in args)
                )
                return _plain(out[0])
            return _plain(udf.impl(*args))
        if name in BUILTINS:
            return BUILTINS[name](*args)
        raise KeyError(f"unknown function {e.name}() (pass functions=registry for UDFs)")
