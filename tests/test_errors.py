"""Bad CQL is rejected with a CqlError whose code, line and column are exactly right.

One row per malformed or ill-typed query (or DDL statement): the expected error code, the
1-based line and column the error points at, and a substring of the one-line reason. Every
error must also carry the query text, so its message shows a caret excerpt. The CLI tests check
that `cqlstream explain` turns the same errors into exit status 1 and a `line L, column C:` message.
"""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from cqlstream.cql.catalog import Catalog
from cqlstream.cql.ddl import catalog_from_ddl, execute_ddl
from cqlstream.cql.errors import CqlError
from cqlstream.cql.frontend import compile_query

DDL = """
register stream S (A integer, B integer, C char(8));
register stream T (A integer, D float);
register stream M (A integer, E integer) with (unit = millisecond);
register relation R (A integer, F varchar(20));
register static relation SR (A integer, G integer);
register view V as select A, B from S where A > 0;
register stream Orders (OrderId integer, Amount float, Region varchar(8));
register view BigOrders as select * from Orders where Amount > 100;
"""


@dataclass(frozen=True)
class Bad:
    id: str
    text: str
    code: str
    line: int
    column: int
    reason: str  # a substring of the reason
    ddl: bool = False  # `text` is a registration run against the fixture catalog


def lines(*parts: str) -> str:
    """A multi-line query, one argument per line (keeps columns obvious)."""
    return "\n".join(parts)


