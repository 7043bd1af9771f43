"""Printer/parser round trip: parse_statement(to_cql(ast)) == ast for every parser-producible AST.

The strategies below generate only shapes the parser can produce (e.g. no Unary('-', Literal(3)):
the parser folds `-3` into Literal(-3); no `==`/`!=` ops; no negated Exists; no bare TableQuery
except as a set operand or ISTREAM/DSTREAM/RSTREAM argument; lower-case function names; ...).
"""

from __future__ import annotations

import dataclasses
import functools
import math
import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cqlstream.cql import ast
from cqlstream.cql.parser import parse_script, parse_statement
from cqlstream.cql.printer import keywords, quote_name, to_cql

CORPUS = Path(__file__).parent / "corpus" / "papers.cql"

# ---------------------------------------------------------------- names

PLAIN_NAMES = ["a", "b", "x", "S", "T", "S1", "Requests", "cid", "_t", "Key2", "A_b9"]
# Time-unit words and `type` are not keywords of the grammar (TIME_UNIT is only lexed after a
# window count), so they print bare; the rest need backticks.
TRICKY_NAMES = [
    "day",
    "min",
    "ms",
    "type",
    "select",
    "From",
    "key",
    "RANGE",
    "sample",
    "istream",
    "a b",
    "1abc",
    "é",
    "x.y",
    "--c",
    "'q'",
    " ",
    "a\nb",
    "/*",
]
names = st.one_of(st.sampled_from(PLAIN_NAMES), st.sampled_from(TRICKY_NAMES))
# Function names are stored lower-cased by the parser.
func_names = st.sampled_from(["count", "sum", "max", "f", "lookup", "min", "day", "exists", "my fn"])
# Type names are stored as the lower-cased raw token (backticks kept).
type_names = st.sampled_from(["integer", "int", "char", "varchar", "float", "boolean", "key", "day", "`x y`"])
option_names = st.sampled_from(["unit", "slack", "key", "format", "x_1", "`k y`"])

types = st.builds(ast.TypeName, type_names, st.none() | st.integers(0, 10**6))

# ---------------------------------------------------------------- expressions

# Infinity is included: the parser reads an overflowing literal (1e999) as inf.
floats = st.floats(allow_nan=False)
literals = st.one_of(
    st.builds(ast.Literal, st.integers(-(10**20), 10**20), st.just("int")),
    st.builds(ast.Literal, floats, st.just("float")),
    st.builds(ast.Literal, st.text(max_size=8), st.just("string")),
    st.builds(ast.Literal, st.booleans(), st.just("bool")),
    st.just(ast.Literal(None, "null")),
)
columns = st.builds(ast.Column, st.none() | names, names)
leaves = st.one_of(literals, columns)


def _fix_sign(u: ast.Unary) -> ast.Unary:
    # The parser folds `-<non-negative number>` into a negative Literal, so Unary('-', Literal(3))
    # never comes out of it; use '+' there. (A map, not a filter: filters make hypothesis build
    # a huge repr of these recursive strategies.)
    o = u.operand
    if u.op == "-" and isinstance(o, ast.Literal) and o.kind in ("int", "float") and o.value >= 0:
        return ast.Unary("+", o)
    return u


def _small_tuple(s, lo=1, hi=3):
    return st.lists(s, min_size=lo, max_size=hi).map(tuple)


def _cached(build):
    """Memoize a depth-indexed strategy builder; `deferred` keeps hypothesis' repr of it small."""

    @functools.cache
    def wrapper(depth: int):
        return st.deferred(lambda: build(depth))

    return wrapper


