"""Parses memoized by text (cql/parser.py `_parse_single`) and the script check without rewrites
(io/stream_script.py `Registrar(check_only=True)`): a STREAM script's statements are parsed once
per process, and `parse_script` still finds every user error of its queries."""

from __future__ import annotations

import pytest

from cqlstream.cql.errors import CqlError
from cqlstream.cql.parser import parse_query, parse_statement
from cqlstream.io.errors import ScriptError
from cqlstream.io.stream_script import parse_script


def test_a_statement_is_parsed_once_and_errors_every_time():
    text = "select a, Sum(b) from S [Range 5] group by a"
    assert parse_query(text) is parse_query(text)
    assert parse_statement("register stream S (a int);") is parse_statement("register stream S (a int);")
    for _ in range(2):
        with pytest.raises(CqlError) as e:
            parse_statement("select from S")
        assert e.value.code == "syntax"
    with pytest.raises(CqlError):
        parse_statement(42)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("query", "needle"),
    [
        ("select c from S", "c"),
        ("select a from Nope", "Nope"),
        ("Istream(select a from S [Range 2] where a + 'x' > 1)", "'+'"),
    ],
)
def test_the_check_still_reports_query_errors_on_their_line(tmp_path, query, needle):
    (tmp_path / "s.dat").write_text("i,i\n1,1\n")
    script = tmp_path / "q.cql"
    script.write_text(f"table : register stream S (a integer);\nsource : s.dat\nquery : {query};\ndest : out\n")
    with pytest.raises(ScriptError) as e:
        parse_script(script)
    assert e.value.line == 3 and needle in str(e.value)