CASES = [
    # ------------------------------------------------------------ syntax
    Bad("missing_from", "select A", "syntax", 1, 9, "unexpected end of input"),
    Bad("missing_from_multiline", lines("select A, B", "where A > 1"), "syntax", 2, 7, "'from'"),
    Bad("unbalanced_open_paren", "select * from S where (A > 1", "syntax", 1, 29, "expected ')'"),
    Bad("unbalanced_close_paren", "select * from S where A > 1)", "syntax", 1, 28, "unexpected ')'"),
    Bad("unclosed_window_bracket", "select * from S [Rows 5 where A > 1", "syntax", 1, 36, "expected ']'"),
    Bad(
        "unclosed_window_bracket_multiline",
        lines("select A,", "       B", "from S [Range 10", "where A > 1"),
        "syntax",
        4,
        12,
        "expected ']'",
    ),
    Bad("window_rows_without_count", "select * from S [Rows]", "syntax", 1, 22, "unexpected ']'"),
    Bad("window_range_without_size", "select * from S [Range]", "syntax", 1, 23, "an integer"),
    Bad("window_unknown_unit", "select * from S [Range 5 Furlongs]", "syntax", 1, 26, "unexpected 'Furlongs'"),
    Bad("window_partition_without_rows", "select * from S [Partition By A]", "syntax", 1, 32, "'rows'"),
    Bad("unterminated_string", "select * from S where C = 'abc", "syntax", 1, 27, "unterminated string"),
    Bad(
        "unterminated_string_multiline",
        lines("select *", "from S", 'where C = "abc'),
        "syntax",
        3,
        11,
        "unterminated string",
    ),
    Bad("unterminated_comment", "select * /* oops", "syntax", 1, 10, "unterminated comment"),
    Bad("unterminated_quoted_name", "select * from `S", "syntax", 1, 15, "unterminated quoted name"),
    Bad("stray_character", "select * from S where A > 1 $", "syntax", 1, 29, "unexpected character '$'"),
    Bad("trailing_garbage", "select * from S where A > 1 garbage", "syntax", 1, 29, "unexpected 'garbage'"),
    Bad("second_statement", "select * from S; select * from T", "syntax", 1, 18, "unexpected 'select'"),
    Bad("keyword_as_name", "select exists from S", "syntax", 1, 15, "expected '('"),
    Bad("empty_input", "", "syntax", 1, 1, "unexpected end of input"),
    Bad("comment_only", "-- nothing here", "syntax", 1, 16, "unexpected end of input"),
    Bad("registration_is_not_a_query", "register stream X (A integer)", "not_a_query", 1, 1, "registration"),
    # ------------------------------------------------------------ names
    # ------------------------------------------------------------ close matches suggested
    # A misspelled keyword reads as a name, so the parser stumbles on the word after it: the error
    # points at the misspelling instead (when spelling it as the keyword parses further).
    Bad("misspelled_select", "selec A from S", "syntax", 1, 1, "unexpected 'selec'; did you mean SELECT?"),
    Bad("misspelled_from", "select A fro S", "syntax", 1, 10, "unexpected 'fro'; did you mean FROM?"),
    Bad("misspelled_where", "select * from S wher A > 1", "syntax", 1, 17, "did you mean WHERE?"),
    Bad("misspelled_group", lines("select A, count(*)", "from S gruop by A"), "syntax", 2, 8, "did you mean GROUP?"),
    Bad("misspelled_window_kind", "select * from S [Rnge 5]", "syntax", 1, 18, "'Rnge'; did you mean RANGE?"),
    Bad("misspelled_time_unit", "select * from S [Range 5 secnds]", "syntax", 1, 26, "did you mean SECONDS?"),
    Bad("misspelled_istream", "istrem(select * from R)", "syntax", 1, 1, "did you mean ISTREAM?"),
    Bad("close_stream_name", "select * from Ordrs", "unknown_source", 1, 15, "'Ordrs'; did you mean Orders?"),
    Bad("close_view_name", "select * from BigOrder", "unknown_source", 1, 15, "did you mean BigOrders?"),
    Bad("close_column_name", "select Amont from Orders", "unknown_column", 1, 8, "SELECT; did you mean Amount?"),
    Bad(
        "close_column_in_where",
        "select * from Orders where Regin = 'x'",
        "unknown_column",
        1,
        28,
        "did you mean Region?",
    ),
    Bad(
        "close_qualified_column",
        "select O.OrderID2 from Orders O",
        "unknown_column",
        1,
        8,
        "'O' has no column 'OrderID2'; did you mean OrderId?",
    ),
    Bad(
        "close_alias",
        "select Ordrs.Amount from Orders",
        "unknown_source",
        1,
        8,
        "'Ordrs' in SELECT; did you mean Orders?",
    ),
    Bad("close_function", "select sqr(A) from S", "unknown_function", 1, 8, "'sqr'; did you mean sqrt?"),
    Bad("close_aggregate", "select cont(A) from S", "unknown_function", 1, 8, "'cont'; did you mean count?"),
    Bad("unknown_stream", "select * from Nope", "unknown_source", 1, 15, "unknown stream, relation or view 'Nope'"),
    Bad("unknown_column", "select Z from S", "unknown_column", 1, 8, "unknown column 'Z' in SELECT"),
    Bad(
        "unknown_column_multiline",
        lines("select A", "from S", "where Zed > 1"),
        "unknown_column",
        3,
        7,
        "unknown column 'Zed' in WHERE",
    ),
    Bad("unknown_qualified_column", "select S.Z from S", "unknown_column", 1, 8, "'S' has no column 'Z'"),
    Bad("unknown_alias_qualifier", "select X.A from S", "unknown_source", 1, 8, "unknown table or alias 'X'"),
    Bad("unknown_alias_in_star", "select T.* from S", "unknown_source", 1, 8, "unknown table or alias 'T'"),
    Bad("ambiguous_column", "select A from S, T", "ambiguous_column", 1, 8, "column 'A' is ambiguous"),
    Bad("ambiguous_column_self_join", "select * from S, S as S2 where A = 1", "ambiguous_column", 1, 32, "S.A or S2.A"),
    Bad("duplicate_alias", "select * from S, S", "duplicate_alias", 1, 18, "'S' appears twice"),
    Bad(
        "duplicate_alias_multiline",
        lines("select *", "from S [Rows 10],", "     T [Rows 10] as S"),
        "duplicate_alias",
        3,
        6,
        "'S' appears twice",
    ),
    Bad(
        "partition_by_unknown_column",
        "select * from S [Partition By Z Rows 1]",
        "unknown_column",
        1,
        31,
        "unknown partition column 'Z'",
    ),
    Bad(
        "window_where_unknown_column",
        "select * from S [Range 1 Where Z > 1]",
        "unknown_column",
        1,
        32,
        "in the window's WHERE",
    ),
    # ------------------------------------------------------------ aggregates and grouping
    Bad("aggregate_in_where", "select A from S where sum(B) > 1", "aggregate_in_where", 1, 23, "use HAVING"),
    Bad(
        "aggregate_in_group_by",
        "select sum(B) from S group by sum(B)",
        "aggregate_in_group_by",
        1,
        31,
        "not allowed in GROUP BY",
    ),
    Bad(
        "aggregate_in_window_where",
        "select * from S [Range 1 Where sum(B) > 1]",
        "misplaced_aggregate",
        1,
        32,
        "aggregate sum() is not allowed in the window's WHERE",
    ),
    Bad("nested_aggregate", "select sum(max(B)) from S", "nested_aggregate", 1, 8, "cannot be nested"),
    Bad("non_grouped_column", "select A, sum(B) from S", "not_grouped", 1, 8, "column 'A' must appear in GROUP BY"),
    Bad(
        "non_grouped_column_in_having",
        lines("select A, count(*)", "from S [Range 1 minute]", "group by A", "having count(*) > 1 and B < 3"),
        "not_grouped",
        4,
        25,
        "column 'B' must appear in GROUP BY",
    ),
    Bad("non_grouped_star", "select * from S group by A", "not_grouped", 1, 8, "'S.B' must appear in GROUP BY"),
    Bad("sum_star", "select sum(*) from S", "bad_call", 1, 8, "only count(*)"),
    Bad("aggregate_two_arguments", "select sum(A, B) from S", "bad_call", 1, 8, "takes exactly one argument"),
    Bad("avg_of_string", "select avg(C) from S", "type_mismatch", 1, 8, "avg() expects a number, got CHAR(8)"),
    # ------------------------------------------------------------ windows and sampling
    Bad("window_on_relation", "select * from R [Range 1]", "window_on_relation", 1, 18, "window on relation 'R'"),
    Bad(
        "window_on_relation_subquery",
        "select * from (select * from S [Rows 3]) [Rows 5]",
        "window_on_relation",
        1,
        43,
        "subquery whose result is a relation",
    ),
    Bad("sample_on_relation", "select * from R sample(10)", "sample_on_relation", 1, 15, "SAMPLE on relation 'R'"),
    Bad("sample_zero", "select * from S sample(0)", "bad_sample", 1, 15, "SAMPLE(0) must be a percentage"),
    Bad("sample_150", "select * from S sample(150)", "bad_sample", 1, 15, "SAMPLE(150) must be a percentage"),
    Bad("rows_zero", "select * from S [Rows 0]", "bad_window", 1, 18, "at least 1 row"),
    Bad("partition_rows_zero", "select * from S [Partition By A Rows 0]", "bad_window", 1, 18, "at least 1 row"),
    Bad("range_slide_zero", "select * from S [Range 10 Slide 0]", "bad_window", 1, 33, "SLIDE must be positive"),
    Bad(
        "range_slide_zero_seconds",
        "select * from S [Range 1 second Slide 0 seconds]",
        "bad_window",
        1,
        39,
        "SLIDE must be positive",
    ),
    Bad("rows_slide_zero", "select * from S [Rows 5 Slide 0]", "bad_window", 1, 18, "SLIDE must be positive"),
    Bad(
        "time_unit_not_whole",
        "select * from S [Range 500 milliseconds]",
        "bad_window",
        1,
        24,
        "not a whole number of seconds",
    ),
    Bad(
        "time_unit_of_no_stream",
        "select * from (istream(select * from R)) [Range 5 seconds]",
        "bad_window",
        1,
        49,
        "has no time unit",
    ),
    Bad("join_of_different_time_units", "select * from S, M", "time_unit_mismatch", 1, 18, "different time units"),
    Bad(
        "union_of_different_time_units",
        lines("select A", "from S", "union", "select A", "from M"),
        "time_unit_mismatch",
        4,
        1,
        "different time units",
    ),
    Bad(
        "subquery_with_different_time_unit",
        "select * from S where A in (select A from M)",
        "time_unit_mismatch",
        1,
        23,
        "different time units",
    ),
    # ------------------------------------------------------------ types
    Bad(
        "compare_number_with_string",
        "select * from S where A = 'x'",
        "type_mismatch",
        1,
        23,
        "cannot compare INTEGER with VARCHAR",
    ),
    Bad(
        "compare_in_window_where",
        "select * from S [Range 1 Where B > 'x']",
        "type_mismatch",
        1,
        32,
        "cannot compare INTEGER with VARCHAR",
    ),
    Bad("arithmetic_on_string", "select C + 1 from S", "type_mismatch", 1, 8, "cannot apply '+' to CHAR(8)"),
    Bad("negate_string", "select -C from S", "type_mismatch", 1, 8, "unary '-' needs a number"),
    Bad("not_on_number", "select * from S where not A", "type_mismatch", 1, 23, "NOT needs a boolean, got INTEGER"),
    Bad(
        "or_on_number",
        "select * from S [Now] where C like 'x%' or 3",
        "type_mismatch",
        1,
        44,
        "OR needs a boolean, got INTEGER",
    ),
    Bad("like_on_numbers", "select * from S where A like 5", "type_mismatch", 1, 23, "LIKE needs strings"),
    Bad(
        "between_mixed_types",
        "select * from S where A between 'a' and 3",
        "type_mismatch",
        1,
        23,
        "BETWEEN compares INTEGER with VARCHAR",
    ),
    Bad(
        "case_branch_types",
        "select case when A > 1 then 'x' else 2 end from S",
        "type_mismatch",
        1,
        29,
        "CASE branches mix",
    ),
    Bad(
        "case_condition_not_boolean",
        "select case when A then 1 end from S",
        "type_mismatch",
        1,
        18,
        "CASE WHEN needs a boolean",
    ),
    Bad(
        "case_operand_type",
        "select case A when 'x' then 1 end from S",
        "type_mismatch",
        1,
        20,
        "CASE compares INTEGER with VARCHAR",
    ),
    Bad("bad_cast", "select cast(A > 1 as integer) from S", "type_mismatch", 1, 8, "cannot cast BOOLEAN to INTEGER"),
    Bad("cast_to_unknown_type", "select cast(A as blob) from S", "unknown_type", 1, 18, "unknown type 'blob'"),
    Bad(
        "where_not_boolean",
        "select * from S where A",
        "type_mismatch",
        1,
        23,
        "WHERE must be a boolean condition, got INTEGER",
    ),
    Bad(
        "where_not_boolean_multiline",
        lines("select A", "  from S", " where A > 1", "   and B + 1"),
        "type_mismatch",
        4,
        8,
        "WHERE must be a boolean condition",
    ),
    Bad(
        "having_not_boolean",
        "select A from S group by A having count(*)",
        "type_mismatch",
        1,
        35,
        "HAVING must be a boolean condition, got INTEGER",
    ),
    # ------------------------------------------------------------ functions
    Bad("unknown_function", "select foo(A) from S", "unknown_function", 1, 8, "unknown function 'foo'"),
    Bad("wrong_arity", "select abs(A, B) from S", "bad_call", 1, 8, "abs() takes 1 argument(s), got 2"),
    Bad("distinct_on_scalar_function", "select abs(distinct A) from S", "bad_call", 1, 8, "is not an aggregate"),
    Bad("star_on_scalar_function", "select abs(*) from S", "bad_call", 1, 8, "is not an aggregate"),
    Bad("function_argument_type", "select substr(C, 'x') from S", "type_mismatch", 1, 8, "substr() expects"),
    # ------------------------------------------------------------ set operations, IN, subqueries
    Bad(
        "union_width",
        "select A from S union select A, D from T",
        "set_width",
        1,
        17,
        "UNION inputs have 1 and 2 columns",
    ),
    Bad(
        "union_type_mismatch",
        "select C from S union select D from T",
        "type_mismatch",
        1,
        17,
        "UNION column 'C': CHAR(8) vs FLOAT",
    ),
    Bad("except_width_of_views", "V except select A from S", "set_width", 1, 3, "EXCEPT inputs have 2 and 1"),
    Bad(
        "in_list_type_mismatch",
        "select * from S where A in (1, 'x')",
        "type_mismatch",
        1,
        32,
        "IN list compares INTEGER with VARCHAR",
    ),
    Bad(
        "in_subquery_width",
        "select * from S where A in (select A, D from T)",
        "in_width",
        1,
        23,
        "IN compares 1 value(s) with a subquery returning 2 column(s)",
    ),
    Bad(
        "whole_tuple_in_width",
        "select * from S where S in (select * from T)",
        "in_width",
        1,
        23,
        "IN compares 3 value(s)",
    ),
    Bad("whole_tuple_compared", "select * from S where S = 1", "tuple_reference", 1, 23, "'S' names a whole tuple"),
    Bad("whole_tuple_selected", "select S from S", "tuple_reference", 1, 8, "'S' names a whole tuple"),
    Bad(
        "whole_tuple_in_list",
        "select * from S where S in (1, 2)",
        "tuple_reference",
        1,
        23,
        "only allowed on the left of IN (subquery)",
    ),
    Bad(
        "subquery_under_or",
        "select * from S where A > 1 or A in (select A from T)",
        "misplaced_subquery",
        1,
        32,
        "only supported as an AND-term of WHERE",
    ),
    Bad(
        "exists_in_having",
        "select A from S group by A having exists (select * from T)",
        "misplaced_subquery",
        1,
        35,
        "EXISTS (subquery) is only supported",
    ),
    Bad(
        "correlated_subquery_aggregates",
        "select * from S where exists (select count(*) from T where T.A = S.A)",
        "correlated_aggregate",
        1,
        31,
        "may not aggregate",
    ),
    Bad(
        "correlated_subquery_distinct",
        "select * from S where exists (select distinct A from T where T.A = S.A)",
        "correlated_aggregate",
        1,
        31,
        "may not aggregate or use DISTINCT",
    ),
    Bad(
        "correlated_select_item",
        "select * from S where A in (select S.A from T)",
        "correlated_select",
        1,
        29,
        "only supported in WHERE",
    ),
    Bad(
        "correlation_two_levels_out",
        lines(
            "select A",
            "  from S",
            " where A in (select A",
            "               from T",
            "              where exists (select *",
            "                              from R",
            "                             where R.A = S.A))",
        ),
        "unsupported_correlation",
        7,
        42,
        "'S.A' refers to an enclosing query",
    ),
    Bad(
        "correlation_inside_union",
        "select * from S where A in (select A from T where T.A = S.A union select A from R)",
        "unsupported_correlation",
        1,
        57,
        "refers to an enclosing query",
    ),
    # ------------------------------------------------------------ DDL
    Bad(
        "ddl_duplicate_column",
        "register stream X (A integer, a float)",
        "duplicate_column",
        1,
        31,
        "column 'a' is declared twice",
        ddl=True,
    ),
    Bad("ddl_unknown_type", "register stream X (A blob)", "unknown_type", 1, 22, "unknown type 'blob'", ddl=True),
    Bad(
        "ddl_unknown_type_multiline",
        lines("register stream", "  X (A integer,", "     B blob)"),
        "unknown_type",
        3,
        8,
        "unknown type 'blob'",
        ddl=True,
    ),
    Bad("ddl_char_without_length", "register stream X (A char)", "bad_type", 1, 22, "needs a length", ddl=True),
    Bad("ddl_length_on_integer", "register stream X (A integer(4))", "bad_type", 1, 22, "takes no length", ddl=True),
    Bad(
        "ddl_unknown_option",
        "register stream X (A integer) with (colour = 'red')",
        "unknown_option",
        1,
        1,
        "unknown option 'colour'",
        ddl=True,
    ),
    Bad(
        "ddl_bad_unit",
        "register stream X (A integer) with (unit = fortnight)",
        "bad_option",
        1,
        1,
        "option 'unit'",
        ddl=True,
    ),
    Bad(
        "ddl_duplicate_option",
        "register stream X (A integer) with (unit = 'ms', unit = 'second')",
        "duplicate_option",
        1,
        1,
        "option 'unit' is given twice",
        ddl=True,
    ),
    Bad(
        "ddl_static_stream",
        "register static stream X (A integer)",
        "bad_static",
        1,
        1,
        "only relations can be static",
        ddl=True,
    ),
    Bad(
        "ddl_duplicate_registration",
        "register stream s (A integer)",
        "duplicate_name",
        1,
        1,
        "'s' is already registered",
        ddl=True,
    ),
    Bad(
        "ddl_duplicate_registration_second_statement",
        lines("register relation X (A integer);", "register view x as select * from S"),
        "duplicate_name",
        2,
        1,
        "'x' is already registered",
        ddl=True,
    ),
    Bad("ddl_empty_column_list", "register stream X ()", "syntax", 1, 20, "unexpected ')'", ddl=True),
    Bad(
        "ddl_view_query_error",
        "register view W as select Z from S",
        "unknown_column",
        1,
        27,
        "unknown column 'Z'",
        ddl=True,
    ),
    Bad(
        "ddl_view_width",
        "register view W (P, Q) as select A from S",
        "view_width",
        1,
        1,
        "names 2 columns but its query returns 1",
        ddl=True,
    ),
    Bad(
        "ddl_view_duplicate_columns",
        "register view W as select S.A, R.A from S, R",
        "duplicate_column",
        1,
        1,
        "two columns named 'A'",
        ddl=True,
    ),
    Bad("ddl_query_instead_of_registration", "select * from S", "not_ddl", 1, 1, "found a query", ddl=True),
]


