"""Result helpers: the STREAM text form of a result, and float-tolerant canonical forms."""

from __future__ import annotations

from collections import Counter

from .exprs import text


def format_value(v) -> str:
    """STREAM output form of one value: NULL → null, floats C '%g', booleans true/false."""
    return "null" if v is None else text(v)


def format_row(row: tuple) -> str:
    return ", ".join(format_value(v) for v in row)


def format_result(result: dict[int, Counter]) -> list[str]:
    """`[t]:+:v1, v2` / `[t]:-:v1, v2` lines, one per unit of |count|, by instant, then sorted."""
    out = []
    for t in sorted(result):
        lines = []
        for row, c in result[t].items():
            sign = "+" if c > 0 else "-"
            lines.extend([f"[{t}]:{sign}:{format_row(row)}"] * abs(c))
        out.extend(sorted(lines))
    return out


def canonical(result: dict[int, Counter], digits: int = 9, zero_below: float = 0.0) -> dict[int, Counter]:
    """The result with floats rounded to `digits` significant digits (-0.0 as 0.0, and magnitudes
    below `zero_below` as 0.0), zero counts and empty instants dropped: compare
    canonical(engine) == canonical(reference)."""

    def norm(v):
        if isinstance(v, float) and v == v and v not in (float("inf"), float("-inf")):
            return 0.0 if abs(v) < zero_below else float(f"{v:.{digits}g}") + 0.0
        return v

    out = {}
    for t, ch in result.items():
        c = Counter()
        for row, n in ch.items():
            c[tuple(norm(v) for v in row)] += n
        c = Counter({r: n for r, n in c.items() if n})
        if c:
            out[t] = c
    return out
