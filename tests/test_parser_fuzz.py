"""Parser fuzzing: any text either parses or raises CqlError (never another exception), and a
syntax error always says where (line/column inside the text) without leaking a traceback.

`check_text` is the single oracle; later stages (the analyzer) hook in there.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from cqlstream.cql.errors import CqlError
from cqlstream.cql.parser import parse_script, parse_statement

CORPUS = Path(__file__).parent / "corpus" / "papers.cql"


def check_text(text: str):
    """Parse `text`; return the statement, or the CqlError it was rejected with.

    Fails the test on any exception other than CqlError, and on a CqlError that is not
    self-explanatory (syntax errors must point into the text; no Python traceback in it).
    """
    try:
        return parse_statement(text)
    except CqlError as err:
        _check_error(err, text)
        return err


def _check_error(err: CqlError, text: str) -> None:
    message = str(err)
    assert "Traceback" not in message, message
    assert err.reason and "\n" not in err.reason, repr(err.reason)
    assert isinstance(err.code, str) and err.code
    if err.code == "syntax":
        assert err.pos is not None, f"syntax error without a position: {message!r} for {text!r}"
        assert err.line is not None and err.column is not None
        # Lark counts lines by '\n' only.
        assert 1 <= err.line <= text.count("\n") + 1, (err.pos, text)
        assert err.column >= 1, (err.pos, text)
    d = err.to_dict()
    assert d["code"] == err.code and d["line"] == err.line and d["column"] == err.column
    err.excerpt()  # must not raise


# ---------------------------------------------------------------- random token soup

KEYWORDS = [
    "select",
    "SELECT",
    "Select",
    "from",
    "FROM",
    "where",
    "group",
    "by",
    "having",
    "distinct",
    "register",
    "REGISTER",
    "static",
    "stream",
    "relation",
    "table",
    "view",
    "primary",
    "key",
    "with",
    "as",
    "union",
    "all",
    "except",
    "minus",
    "intersect",
    "istream",
    "Dstream",
    "RSTREAM",
    "range",
    "rows",
    "now",
    "slide",
    "partition",
    "unbounded",
    "preceding",
    "sample",
    "and",
    "or",
    "not",
    "between",
    "in",
    "like",
    "is",
    "null",
    "true",
    "false",
    "exists",
    "case",
    "when",
    "then",
    "else",
    "end",
    "cast",
    "count",
    "sum",
    "integer",
    "char",
    "varchar",
    "minutes",
    "second",
    "ms",
    "day",
    "hours",
]
PUNCT = [
    "(",
    ")",
    "[",
    "]",
    ",",
    ".",
    ";",
    "*",
    "=",
    "==",
    "!=",
    "<>",
    "<",
    ">",
    "<=",
    ">=",
    "+",
    "-",
    "/",
    "%",
    "||",
    "|",
    "--",
    "/*",
    "*/",
    "'",
    '"',
    "`",
    "!",
    "?",
    "@",
    "$",
    "#",
    "{",
    "}",
]
ATOMS = [
    "S",
    "T",
    "a",
    "b",
    "S1",
    "_x",
    "`a b`",
    "`",
    "``",
    "0",
    "1",
    "10",
    "1,000",
    "50,000",
    "1,00",
    "1.5",
    ".5",
    "1e9",
    "1e",
    "1.5e-3",
    "007",
    "'str'",
    "'it''s'",
    "''",
    "'",
    '"dq"',
    '"',
    "'unterminated",
    "-- comment\n",
    "/* c */",
    "/* open",
]
WHITESPACE = [" ", " ", " ", "", "\n", "\t", "\r\n", "\x0c", "\u00a0", "\u2028"]
UNICODE = ["é", "ß", "∑", "→", "😀", "\x00", "\x7f", "\ufeff", "中文", "\U0010ffff"]

tokens = st.sampled_from(KEYWORDS + PUNCT + ATOMS + UNICODE)
token_soup = st.lists(st.tuples(tokens, st.sampled_from(WHITESPACE)), max_size=40).map(
    lambda pairs: "".join(t + w for t, w in pairs)
)
raw_text = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=60)
cql_chars = st.text(alphabet="selctfromwhag()[],.;*=<>+-/%|'\"` \n\t0123456789SRT_", max_size=80)

SETTINGS = settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(st.one_of(token_soup, raw_text, cql_chars))
@example("")
@example(";")
@example("select")
@example("select a from S where\n\n")
@example("select\x0ca from")
@example("select 'abc")
@example("select `abc")
@example("select * from S [range 10 parsecs]")
@example("select * from S [rows 1,00]")
@example("select " + "9" * 5000 + " from S")
@example("select 1e999 from S sample(1e400)")
def test_random_text(text):
    check_text(text)


# ---------------------------------------------------------------- corpus mutations


def corpus_statements() -> list[str]:
    """The statement texts of the corpus (comment lines dropped, split at ';')."""
    body = "\n".join(ln for ln in CORPUS.read_text().splitlines() if not ln.lstrip().startswith("--"))
    return [s.strip() for s in body.split(";") if s.strip()]


STATEMENTS = corpus_statements()
_TOKEN_RE = re.compile(r"\s+|[A-Za-z_][A-Za-z0-9_]*|[0-9][0-9,.]*|'(?:[^']|'')*'|\"[^\"]*\"|\|\||<>|<=|>=|.", re.S)


def _tokens(text: str) -> list[str]:
    return _TOKEN_RE.findall(text)


@st.composite
def mutated(draw):
    """A corpus statement with 1-4 random edits of token spans or characters."""
    parts = _tokens(draw(st.sampled_from(STATEMENTS)))
    for _ in range(draw(st.integers(1, 4))):
        n = len(parts)
        kind = draw(st.sampled_from(["delete", "insert", "duplicate", "swap", "char", "truncate"]))
        i = draw(st.integers(0, n))
        j = draw(st.integers(i, min(n, i + 6)))
        if kind == "delete":
            del parts[i:j]
        elif kind == "insert":
            parts[i:i] = [draw(tokens), draw(st.sampled_from(WHITESPACE))]
        elif kind == "duplicate":
            parts[i:i] = parts[i:j]
        elif kind == "swap":
            k = draw(st.integers(0, n))
            l = draw(st.integers(k, min(n, k + 6)))
            a, b = parts[i:j], parts[k:l]
            if j <= k:
                parts = parts[:i] + b + parts[j:k] + a + parts[l:]
            elif l <= i:
                parts = parts[:k] + a + parts[l:i] + b + parts[j:]
        elif kind == "char":
            text = "".join(parts)
            p = draw(st.integers(0, len(text)))
            op = draw(st.sampled_from(["delete", "insert", "replace"]))
            c = draw(st.sampled_from(list("()[],.;*='\"`-/ \n0a") + UNICODE))
            if op == "delete":
                text = text[:p] + text[p + 1 :]
            elif op == "insert":
                text = text[:p] + c + text[p:]
            else:
                text = text[:p] + c + text[p + 1 :]
            parts = _tokens(text) if text else []
        else:  # truncate
            parts = parts[:i]
    return "".join(parts)


@SETTINGS
@given(mutated())
def test_mutated_corpus(text):
    check_text(text)


@pytest.mark.parametrize("text", STATEMENTS)
def test_corpus_statements_parse(text):
    assert not isinstance(check_text(text), CqlError)


def test_corpus_script_parses():
    assert len(parse_script(CORPUS.read_text())) == len(STATEMENTS)


# ---------------------------------------------------------------- pathological inputs


@pytest.mark.parametrize(
    "text",
    [
        "select " + "(" * 5000 + "a" + ")" * 5000 + " from S",
        "select " + " - ".join(["a"] * 3000) + " from S",
        "select * from S where " + " and ".join(f"a{i} = {i}" for i in range(3000)),
        "select " + "-" * 2 + "a from S",  # `--` is a comment
        "select " + "- " * 3000 + "a from S",
        "select " + "not " * 3000 + "a from S",
        "(" * 3000 + "select a from S" + ")" * 3000,
        "select * from S where a in (" + ", ".join(str(i) for i in range(5000)) + ")",
    ],
    ids=["parens", "minus-chain", "and-chain", "comment", "signs", "nots", "query-parens", "long-in-list"],
)
def test_deep_or_long_input(text):
    check_text(text)