@pytest.fixture(scope="module")
def catalog() -> Catalog:
    return catalog_from_ddl(DDL)


def _reject(case: Bad, catalog: Catalog) -> CqlError:
    with pytest.raises(CqlError) as info:
        if case.ddl:
            execute_ddl(catalog_from_ddl(DDL), case.text)  # a fresh catalog: DDL cases register things
        else:
            compile_query(case.text, catalog)
    return info.value


def test_case_ids_are_unique():
    ids = [c.id for c in CASES]
    assert len(ids) == len(set(ids))
    assert len(CASES) >= 45


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_rejected_with_position(case: Bad, catalog: Catalog):
    err = _reject(case, catalog)
    assert (err.code, err.line, err.column) == (case.code, case.line, case.column), str(err)
    assert case.reason in err.reason
    assert ("did you mean" in err.reason) == ("did you mean" in case.reason)  # hints only where close
    assert "\n" not in err.reason  # one line
    # The message names the place and shows it: `line L, column C: reason` then the line and a caret.
    text = str(err)
    assert text.startswith(f"line {case.line}, column {case.column}: ")
    src_line, caret_line = text.splitlines()[1:3]
    assert caret_line.strip().startswith("^")
    assert caret_line.index("^") == case.column + 1  # two spaces of indent, 1-based column
    assert src_line[2:] == (case.text.splitlines() or [""])[case.line - 1]
    d = err.to_dict()
    assert (d["code"], d["line"], d["column"]) == (case.code, case.line, case.column)


