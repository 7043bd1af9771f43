"""AST → canonical CQL text: `to_cql(node)`.

The output re-parses to an equal AST (`parse_statement(to_cql(s)) == s` for every statement
the parser can produce) and is meant to be read by people too: EXPLAIN shows it as the
"analyzed query". Canonical style:

* keywords upper case, function and type names as stored (functions lower case, types upper);
* one clause per line (SELECT / FROM / WHERE / GROUP BY / HAVING), subqueries aligned under
  their opening parenthesis;
* windows in brackets (`[RANGE 10 MINUTE SLIDE 1 MINUTE]`, `[ROWS 5]`, `[NOW]`,
  `[PARTITION BY a, b ROWS 3 WHERE ...]`), a sample before the window
  (`S SAMPLE(5.0) [ROWS 10] AS x`), aliases always with AS;
* relation-to-stream operators as `ISTREAM(<query>)`, set operations as
  `(<left>) UNION (<right>)`, the set versions with DISTINCT (a bare source name stays bare);
* expressions with the minimum parentheses the grammar's precedence needs;
* names that are not plain identifiers, or that spell a keyword, in backticks.

Layout uses a tiny document model: a rendered piece is a list of lines whose boundaries are
structural, so a newline inside a string literal or a backticked name is never re-indented.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Sequence
from typing import Any

from cqlstream.cql import ast

__all__ = ["keywords", "quote_name", "to_cql"]


@functools.cache
def keywords() -> frozenset[str]:
    """Every keyword of grammar/cql.lark (lower case): its literal words (`"select"i`, ...).

    Keywords are only reserved where the parser state accepts them, but quoting all of them
    keeps the printer independent of that subtlety. Time units (`day`, `min`, ...) are lexed
    only right after a window count, so they are not keywords here and print bare. The words
    are read off the grammar's text, not the parser's terminals: the first name printed would
    otherwise load the parser's tables (~40 ms of `cqlstream run`'s start, whose statements come
    parsed from cql/parse_cache.py); tests/test_roundtrip.py checks the two agree.
    """
    from cqlstream.cql.parser import _grammar_path

    literals = (m.group(1) for m in _LITERAL.finditer(_grammar_path().read_text()))
    return frozenset(w.lower() for w in literals if w is not None and _WORD.match(w))


# The grammar's comments, string literals (group 1: the text) and regular expressions, scanned
# left to right so a quote inside a regular expression or a slash inside a string is not misread.
_LITERAL = re.compile(r'//[^\n]*|"((?:\\.|[^"\\\n])*)"|/(?:\\.|[^/\\\n])+/')
_WORD = re.compile(r"[A-Za-z]+\Z")
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")

_LINE_WIDTH = 80
_INLINE_WIDTH = 60  # a nested query this short stays on one line


def quote_name(name: str) -> str:
    """A name as CQL text: bare if it is a plain, non-keyword identifier, else in backticks."""
    if _IDENT.match(name) and name.lower() not in keywords():
        return name
    if "`" in name or not name:
        raise ValueError(f"name {name!r} cannot be written in CQL")
    return f"`{name}`"


def _raw_name(name: str, upper: bool = False) -> str:
    """Type and option names: the parser keeps these as the lower-cased raw token, backticks and all."""
    if _IDENT.match(name):
        return name.upper() if upper else name
    if len(name) > 2 and name.startswith("`") and name.endswith("`") and "`" not in name[1:-1]:
        return name
    return quote_name(name)


# ---------------------------------------------------------------- documents

Doc = list[str]  # lines; boundaries are structural newlines


def _cat(*parts: str | Doc) -> Doc:
    """Concatenate pieces; continuation lines of a multi-line piece align to where it starts."""
    lines: list[str] = [""]
    for part in parts:
        if isinstance(part, str):
            lines[-1] += part
            continue
        if not part:
            continue
        col = " " * _col(lines[-1])
        lines[-1] += part[0]
        lines.extend(col + ln for ln in part[1:])
    return lines


def _col(line: str) -> int:
    return len(line) - line.rfind("\n") - 1


def _join(docs: Iterable[str | Doc], sep: str) -> Doc:
    """Join pieces with `sep` on one line (multi-line pieces stay aligned)."""
    parts: list[str | Doc] = []
    for i, d in enumerate(docs):
        if i:
            parts.append(sep)
        parts.append(d)
    return _cat(*parts)


def _stack(docs: Sequence[Doc], sep: str = ",") -> Doc:
    """Pieces one below the other, `sep` after all but the last."""
    lines: list[str] = []
    for i, d in enumerate(docs):
        d = list(d)
        if i < len(docs) - 1:
            d[-1] += sep
        lines.extend(d)
    return lines


def _list(docs: Iterable[str | Doc], col: int) -> Doc:
    """A comma list starting at column `col`: one-line pieces fill lines up to the width;
    if any piece spans lines, one piece per line."""
    pieces = [d if isinstance(d, list) else [d] for d in docs]
    if not all(len(d) == 1 for d in pieces):
        return _stack(pieces)
    lines = [pieces[0][0]]
    for (piece,) in pieces[1:]:
        if col + len(lines[-1]) + 2 + len(piece) <= _LINE_WIDTH:
            lines[-1] += ", " + piece
        else:
            lines[-1] += ","
            lines.append(piece)
    return lines


def _one_line(doc: Doc) -> str:
    return "\n".join(doc)


# ---------------------------------------------------------------- entry point


def to_cql(node: object) -> str:
    """Canonical CQL text of any AST node (statement, query, expression, window, type, ...)."""
    return _one_line(_doc(node))


def _doc(node: object) -> Doc:
    if isinstance(node, ast.Query):
        return _query(node)
    if isinstance(node, ast.Expr):
        return _expr(node, 0)
    if isinstance(node, ast.RegisterSource):
        return _register_source(node)
    if isinstance(node, ast.RegisterView):
        return _register_view(node)
    if isinstance(node, ast.Window):
        return _window(node)
    if isinstance(node, ast.Duration):
        return [_duration(node)]
    if isinstance(node, ast.TypeName):
        return [_type(node)]
    if isinstance(node, ast.AttrDef):
        return [f"{quote_name(node.name)} {_type(node.type)}"]
    if isinstance(node, ast.SelectItem):
        return _select_item(node)
    if isinstance(node, ast.FromItem):
        return _from_item(node)
    if isinstance(node, list | tuple):  # a script
        return [";\n\n".join(to_cql(s) for s in node) + (";" if node else "")]
    raise TypeError(f"to_cql: not a CQL AST node: {node!r}")


# ---------------------------------------------------------------- statements


def _option_value(v: object) -> str:
    if v is None:
        return "NULL"
    if isinstance(v, bool):
        return "TRUE" if v else "FALSE"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        return _float(v)
    if isinstance(v, str):
        return _string(v)
    raise TypeError(f"to_cql: option value {v!r} has no CQL form")


def _register_source(s: ast.RegisterSource) -> Doc:
    elems = [f"{quote_name(a.name)} {_type(a.type)}" for a in s.attrs]
    elems += ["KEY (" + ", ".join(quote_name(k) for k in key) + ")" for key in s.keys]
    text = "REGISTER " + ("STATIC " if s.static else "") + s.kind.upper() + " " + quote_name(s.name)
    text += " (" + ", ".join(elems) + ")"
    if s.options:
        text += " WITH (" + ", ".join(f"{_raw_name(k)} = {_option_value(v)}" for k, v in s.options) + ")"
    if s.constraints:
        text += " WITH CONSTRAINTS (" + ", ".join(c.to_cql() for c in s.constraints) + ")"
    return [text]


def _register_view(v: ast.RegisterView) -> Doc:
    head = "REGISTER VIEW " + quote_name(v.name)
    if v.columns is not None:
        head += " (" + ", ".join(quote_name(c) for c in v.columns) + ")"
    return [head + " AS"] + _query(v.query)


def _type(t: ast.TypeName) -> str:
    name = _raw_name(t.name, upper=True)
    return name if t.length is None else f"{name}({t.length})"


# ---------------------------------------------------------------- queries


def _query(q: ast.Query) -> Doc:
    if isinstance(q, ast.Select):
        return _select(q)
    if isinstance(q, ast.RelToStream):
        return _cat(q.op.upper() + "(", _nested(q.query), ")")
    if isinstance(q, ast.SetOp):
        return _setop(q)
    if isinstance(q, ast.TableQuery):
        return [quote_name(q.name)]
    raise TypeError(f"to_cql: not a query: {q!r}")


def _nested(q: ast.Query) -> Doc:
    """A query inside another: on one line if short, else aligned clause per line."""
    doc = _query(q)
    if len(doc) > 1:
        flat = " ".join(ln.lstrip(" ") for ln in doc)
        if len(flat) <= _INLINE_WIDTH and "\n" not in flat:
            return [flat]
    return doc


def _paren_query(q: ast.Query) -> Doc:
    return _cat("(", _nested(q), ")")


def _set_operand(q: ast.Query) -> Doc:
    # A bare name is a set operand by itself, but `(Name)` would not parse; everything else
    # is parenthesized, which also pins the tree shape (INTERSECT binds tighter than UNION).
    return [quote_name(q.name)] if isinstance(q, ast.TableQuery) else _paren_query(q)


def _setop(q: ast.SetOp) -> Doc:
    op = q.op.upper() + ("" if q.all else " DISTINCT")
    left, right = _set_operand(q.left), _set_operand(q.right)
    if len(left) == 1 and len(right) == 1 and len(left[0]) + len(right[0]) + len(op) + 2 <= _LINE_WIDTH:
        return [f"{left[0]} {op} {right[0]}"]
    return left + [op] + right


def _select(q: ast.Select) -> Doc:
    head = "SELECT DISTINCT " if q.distinct else "SELECT "
    lines = _cat(head, _list([_select_item(i) for i in q.items], len(head)))
    lines += _cat("FROM ", _list([_from_item(f) for f in q.from_], 5))
    if q.where is not None:
        lines += _cat("WHERE ", _condition(q.where, 6))
    if q.group_by:
        lines += _cat("GROUP BY ", _list([_expr(e, 0) for e in q.group_by], 9))
    if q.having is not None:
        lines += _cat("HAVING ", _condition(q.having, 7))
    return lines


def _select_item(item: ast.SelectItem) -> Doc:
    e = item.expr
    if isinstance(e, ast.Star):
        doc = ["*" if e.qualifier is None else quote_name(e.qualifier) + ".*"]
    else:
        doc = _expr(e, 0)
    if item.alias is not None:
        doc = _cat(doc, " AS " + quote_name(item.alias))
    return doc


def _from_item(f: ast.FromItem) -> Doc:
    src = [quote_name(f.source)] if isinstance(f.source, str) else _paren_query(f.source)
    parts: list[str | Doc] = [src]
    if f.sample is not None:
        tol = "" if f.sample_tolerate is None else f" TOLERATE {_float(f.sample_tolerate)}"
        parts.append(f" SAMPLE({_float(f.sample)}{tol})")
    if f.window is not None:
        parts += [" ", _window(f.window)]
    if f.alias is not None:
        parts.append(" AS " + quote_name(f.alias))
    return _cat(*parts)


# ---------------------------------------------------------------- windows


def _duration(d: ast.Duration) -> str:
    return str(d.amount) if d.unit is None else f"{d.amount} {d.unit.upper()}"


def _window(w: ast.Window) -> Doc:
    if isinstance(w, ast.RangeWindow):
        if w.size is None:
            spec = "RANGE UNBOUNDED"
        else:
            spec = "RANGE " + _duration(w.size)
        if w.slide is not None:
            spec += " SLIDE " + _duration(w.slide)
        if w.tolerate is not None:
            spec += " TOLERATE " + _duration(w.tolerate)
    elif isinstance(w, ast.RowsWindow):
        spec = "ROWS UNBOUNDED" if w.size is None else f"ROWS {w.size}"
        if w.slide is not None:
            spec += f" SLIDE {w.slide}"
        if w.tolerate is not None:
            spec += f" TOLERATE {w.tolerate}"
    elif isinstance(w, ast.NowWindow):
        spec = "NOW"
    elif isinstance(w, ast.PartitionWindow):
        cols = ", ".join(_column(c) for c in w.by)
        spec = f"PARTITION BY {cols} ROWS {w.rows}"
        if w.tolerate is not None:
            spec += f" TOLERATE {w.tolerate}"
    else:
        raise TypeError(f"to_cql: not a window: {w!r}")
    if w.where is not None:
        return _cat("[" + spec + " WHERE ", _expr(w.where, 0), "]")
    return ["[" + spec + "]"]


# ---------------------------------------------------------------- expressions

# Binding strength, loosest first, mirroring grammar/cql.lark:
# or < and < not < predicate (comparisons, BETWEEN, IN, LIKE, IS NULL, EXISTS) < || < + - < * / % < sign < atom
_OR, _AND, _NOT, _PRED, _CONCAT, _ADD, _MUL, _SIGN, _ATOM = range(1, 10)

_BINARY_LEVEL = {
    "or": _OR,
    "and": _AND,
    "=": _PRED,
    "<>": _PRED,
    "<": _PRED,
    ">": _PRED,
    "<=": _PRED,
    ">=": _PRED,
    "||": _CONCAT,
    "+": _ADD,
    "-": _ADD,
    "*": _MUL,
    "/": _MUL,
    "%": _MUL,
}


def _level(e: ast.Expr) -> int:
    if isinstance(e, ast.Binary):
        return _BINARY_LEVEL.get(e.op, _PRED)
    if isinstance(e, ast.Unary):
        return _NOT if e.op == "not" else _SIGN
    if isinstance(e, ast.Between | ast.InList | ast.InQuery | ast.Exists | ast.Like | ast.IsNull):
        return _PRED
    if isinstance(e, ast.Literal) and e.kind in ("int", "float") and _negative(e.value):
        return _SIGN
    return _ATOM


def _negative(v: object) -> bool:
    """A numeric literal's value below zero (or -0.0)."""
    return isinstance(v, int | float) and (v < 0 or (isinstance(v, float) and str(v).startswith("-")))