@_cached
def exprs(depth: int):
    if depth <= 0:
        return leaves
    sub = exprs(depth - 1)
    calls = st.one_of(
        st.builds(ast.Call, func_names, _small_tuple(sub, 0, 3)),
        st.builds(ast.Call, func_names, _small_tuple(sub, 1, 2), st.just(True)),  # DISTINCT
        st.builds(lambda n: ast.Call(n, (), star=True), func_names),
    )
    logic = st.builds(ast.Binary, st.sampled_from(["or", "and"]), sub, sub)
    comparisons = st.builds(ast.Binary, st.sampled_from(["=", "<>", "<", ">", "<=", ">="]), sub, sub)
    arithmetic = st.builds(ast.Binary, st.sampled_from(["||", "+", "-", "*", "/", "%"]), sub, sub)
    compound = st.one_of(
        st.builds(ast.Unary, st.sampled_from(["-", "+", "not"]), sub).map(_fix_sign),
        logic,
        comparisons,
        arithmetic,  # the most common shapes in real queries: weight them up
        st.builds(ast.Between, sub, sub, sub, st.booleans()),
        st.builds(ast.InList, sub, _small_tuple(sub), st.booleans()),
        st.builds(ast.InQuery, sub, subqueries(depth - 1), st.booleans()),
        st.builds(ast.Exists, subqueries(depth - 1), st.just(False)),
        st.builds(ast.Like, sub, sub, st.booleans()),
        st.builds(ast.IsNull, sub, st.booleans()),
        st.builds(ast.Case, st.none() | sub, _small_tuple(st.tuples(sub, sub)), st.none() | sub),
        st.builds(ast.Cast, sub, types),
        calls,
    )
    return st.one_of(leaves, compound)


# ---------------------------------------------------------------- windows

units = st.sampled_from([None, "millisecond", "second", "minute", "hour", "day"])
durations = st.builds(ast.Duration, st.integers(0, 10**9), units)
counts = st.integers(0, 10**9)


@_cached
def windows(depth: int):
    where = st.none() | exprs(max(depth - 1, 0))
    return st.one_of(
        st.builds(ast.RangeWindow, durations, st.none() | durations, where),
        st.builds(ast.RangeWindow, st.none(), st.none(), where),  # [RANGE UNBOUNDED]
        st.builds(ast.RowsWindow, counts, st.none() | counts, where),
        st.builds(ast.RowsWindow, st.none(), st.none(), where),  # [ROWS UNBOUNDED]
        st.builds(ast.NowWindow, where),
        st.builds(ast.PartitionWindow, _small_tuple(columns), counts, where),
    )


# ---------------------------------------------------------------- queries

samples = st.floats(min_value=0, allow_nan=False)


@_cached
def select_items(depth: int):
    return st.one_of(
        st.just(ast.SelectItem(ast.Star())),
        st.builds(lambda q: ast.SelectItem(ast.Star(q)), names),
        st.builds(ast.SelectItem, exprs(depth), st.none() | names),
    )


@_cached
def from_items(depth: int):
    source = names if depth <= 0 else st.one_of(names, names, subqueries(depth - 1))
    return st.builds(ast.FromItem, source, st.none() | windows(depth), st.none() | samples, st.none() | names)


@_cached
def selects(depth: int):
    e = exprs(max(depth - 1, 0))
    return st.builds(
        ast.Select,
        _small_tuple(select_items(max(depth - 1, 0))),
        _small_tuple(from_items(depth), 1, 2),
        st.none() | e,
        _small_tuple(e, 0, 2),
        st.none() | e,
        st.booleans(),
    )


table_queries = st.builds(ast.TableQuery, names)


@_cached
def operands(depth: int):
    """Queries usable as a set operand or stream-operator argument (a bare name is fine there)."""
    return st.one_of(table_queries, subqueries(depth))


@_cached
def subqueries(depth: int):
    """Any query the grammar accepts in parentheses (everything but a bare TableQuery)."""
    if depth <= 0:
        return selects(0)
    inner = operands(depth - 1)
    return st.one_of(
        selects(depth),
        st.builds(ast.RelToStream, st.sampled_from(["istream", "dstream", "rstream"]), inner),
        st.builds(ast.SetOp, st.sampled_from(["union", "except", "intersect"]), st.booleans(), inner, inner),
    )


