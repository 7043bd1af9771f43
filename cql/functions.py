"""The function registry: names, arities and result types of built-in and user-defined functions.

The front end resolves calls here; implementations (numpy kernels for built-ins, Python callables
for UDFs) are carried as opaque `impl` objects for the engine.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from cqlstream.cql import types as T
from cqlstream.cql.types import DataType

TypeRule = Callable[[tuple[DataType, ...]], "DataType | str"]  # a str result is a type error


def _numeric_same(args: tuple[DataType, ...]) -> DataType | str:
    if not args[0].numeric:
        return f"expects a number, got {args[0]}"
    return args[0] if args[0].kind != "null" else T.FLOAT


def _to_int(args: tuple[DataType, ...]) -> DataType | str:
    return T.INT if args[0].numeric else f"expects a number, got {args[0]}"


def _to_float(args: tuple[DataType, ...]) -> DataType | str:
    return T.FLOAT if all(a.numeric for a in args) else "expects numbers"


def _text_to_text(args: tuple[DataType, ...]) -> DataType | str:
    return T.VARCHAR if args[0].textual else f"expects a string, got {args[0]}"


def _text_to_int(args: tuple[DataType, ...]) -> DataType | str:
    return T.INT if args[0].textual else f"expects a string, got {args[0]}"


def _common_all(args: tuple[DataType, ...]) -> DataType | str:
    out = args[0]
    for a in args[1:]:
        common = T.common(out, a)
        if common is None:
            return "arguments have no common type"
        out = common
    return out


def _round(args: tuple[DataType, ...]) -> DataType | str:
    if not args[0].numeric or (len(args) > 1 and args[1].kind not in ("int", "null")):
        return "expects (number[, integer digits])"
    return args[0] if args[0].kind != "null" else T.FLOAT


def _substr(args: tuple[DataType, ...]) -> DataType | str:
    if not args[0].textual or not all(a.kind in ("int", "null") for a in args[1:]):
        return "expects (string, integer start[, integer length])"
    return T.VARCHAR


def _concat(args: tuple[DataType, ...]) -> DataType | str:
    return T.VARCHAR


@dataclass(frozen=True)
class ScalarFunction:
    """A registered scalar function: its arity, the rule giving its result type, and its
    (vectorized) implementation."""

    name: str
    min_args: int
    max_args: int | None  # None: variadic
    result: TypeRule
    impl: Callable[..., object] | None = field(default=None, compare=False)
    vectorized: bool = True


@dataclass(frozen=True)
class AggregateFunction:
    """An aggregate; `impl` for UDAFs is an object with the engine's aggregate protocol."""

    name: str
    result: TypeRule
    star_ok: bool = False
    impl: object = field(default=None, compare=False)


def _sum(args: tuple[DataType, ...]) -> DataType | str:
    return (
        args[0]
        if args[0].kind in ("int", "float")
        else (T.INT if args[0].kind == "null" else f"expects a number, got {args[0]}")
    )


def _minmax(args: tuple[DataType, ...]) -> DataType | str:
    return args[0] if args[0].kind != "bool" else "expects an ordered type"


BUILTIN_SCALARS = {
    f.name: f
    for f in [
        ScalarFunction("abs", 1, 1, _numeric_same),
        ScalarFunction("round", 1, 2, _round),
        ScalarFunction("floor", 1, 1, _to_int),
        ScalarFunction("ceil", 1, 1, _to_int),
        ScalarFunction("ceiling", 1, 1, _to_int),
        ScalarFunction("sqrt", 1, 1, _to_float),
        ScalarFunction("exp", 1, 1, _to_float),
        ScalarFunction("ln", 1, 1, _to_float),
        ScalarFunction("power", 2, 2, _to_float),
        ScalarFunction("lower", 1, 1, _text_to_text),
        ScalarFunction("upper", 1, 1, _text_to_text),
        ScalarFunction("trim", 1, 1, _text_to_text),
        ScalarFunction("length", 1, 1, _text_to_int),
        ScalarFunction("substr", 2, 3, _substr),
        ScalarFunction("concat", 1, None, _concat),
        ScalarFunction("coalesce", 1, None, _common_all),
        ScalarFunction("nullif", 2, 2, lambda a: a[0] if T.comparable(a[0], a[1]) else "arguments not comparable"),
        ScalarFunction("greatest", 1, None, _common_all),
        ScalarFunction("least", 1, None, _common_all),
    ]
}

# approximate quantile aggregates (engine/aggregates/sketch_quantile.py): name → the quantile
APPROX_QUANTILES: dict[str, float] = {
    "approx_median": 0.5,
    "approx_p25": 0.25,
    "approx_p75": 0.75,
    "approx_p90": 0.9,
    "approx_p95": 0.95,
    "approx_p99": 0.99,
}


def _approx_quantile(args: tuple[DataType, ...]) -> DataType | str:
    return T.FLOAT if args[0].numeric else f"expects a number, got {args[0]}"


BUILTIN_AGGREGATES = {
    f.name: f
    for f in [
        AggregateFunction("count", lambda a: T.INT, star_ok=True),
        AggregateFunction("sum", _sum),
        AggregateFunction("avg", lambda a: T.FLOAT if a[0].numeric else f"expects a number, got {a[0]}"),
        AggregateFunction("min", _minmax),
        AggregateFunction("max", _minmax),
        *(AggregateFunction(name, _approx_quantile) for name in APPROX_QUANTILES),
    ]
}


def _fixed(rt: DataType) -> TypeRule:
    return lambda args: rt


class FunctionRegistry:
    """Built-ins plus functions registered from Python; names are case-insensitive."""

    def __init__(self) -> None:
        self.scalars: dict[str, ScalarFunction] = dict(BUILTIN_SCALARS)
        self.aggregates: dict[str, AggregateFunction] = dict(BUILTIN_AGGREGATES)

    def register_scalar(
        self,
        name: str,
        impl: Callable,
        returns: DataType | TypeRule,
        *,
        min_args: int = 0,
        max_args: int | None = None,
        vectorized: bool = False,
    ) -> None:
        """Register a UDF; `vectorized` means `impl` takes numpy arrays and returns one."""
        rule = _fixed(returns) if isinstance(returns, DataType) else returns
        self.scalars[name.lower()] = ScalarFunction(name.lower(), min_args, max_args, rule, impl, vectorized)

    def register_aggregate(self, name: str, impl: object, returns: DataType | TypeRule) -> None:
        """Register a UDAF; `impl` follows the engine's aggregate protocol."""
        rule = _fixed(returns) if isinstance(returns, DataType) else returns
        self.aggregates[name.lower()] = AggregateFunction(name.lower(), rule, False, impl)

    def scalar(self, name: str) -> ScalarFunction | None:
        return self.scalars.get(name.lower())

    def aggregate(self, name: str) -> AggregateFunction | None:
        return self.aggregates.get(name.lower())