def _expr(e: ast.Expr, min_level: int) -> Doc:
    """`e` as text that the grammar reads back at binding strength >= min_level."""
    doc = _expr_bare(e)
    if _level(e) < min_level:
        return _cat("(", doc, ")")
    return doc


def _expr_bare(e: ast.Expr) -> Doc:
    if isinstance(e, ast.Literal):
        return [_literal(e)]
    if isinstance(e, ast.Column):
        return [_column(e)]
    if isinstance(e, ast.Star):
        return ["*" if e.qualifier is None else quote_name(e.qualifier) + ".*"]
    if isinstance(e, ast.Binary):
        lvl = _BINARY_LEVEL.get(e.op, _PRED)
        op = e.op.upper()
        if lvl == _PRED:  # comparisons do not chain: both sides are `concat`
            return _cat(_expr(e.left, _CONCAT), f" {op} ", _expr(e.right, _CONCAT))
        # Left-associative: the right operand must bind strictly tighter. Walk the left spine
        # iteratively so long chains (`a AND b AND ... AND z`) do not exhaust the stack.
        first, rest = _left_chain(e, lvl)
        parts: list[str | Doc] = [_expr(first, lvl)]
        for o, right in rest:
            parts += [f" {o.upper()} ", _expr(right, lvl + 1)]
        return _cat(*parts)
    if isinstance(e, ast.Unary):
        if e.op == "not":
            return _cat("NOT ", _expr(e.operand, _NOT))
        operand = _expr(e.operand, _SIGN)
        if operand[0].startswith(("-", "+")):
            operand = _cat("(", operand, ")")  # `--` starts a comment; `-(-3)` reads back as written
        return _cat(e.op, operand)
    if isinstance(e, ast.Between):
        return _cat(
            _expr(e.operand, _CONCAT),
            " NOT BETWEEN " if e.negated else " BETWEEN ",
            _expr(e.low, _CONCAT),
            " AND ",
            _expr(e.high, _CONCAT),
        )
    if isinstance(e, ast.InList):
        items = _join([_expr(i, 0) for i in e.items], ", ")
        return _cat(_expr(e.operand, _CONCAT), " NOT IN (" if e.negated else " IN (", items, ")")
    if isinstance(e, ast.InQuery):
        return _cat(_expr(e.operand, _CONCAT), " NOT IN " if e.negated else " IN ", _paren_query(e.query))
    if isinstance(e, ast.Exists):
        doc = _cat("EXISTS ", _paren_query(e.query))
        return _cat("NOT (", doc, ")") if e.negated else doc
    if isinstance(e, ast.Like):
        return _cat(_expr(e.operand, _CONCAT), " NOT LIKE " if e.negated else " LIKE ", _expr(e.pattern, _CONCAT))
    if isinstance(e, ast.IsNull):
        return _cat(_expr(e.operand, _CONCAT), " IS NOT NULL" if e.negated else " IS NULL")
    if isinstance(e, ast.Case):
        parts = ["CASE"]
        if e.operand is not None:
            parts += [" ", _expr(e.operand, 0)]
        for cond, result in e.whens:
            parts += [" WHEN ", _expr(cond, 0), " THEN ", _expr(result, 0)]
        if e.default is not None:
            parts += [" ELSE ", _expr(e.default, 0)]
        parts.append(" END")
        return _cat(*parts)
    if isinstance(e, ast.Cast):
        return _cat("CAST(", _expr(e.operand, 0), f" AS {_type(e.type)})")
    if isinstance(e, ast.Call):
        name = quote_name(e.name)
        if e.star:
            return [name + "(*)"]
        args = _join([_expr(a, 0) for a in e.args], ", ")
        return _cat(name + "(", "DISTINCT " if e.distinct else "", args, ")")
    raise TypeError(f"to_cql: not an expression: {e!r}")


