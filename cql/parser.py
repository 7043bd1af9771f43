"""CQL text → AST: the Lark LALR parser over grammar/cql.lark and a transformer to cql.ast nodes.

Every syntax error becomes a CqlError with line, column and the tokens the parser expected
(cql/syntax_errors.py). The transformer (cql/lark_tree.py), the error messages and lark itself
are imported on the first parse: `cqlstream run` takes its statements' ASTs from
cql/parse_cache.py and then never loads lark (~20 ms of its start).
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from cqlstream.cql import ast, parse_cache
from cqlstream.cql.errors import CqlError
from cqlstream.cql.nesting import check_depth

if TYPE_CHECKING:
    from lark import Lark

# grammar/ sits beside cql/ both in a source checkout and in the installed package (cqlstream.grammar)
_GRAMMAR = Path(__file__).resolve().parent.parent / "grammar" / "cql.lark"


def _grammar_path() -> Path:
    if not _GRAMMAR.exists():
        raise FileNotFoundError(f"CQL grammar not found at {_GRAMMAR}")
    return _GRAMMAR


@functools.lru_cache(maxsize=1)
def _lark() -> Lark:
    # the LALR tables are kept in the user's cache folder (cql/grammar_cache.py): ~0.3-1 s per start
    from cqlstream.cql.grammar_cache import cached_lark

    return cached_lark(
        _grammar_path().read_text(),
        parser="lalr",
        start=["script", "single"],
        propagate_positions=True,
        maybe_placeholders=False,
    )


_UNIT_CANON = {
    "ms": "millisecond",
    "msec": "millisecond",
    "msecs": "millisecond",
    "millisecond": "millisecond",
    "milliseconds": "millisecond",
    "sec": "second",
    "secs": "second",
    "second": "second",
    "seconds": "second",
    "min": "minute",
    "mins": "minute",
    "minute": "minute",
    "minutes": "minute",
    "hour": "hour",
    "hours": "hour",
    "day": "day",
    "days": "day",
}


def _parse(text: str, start: str) -> Any:
    if not isinstance(text, str):
        raise CqlError("syntax", "query text must be a string")
    from lark import Tree
    from lark.exceptions import UnexpectedInput, VisitError

    from cqlstream.cql.lark_tree import ToAst, meta_pos

    try:
        tree = _lark().parse(text, start=start)
    except UnexpectedInput as e:
        from cqlstream.cql.syntax_errors import syntax_error

        raise syntax_error(e, text, start) from None
    try:
        out = ToAst().transform(tree)
    except RecursionError:
        raise CqlError("too_complex", "statement is nested too deeply", None, text) from None
    except VisitError as e:
        if isinstance(e.orig_exc, CqlError):
            raise e.orig_exc.with_text(text) from None
        if isinstance(e.orig_exc, RecursionError):
            raise CqlError("too_complex", "statement is nested too deeply", None, text) from None
        where = meta_pos(e.obj.meta if isinstance(e.obj, Tree) else None)
        raise CqlError("syntax", f"malformed construct ({e.orig_exc})", where, text) from None
    for stmt in out if isinstance(out, list) else [out]:
        check_depth(stmt, text)
    return out


def parse_statement(text: str) -> ast.Statement:
    """Parse one statement (a query, a view or a source registration), `;` optional."""
    if not isinstance(text, str):
        raise CqlError("syntax", "query text must be a string")
    return _parse_single(text)


@functools.lru_cache(maxsize=512)
def _parse_single(text: str) -> ast.Statement:
    """Parses are memoized by text: a STREAM script is checked against a scratch catalog and then
    registered, each statement parsed both times (and the tree is immutable: frozen dataclasses of
    tuples). Errors are not cached: a bad statement raises every time. Under `cqlstream run` the
    ASTs are also kept between runs (cql/parse_cache.py)."""
    kept = parse_cache.lookup(text)
    if kept is not None:
        return cast(ast.Statement, kept)
    stmt = cast(ast.Statement, _parse(text, "single"))
    parse_cache.remember(text, stmt)
    return stmt


def parse_query(text: str) -> ast.Query:
    """Parse one query; DDL here is an error."""
    stmt = parse_statement(text)
    if not isinstance(stmt, ast.Query):
        raise CqlError("not_a_query", "expected a query, found a registration statement", stmt.pos, text)
    return stmt


def parse_script(text: str) -> list[ast.Statement]:
    """Parse `;`-separated statements."""
    return _parse(text, "script")