def test_catalog_unchanged_after_failed_query(catalog: Catalog):
    before = sorted(catalog.names())
    with pytest.raises(CqlError):
        compile_query("select * from S where A in (select A from M)", catalog)
    assert sorted(catalog.names()) == before


# ------------------------------------------------------------------ the CLI


def _cli(*args: str) -> subprocess.CompletedProcess:
    script = Path(sys.executable).parent / "cqlstream"
    cmd = [str(script)] if script.exists() else [sys.executable, "-m", "cqlstream"]
    return subprocess.run([*cmd, *args], capture_output=True, text=True, timeout=120)


CLI_DDL = "register stream S (A integer, B integer); register relation R (A integer)"


def test_cli_explain_bad_query_exits_1_with_position_and_caret():
    r = _cli("explain", "--ddl", CLI_DDL, "select * from Nope")
    assert r.returncode == 1, r.stderr
    assert "line 1, column 15:" in r.stderr
    assert "unknown stream, relation or view 'Nope'" in r.stderr
    err_lines = r.stderr.splitlines()
    caret = next(i for i, s in enumerate(err_lines) if s.strip().startswith("^"))
    assert err_lines[caret - 1].strip() == "select * from Nope"
    assert err_lines[caret].index("^") == err_lines[caret - 1].index("Nope")
    assert "Traceback" not in r.stderr


