"""CASE with a NULL branch (THEN NULL / ELSE NULL) of every result type, engine vs reference.

A THEN NULL once crashed the engine at run time: the NULL literal's placeholder values were cast
to the CASE's type (int(None))."""

from __future__ import annotations

import pytest

from tests.engine_harness import assert_same

DDL = "register stream S (a int, b int, f float, s char(4));"
ROWS = [(0, (1, 1, 0.5, "p")), (1, (2, None, 1.5, None)), (1, (3, 5, None, "q")), (2, (None, 2, 2.5, "r"))]

QUERIES = [
    "select a, case when b > 1 then null else b end from S",
    "select a, case when b > 1 then b else null end from S",
    "select a, case b when 2 then null end from S",
    "select a, case when b > 1 then null when a = 1 then a + 10 else -1 end from S",
    "select case when b > 1 then null else f end from S",
    "select case when b > 1 then null else s end from S",
    "select case when a is null then null else 'x' end from S",
    "select b, count(*) from S [Range 2] group by b having case when b = 1 then null else 1 end = 1",
]


@pytest.mark.parametrize("query", QUERIES)
def test_case_with_a_null_branch_equals_the_reference(query):
    assert_same(DDL, query, {"S": ROWS})
