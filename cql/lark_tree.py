"""Lark's parse tree of a CQL text → cql.ast nodes: the transformer the parser (cql/parser.py) runs.

Kept apart from cql/parser.py so that lark is imported only by a process that parses.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from lark import Token, Transformer_NonRecursive, v_args
from lark.tree import Meta

from cqlstream.cql import ast
from cqlstream.cql.errors import CqlError, Pos
from cqlstream.cql.parser import _UNIT_CANON


def meta_pos(meta: Meta | None) -> Pos | None:
    if meta is None or getattr(meta, "empty", True):
        return None
    return Pos(meta.line, meta.column, meta.end_line, meta.end_column)


def tok_pos(tok: Token) -> Pos:
    # Lark types positions Optional; tokens from the lexer always carry them.
    assert tok.line is not None and tok.column is not None
    return Pos(tok.line, tok.column, tok.end_line, tok.end_column)


def _unquote(text: str) -> str:
    q = text[0]
    return text[1:-1].replace(q + q, q)


def _name(tok: Token) -> str:
    s = str(tok)
    if not s.startswith("`"):
        return s
    if _NOT_XML.search(s):  # such a name (a query's alias names a result column) could not appear in XML
        raise CqlError("bad_name", f"quoted name {s!r} holds a character XML cannot carry", tok_pos(tok))
    return s[1:-1]


# characters XML 1.0 cannot hold at all: C0 controls other than tab and line breaks, U+FFFE, U+FFFF
_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")


@dataclass(frozen=True)
class _Tolerance:
    """A window's `TOLERATE k` while its window is being built (kept apart from the size and slide)."""

    value: Any


def _tolerance(items: list[Any]) -> Any:
    return next((i.value for i in items if isinstance(i, _Tolerance)), None)


def _count(tok: Token) -> int:
    return int(str(tok).replace(",", ""))


def _is(tok: object, type_: str) -> bool:
    return isinstance(tok, Token) and tok.type == type_


SelectBody = tuple[bool, list[ast.SelectItem], str | None]  # (DISTINCT, items, relation-to-stream operator)
Source = tuple[str | ast.Query, ast.Window | None]  # a FROM item's source (name or subquery) and window