def test_cli_explain_multiline_syntax_error():
    r = _cli("explain", "--ddl", CLI_DDL, "select A\nfrom S [Range 5\nwhere A > 1")
    assert r.returncode == 1, r.stderr
    assert "line 3, column 12:" in r.stderr
    assert any(s.strip() == "^" for s in r.stderr.splitlines())
    assert "Traceback" not in r.stderr


def test_cli_explain_type_error_json():
    r = _cli("explain", "--json", "--ddl", CLI_DDL, "select * from S where A = 'x'")
    assert r.returncode == 1
    assert '"code": "type_mismatch"' in r.stdout
    assert '"line": 1' in r.stdout and '"column": 23' in r.stdout


def test_cli_explain_bad_ddl_is_reported_with_position():
    r = _cli("explain", "--ddl", "register stream S (A blob)", "select * from S")
    assert r.returncode != 0
    assert "line 1, column 22:" in r.stderr
    assert "Traceback" not in r.stderr


def test_cli_explain_good_query_exits_0():
    r = _cli("explain", "--ddl", CLI_DDL, "select A from S [Range 5] where A > 1")
    assert r.returncode == 0, r.stderr
    assert "Result: relation (A INTEGER)" in r.stdout
    assert "Logical plan:" in r.stdout
    assert r.stderr == ""