def _left_chain(e: ast.Expr, lvl: int) -> tuple[ast.Expr, list[tuple[str, ast.Expr]]]:
    """`((a op b) op c) op d` at one binding level → (a, [(op, b), (op, c), (op, d)])."""
    rest: list[tuple[str, ast.Expr]] = []
    while isinstance(e, ast.Binary) and _BINARY_LEVEL.get(e.op, _PRED) == lvl:
        rest.append((e.op, e.right))
        e = e.left
    rest.reverse()
    return e, rest


def _condition(e: ast.Expr, col: int) -> Doc:
    """A WHERE/HAVING condition: on one line if it fits, else one conjunct per line."""
    doc = _expr(e, 0)
    if len(doc) == 1 and col + len(doc[0]) <= _LINE_WIDTH:
        return doc
    if not (isinstance(e, ast.Binary) and e.op == "and"):
        return doc
    first, rest = _left_chain(e, _AND)
    return [*_expr(first, _AND)] + [ln for _, c in rest for ln in _cat("AND ", _expr(c, _AND + 1))]


def _column(c: ast.Column) -> str:
    name = quote_name(c.name)
    return name if c.qualifier is None else f"{quote_name(c.qualifier)}.{name}"


def _literal(lit: ast.Literal) -> str:
    v: Any = lit.value  # its Python type is the one `kind` names
    if lit.kind == "null" or v is None:
        return "NULL"
    if lit.kind == "bool":
        return "TRUE" if v else "FALSE"
    if lit.kind == "string":
        return _string(v)
    if lit.kind == "float":
        return _float(float(v))
    if lit.kind == "int":
        return str(int(v))
    raise TypeError(f"to_cql: unknown literal kind {lit.kind!r}")


def _string(s: str) -> str:
    return "'" + s.replace("'", "''") + "'"


def _float(x: float) -> str:
    if x != x:
        raise ValueError("to_cql: NaN has no CQL literal")
    if x in (float("inf"), float("-inf")):
        # The parser reads an overflowing literal such as 1e999 as infinity; print one back.
        return "1e999" if x > 0 else "-1e999"
    text = repr(x)
    if not any(c in text for c in ".eE"):
        text += ".0"
    return text