@v_args(meta=True)
class ToAst(Transformer_NonRecursive):
    """Lark parse tree → cql.ast nodes (positions kept in `pos`).

    Non-recursive so long left-deep chains (`a and b and ...` with thousands of terms) do not
    exhaust the Python stack.
    """

    # ------------------------------------------------------------ statements
    def script(self, meta: Meta, items: list[Any]) -> list[ast.Statement]:
        return list(items)

    def single(self, meta: Meta, items: list[Any]) -> ast.Node:
        return items[0]

    def register_source(self, meta: Meta, items: list[Any]) -> ast.RegisterSource:
        static = any(_is(t, "STATIC") for t in items)
        items = [t for t in items if not _is(t, "STATIC")]
        kind, name, *rest = items
        attrs, keys, options, constraints = [], [], (), ()
        for r in rest:
            if isinstance(r, ast.AttrDef):
                attrs.append(r)
            elif isinstance(r, tuple) and r and r[0] == "key":
                keys.append(r[1])
            elif isinstance(r, tuple) and r and isinstance(r[0], ast.ConstraintDef):
                constraints = r
            else:
                options = r
        return ast.RegisterSource(
            kind, _name(name), tuple(attrs), tuple(keys), static, options, pos=meta_pos(meta), constraints=constraints
        )

    def source_kind(self, meta: Meta, items: list[Any]) -> str:
        k = str(items[0]).lower()
        return "relation" if k == "table" else k

    def attr_def(self, meta: Meta, items: list[Any]) -> ast.AttrDef:
        return ast.AttrDef(_name(items[0]), items[1], pos=meta_pos(meta))

    def key_def(self, meta: Meta, items: list[Any]) -> tuple[str, tuple[str, ...]]:
        return ("key", tuple(_name(t) for t in items if _is(t, "NAME")))

    def type_spec(self, meta: Meta, items: list[Any]) -> ast.TypeName:
        length = int(items[1]) if len(items) > 1 else None
        return ast.TypeName(str(items[0]).lower(), length, pos=meta_pos(meta))

    def with_options(self, meta: Meta, items: list[Any]) -> tuple[tuple[str, object], ...]:
        return tuple(items)

    def with_constraints(self, meta: Meta, items: list[Any]) -> tuple[ast.ConstraintDef, ...]:
        return tuple(items)

    def constraint_call(self, meta: Meta, items: list[Any]) -> ast.ConstraintDef:
        k = int(items[2]) if len(items) > 2 else 0
        return ast.ConstraintDef(str(items[0]).lower(), _name(items[1]), k, pos=meta_pos(meta))

    def constraint_ref(self, meta: Meta, items: list[Any]) -> ast.ConstraintDef:
        k = int(items[3]) if len(items) > 3 else 0
        ref = (_name(items[1]), _name(items[2]))
        return ast.ConstraintDef("references", _name(items[0]), k, ref, pos=meta_pos(meta))

    def option(self, meta: Meta, items: list[Any]) -> tuple[str, object]:
        value = items[1]
        if isinstance(value, ast.Literal):
            value = value.value
        return (str(items[0]).lower(), value)

    def option_name(self, meta: Meta, items: list[Any]) -> str:
        return str(items[0]).lower()

    def option_negative(self, meta: Meta, items: list[Any]) -> int | float:
        return -items[0].value

    def register_view(self, meta: Meta, items: list[Any]) -> ast.RegisterView:
        items = [t for t in items if not _is(t, "VIEW")]  # VIEW is a kept (non-underscore) terminal
        name = _name(items[0])
        cols = items[1] if len(items) == 3 else None
        return ast.RegisterView(name, cols, items[-1], pos=meta_pos(meta))

    def view_attrs(self, meta: Meta, items: list[Any]) -> tuple[str, ...]:
        return tuple(_name(t) for t in items)

    # ------------------------------------------------------------ queries
    def set_chain(self, meta: Meta, items: list[Any]) -> ast.Query:
        # items: operand, op, operand, op, operand ...; INTERSECT binds tighter (SQL), others left-assoc.
        operands, ops = [items[0]], []
        for op, rhs in zip(items[1::2], items[2::2]):
            if op[0] == "intersect":
                operands[-1] = ast.SetOp("intersect", op[1], operands[-1], rhs, pos=op[2])
            else:
                ops.append(op)
                operands.append(rhs)
        result = operands[0]
        for op, rhs in zip(ops, operands[1:]):
            result = ast.SetOp(op[0], op[1], result, rhs, pos=op[2])
        return result

    def set_op(self, meta: Meta, items: list[Any]) -> tuple[str, bool, Pos]:
        # Bag semantics unless DISTINCT is written (ALL is the default spelled out).
        op = str(items[0]).lower()
        bag = len(items) == 1 or str(items[1]).lower() == "all"
        return ("except" if op == "minus" else op, bag, tok_pos(items[0]))

    def table_query(self, meta: Meta, items: list[Any]) -> ast.TableQuery:
        return ast.TableQuery(_name(items[0]), pos=tok_pos(items[0]))

    def r2s(self, meta: Meta, items: list[Any]) -> str:
        return str(items[0]).lower()

    def r2s_query(self, meta: Meta, items: list[Any]) -> ast.RelToStream:
        return ast.RelToStream(items[0], items[1], pos=meta_pos(meta))

    def select_stmt(self, meta: Meta, items: list[Any]) -> ast.Query:
        (distinct, sel_items, r2s), from_, *rest = items
        parts = dict(rest)
        q = ast.Select(
            tuple(sel_items),
            tuple(from_),
            parts.get("where"),
            tuple(parts.get("group", ())),
            parts.get("having"),
            distinct,
            pos=meta_pos(meta),
        )
        return ast.RelToStream(r2s, q, pos=meta_pos(meta)) if r2s else q

    def select_body(self, meta: Meta, items: list[Any]) -> SelectBody:
        distinct = any(_is(t, "DISTINCT") for t in items)
        return (distinct, items[-1], None)

    def r2s_select_body(self, meta: Meta, items: list[Any]) -> SelectBody:
        distinct = any(_is(t, "DISTINCT") for t in items)
        return (distinct, items[-1], items[0])

    def select_list(self, meta: Meta, items: list[Any]) -> list[ast.SelectItem]:
        return list(items)

    def star_item(self, meta: Meta, items: list[Any]) -> ast.SelectItem:
        return ast.SelectItem(ast.Star(None, pos=meta_pos(meta)), pos=meta_pos(meta))

    def qualified_star_item(self, meta: Meta, items: list[Any]) -> ast.SelectItem:
        return ast.SelectItem(ast.Star(_name(items[0]), pos=meta_pos(meta)), pos=meta_pos(meta))

    def expr_item(self, meta: Meta, items: list[Any]) -> ast.SelectItem:
        alias = _name(items[1]) if len(items) > 1 else None
        return ast.SelectItem(items[0], alias, pos=meta_pos(meta))

    def from_list(self, meta: Meta, items: list[Any]) -> list[ast.FromItem]:
        return list(items)

    def from_item(self, meta: Meta, items: list[Any]) -> ast.FromItem:
        source, window = items[0]
        sample, tolerate, alias = None, None, None
        for it in items[1:]:
            if isinstance(it, tuple) and it[0] == "window_part":
                if window is not None and it[1] is not None:
                    raise CqlError("syntax", "a FROM item may have only one window", meta_pos(meta))
                window = it[1] or window
                sample, tolerate = it[2] if it[2] is not None else (None, None)
            elif alias is not None:
                raise CqlError(
                    "syntax", f"a FROM item may have only one alias (found '{alias}' and '{it}')", meta_pos(meta)
                )
            else:
                alias = it
        return ast.FromItem(source, window, sample, alias, tolerate, pos=meta_pos(meta))

    def table_source(self, meta: Meta, items: list[Any]) -> Source:
        return (_name(items[0]), None)

    def subquery_source(self, meta: Meta, items: list[Any]) -> Source:
        return (items[0], None)

    def paren_table_source(self, meta: Meta, items: list[Any]) -> Source:
        return (_name(items[0]), items[1])

    def window_part(self, meta: Meta, items: list[Any]) -> tuple[str, ast.Window | None, Any]:
        window = next((i for i in items if isinstance(i, ast.Window)), None)
        sample = next((i for i in items if isinstance(i, tuple)), None)
        return ("window_part", window, sample)

    def alias(self, meta: Meta, items: list[Any]) -> str:
        return _name(items[0])

    def sample(self, meta: Meta, items: list[Any]) -> tuple[float, float | None]:
        """(percent, lowest tolerated percent or None)."""
        return float(items[1].value), (float(items[3].value) if len(items) > 3 else None)

    def where_clause(self, meta: Meta, items: list[Any]) -> tuple[str, ast.Expr]:
        return ("where", items[0])

    def group_clause(self, meta: Meta, items: list[Any]) -> tuple[str, list[ast.Expr]]:
        return ("group", list(items))

    def having_clause(self, meta: Meta, items: list[Any]) -> tuple[str, ast.Expr]:
        return ("having", items[0])

    # ------------------------------------------------------------ windows
    def window(self, meta: Meta, items: list[Any]) -> ast.Window:
        w = items[0]
        if len(items) > 1:
            w = type(w)(
                **{**{f: getattr(w, f) for f in w.__dataclass_fields__ if f != "pos"}, "where": items[1]}, pos=w.pos
            )
        return w

    def window_filter(self, meta: Meta, items: list[Any]) -> ast.Expr:
        return items[0]

    def range_window(self, meta: Meta, items: list[Any]) -> ast.RangeWindow:
        durs = [i for i in items if isinstance(i, ast.Duration)]
        tol = _tolerance(items)
        return ast.RangeWindow(durs[0], durs[1] if len(durs) > 1 else None, tolerate=tol, pos=meta_pos(meta))

    def range_unbounded(self, meta: Meta, items: list[Any]) -> ast.RangeWindow:
        return ast.RangeWindow(None, tolerate=_tolerance(items), pos=meta_pos(meta))

    def rows_window(self, meta: Meta, items: list[Any]) -> ast.RowsWindow:
        counts = [i for i in items if isinstance(i, int) and not isinstance(i, bool)]
        tol = _tolerance(items)
        return ast.RowsWindow(counts[0], counts[1] if len(counts) > 1 else None, tolerate=tol, pos=meta_pos(meta))

    def rows_unbounded(self, meta: Meta, items: list[Any]) -> ast.RowsWindow:
        return ast.RowsWindow(None, tolerate=_tolerance(items), pos=meta_pos(meta))

    def range_tolerance(self, meta: Meta, items: list[Any]) -> _Tolerance:
        return _Tolerance(items[1])

    def rows_tolerance(self, meta: Meta, items: list[Any]) -> _Tolerance:
        return _Tolerance(items[1])

    def now_window(self, meta: Meta, items: list[Any]) -> ast.NowWindow:
        return ast.NowWindow(pos=meta_pos(meta))

    def partition_window(self, meta: Meta, items: list[Any]) -> ast.PartitionWindow:
        cols = tuple(i for i in items if isinstance(i, ast.Column))
        rows = next(i for i in items if isinstance(i, int) and not isinstance(i, bool))
        return ast.PartitionWindow(cols, rows, tolerate=_tolerance(items), pos=meta_pos(meta))

    def duration(self, meta: Meta, items: list[Any]) -> ast.Duration:
        unit = items[1] if len(items) > 1 else None
        return ast.Duration(items[0], unit, pos=meta_pos(meta))

    def count(self, meta: Meta, items: list[Any]) -> int:
        return _count(items[0])

    def time_unit(self, meta: Meta, items: list[Any]) -> str:
        return _UNIT_CANON[str(items[0]).lower()]

    # ------------------------------------------------------------ expressions
    def or_(self, meta: Meta, items: list[Any]) -> ast.Binary:
        return ast.Binary("or", items[0], items[1], pos=meta_pos(meta))

    def and_(self, meta: Meta, items: list[Any]) -> ast.Binary:
        return ast.Binary("and", items[0], items[1], pos=meta_pos(meta))

    def not_(self, meta: Meta, items: list[Any]) -> ast.Unary:
        return ast.Unary("not", items[1], pos=meta_pos(meta))

    def compare(self, meta: Meta, items: list[Any]) -> ast.Binary:
        op = {"==": "=", "!=": "<>"}.get(str(items[1]), str(items[1]))
        return ast.Binary(op, items[0], items[2], pos=meta_pos(meta))

    def binary(self, meta: Meta, items: list[Any]) -> ast.Binary:
        return ast.Binary(str(items[1]), items[0], items[2], pos=meta_pos(meta))

    def unary(self, meta: Meta, items: list[Any]) -> ast.Expr:
        op, operand = str(items[0]), items[1]
        # Fold a sign into a numeric literal so `-3` prints and re-parses as the same node.
        value = operand.value if isinstance(operand, ast.Literal) and operand.kind in ("int", "float") else None
        if op == "-" and isinstance(value, (int, float)) and value >= 0:
            return ast.Literal(-value, operand.kind, pos=meta_pos(meta))
        return ast.Unary(op, operand, pos=meta_pos(meta))

    def _negated(self, items: list[Any]) -> tuple[bool, list[Any]]:
        neg = any(_is(t, "NOT") for t in items)
        rest = [
            t
            for t in items
            if not (isinstance(t, Token) and t.type in ("NOT", "BETWEEN", "IN", "LIKE", "IS", "NULL", "EXISTS"))
        ]
        return neg, rest

    def between(self, meta: Meta, items: list[Any]) -> ast.Between:
        neg, (a, lo, hi) = self._negated(items)
        return ast.Between(a, lo, hi, neg, pos=meta_pos(meta))

    def in_list(self, meta: Meta, items: list[Any]) -> ast.InList:
        neg, (a, *vals) = self._negated(items)
        return ast.InList(a, tuple(vals), neg, pos=meta_pos(meta))

    def in_query(self, meta: Meta, items: list[Any]) -> ast.InQuery:
        neg, (a, q) = self._negated(items)
        return ast.InQuery(a, q, neg, pos=meta_pos(meta))

    def like(self, meta: Meta, items: list[Any]) -> ast.Like:
        neg, (a, p) = self._negated(items)
        return ast.Like(a, p, neg, pos=meta_pos(meta))

    def is_null(self, meta: Meta, items: list[Any]) -> ast.IsNull:
        neg, (a,) = self._negated(items)
        return ast.IsNull(a, neg, pos=meta_pos(meta))

    def exists(self, meta: Meta, items: list[Any]) -> ast.Exists:
        _, (q,) = self._negated(items)
        return ast.Exists(q, False, pos=meta_pos(meta))

    def call(self, meta: Meta, items: list[Any]) -> ast.Call:
        name = _name(items[0]).lower()
        if len(items) == 1:
            return ast.Call(name, (), pos=meta_pos(meta))
        args = items[1]
        if args == "*":
            return ast.Call(name, (), star=True, pos=meta_pos(meta))
        distinct, exprs = args
        return ast.Call(name, tuple(exprs), distinct, pos=meta_pos(meta))

    def call_args(self, meta: Meta, items: list[Any]) -> tuple[bool, list[ast.Expr]]:
        distinct = any(_is(t, "DISTINCT") for t in items)
        return (distinct, [i for i in items if not _is(i, "DISTINCT")])

    def star_arg(self, meta: Meta, items: list[Any]) -> str:
        return "*"

    def case(self, meta: Meta, items: list[Any]) -> ast.Case:
        items = [i for i in items if not (isinstance(i, Token) and i.type in ("CASE", "END"))]
        operand = None
        if items and not (isinstance(items[0], tuple) and items[0][0] == "when"):
            operand, items = items[0], items[1:]
        whens = tuple((w[1], w[2]) for w in items if w[0] == "when")
        default = next((w[1] for w in items if w[0] == "else"), None)
        return ast.Case(operand, whens, default, pos=meta_pos(meta))

    def when_clause(self, meta: Meta, items: list[Any]) -> tuple[str, ast.Expr, ast.Expr]:
        return ("when", items[1], items[3])

    def else_clause(self, meta: Meta, items: list[Any]) -> tuple[str, ast.Expr]:
        return ("else", items[1])

    def cast(self, meta: Meta, items: list[Any]) -> ast.Cast:
        return ast.Cast(items[1], items[2], pos=meta_pos(meta))

    def column(self, meta: Meta, items: list[Any]) -> ast.Column:
        if len(items) == 2:
            return ast.Column(_name(items[0]), _name(items[1]), pos=meta_pos(meta))
        return ast.Column(None, _name(items[0]), pos=meta_pos(meta))

    def int_lit(self, meta: Meta, items: list[Any]) -> ast.Literal:
        return ast.Literal(int(items[0]), "int", pos=meta_pos(meta))

    def float_lit(self, meta: Meta, items: list[Any]) -> ast.Literal:
        return ast.Literal(float(items[0]), "float", pos=meta_pos(meta))

    def string(self, meta: Meta, items: list[Any]) -> ast.Literal:
        return ast.Literal(_unquote(str(items[0])), "string", pos=meta_pos(meta))

    def true(self, meta: Meta, items: list[Any]) -> ast.Literal:
        return ast.Literal(True, "bool", pos=meta_pos(meta))

    def false(self, meta: Meta, items: list[Any]) -> ast.Literal:
        return ast.Literal(False, "bool", pos=meta_pos(meta))

    def null(self, meta: Meta, items: list[Any]) -> ast.Literal:
        return ast.Literal(None, "null", pos=meta_pos(meta))