# ---------------------------------------------------------------- statements

option_values = st.one_of(st.text(max_size=8), st.integers(-(10**12), 10**12), floats, st.booleans(), st.none())
attr_defs = st.builds(ast.AttrDef, names, types)
register_sources = st.builds(
    ast.RegisterSource,
    st.sampled_from(["stream", "relation"]),
    names,
    _small_tuple(attr_defs, 0, 4),
    _small_tuple(_small_tuple(names, 1, 2), 0, 2),
    st.booleans(),
    _small_tuple(st.tuples(option_names, option_values), 0, 3),
).map(lambda s: s if s.attrs or s.keys else dataclasses.replace(s, attrs=(ast.AttrDef("a", ast.TypeName("int")),)))
register_views = st.builds(ast.RegisterView, names, st.none() | _small_tuple(names), subqueries(2))
statements = st.one_of(subqueries(3), register_sources, register_views)

SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _roundtrip(node, parse=parse_statement):
    text = to_cql(node)
    try:
        back = parse(text)
    except Exception as e:  # pragma: no cover - shows the text on failure
        raise AssertionError(f"printed text does not parse:\n{text}\n{e}") from e
    assert back == node, f"round trip changed the AST:\n{text}\n{node!r}\n{back!r}"
    assert to_cql(back) == text  # printing is deterministic
    return text


@SETTINGS
@given(statements)
def test_statement_roundtrip(stmt):
    _roundtrip(stmt)


@SETTINGS
@given(exprs(3))
def test_expression_roundtrip(e):
    q = ast.Select((ast.SelectItem(e),), (ast.FromItem("S"),), where=e)
    _roundtrip(q)


@SETTINGS
@given(st.lists(statements, min_size=1, max_size=3))
def test_script_roundtrip(stmts):
    text = to_cql(stmts)
    assert parse_script(text) == stmts


# ---------------------------------------------------------------- examples


def test_corpus_roundtrip():
    stmts = parse_script(CORPUS.read_text())
    assert len(stmts) > 20
    for s in stmts:
        _roundtrip(s)


@pytest.mark.parametrize(
    "text, expected",
    [
        ("select a from S [range 10 minutes slide 1 min]", "SELECT a\nFROM S [RANGE 10 MINUTE SLIDE 1 MINUTE]"),
        ("select * from S sample(5) [rows 10] x", "SELECT *\nFROM S SAMPLE(5.0) [ROWS 10] AS x"),
        (
            "select * from S [now], R [range unbounded preceding], U [rows unbounded]",
            "SELECT *\nFROM S [NOW], R [RANGE UNBOUNDED], U [ROWS UNBOUNDED]",
        ),
        (
            "select * from S [partition by a, S.b rows 3 preceding where a > 1]",
            "SELECT *\nFROM S [PARTITION BY a, S.b ROWS 3 WHERE a > 1]",
        ),
        ("select istream(distinct a) from S", "ISTREAM(SELECT DISTINCT a FROM S)"),
        # plain and ALL are CQL's bag operators and print plain; DISTINCT (SQL's set versions) stays
        ("V1 union all V2 minus V3", "(V1 UNION V2) EXCEPT V3"),
        ("V1 union V2 intersect V3", "V1 UNION (V2 INTERSECT V3)"),
        ("V1 union distinct V2 minus distinct V3", "(V1 UNION DISTINCT V2) EXCEPT DISTINCT V3"),
        ("V1 except all V2 intersect distinct V3", "V1 EXCEPT (V2 INTERSECT DISTINCT V3)"),
        (
            "select a - -3, - -3, -(-a), +-3, 1.5e300, .5, 'it''s' from S",
            "SELECT a - -3, -(-3), -(-a), +(-3), 1.5e+300, 0.5, 'it''s'\nFROM S",
        ),
        (
            "select (a + b) * c, a + b * c, a - (b - c), (a - b) - c, not a = b, (a or b) and c from S",
            "SELECT (a + b) * c, a + b * c, a - (b - c), a - b - c, NOT a = b, (a OR b) AND c\nFROM S",
        ),
        (
            "select * from S where not exists (select * from T) and a not in (1, 2) and b is not null",
            "SELECT *\nFROM S\nWHERE NOT EXISTS (SELECT * FROM T) AND a NOT IN (1, 2) AND b IS NOT NULL",
        ),
        (
            "select case when a then 1 else 2 end, cast(a as char(4)) c from S",
            "SELECT CASE WHEN a THEN 1 ELSE 2 END, CAST(a AS CHAR(4)) AS c\nFROM S",
        ),
        (
            "select count(distinct a), `select`, `a b`.day, min(x) from S",
            "SELECT count(DISTINCT a), `select`, `a b`.day, min(x)\nFROM S",
        ),
        (
            "select a, b, c, d, e, f, g, h, i, j, k, l, m, n, o, p, q, r, s, t, u, v, w, x, y, z, aa, bb, cc from S",
            "SELECT a, b, c, d, e, f, g, h, i, j, k, l, m, n, o, p, q, r, s, t, u, v, w, x, y,\n"
            "       z, aa, bb, cc\nFROM S",
        ),
        (
            "register static table R (a int, b char(4), primary key (a)) with (unit = millisecond, slack = -5, f = 1.5)",
            "REGISTER STATIC RELATION R (a INT, b CHAR(4), KEY (a)) WITH (unit = 'millisecond', slack = -5, f = 1.5)",
        ),
        ("register view V (a, b) as select a, b from S", "REGISTER VIEW V (a, b) AS\nSELECT a, b\nFROM S"),
    ],
)
def test_canonical_text(text, expected):
    stmt = parse_statement(text)
    assert to_cql(stmt) == expected
    assert parse_statement(expected) == stmt


def test_quote_name():
    assert quote_name("abc") == "abc"
    assert quote_name("day") == "day"
    kws = keywords()
    assert {"select", "from", "key", "range", "rows", "now", "sample", "minus", "cast", "end"} <= kws
    assert not {"day", "min", "ms", "count", "type"} & kws
    for kw in kws:
        assert quote_name(kw) == f"`{kw}`"
        assert quote_name(kw.upper()) == f"`{kw.upper()}`"
    assert quote_name("a b") == "`a b`"
    with pytest.raises(ValueError):
        quote_name("a`b")


def test_keywords_are_the_parsers_literal_words():
    """The printer reads the keywords off the grammar's text; they are exactly the words of the
    parser's own literal terminals (so printing quotes what the parser would read as a keyword)."""
    from cqlstream.cql.parser import _lark

    word = re.compile(r"[A-Za-z]+\Z")
    terminals = {
        t.pattern.value.lower()
        for t in _lark().terminals
        if type(t.pattern).__name__ == "PatternStr" and word.match(t.pattern.value)
    }
    assert keywords() == terminals and len(terminals) > 40


def test_other_nodes():
    assert to_cql(ast.RangeWindow(ast.Duration(10, "minute"))) == "[RANGE 10 MINUTE]"
    assert to_cql(ast.TypeName("varchar", 64)) == "VARCHAR(64)"
    assert to_cql(ast.Literal(-2.0, "float")) == "-2.0"
    assert to_cql(ast.Literal(float("-inf"), "float")) == "-1e999"
    assert to_cql(ast.Binary("*", ast.Literal(-3, "int"), ast.Column("S", "a"))) == "-3 * S.a"
    assert math.isclose(
        parse_statement(f"select {to_cql(ast.Literal(1e-7, 'float'))} from S").items[0].expr.value, 1e-7
    )


def test_long_chain_does_not_recurse():
    e = ast.Column(None, "a")
    for _ in range(3000):
        e = ast.Binary("and", e, ast.Column(None, "b"))
    assert to_cql(e).count(" AND ") == 3000
