"""Unnamed SELECT items get readable names (cql/naming.py): one row per form."""

from __future__ import annotations

import pytest

from cqlstream.cql.ddl import catalog_from_ddl
from cqlstream.cql.frontend import compile_query

DDL = """
register stream S (A integer, B integer, C varchar(8));
register relation R (A integer, D float);
"""

CASES = [
    ("select A, B from S", ["A", "B"]),
    ("select count(*) from S", ["count"]),
    ("select sum(A) from S", ["sum_A"]),
    ("select count(distinct B) from S", ["count_distinct_B"]),
    ("select A + B, A - B, A * B, A / B, A % B from S", ["A_plus_B", "A_minus_B", "A_times_B", "A_div_B", "A_mod_B"]),
    ("select -A, A + 1, A * 2.5 from S", ["neg_A", "A_plus_1", "A_times_2_5"]),
    ("select upper(C), C || 'x' from S", ["upper_C", "C_concat_str"]),
    ("select round(D, 1), cast(A as float) from R", ["round_D_1", "cast_A"]),
    ("select A > 1, A is null, case when A > 1 then 1 else 0 end from S", ["A_gt_1", "A_is_null", "case"]),
    ("select sum(A) as total, max(B) from S", ["total", "max_B"]),
    # derived names never shadow a column or alias, nor each other
    ("select sum(A), sum(A), count(*) as sum_A_2 from S", ["sum_A", "sum_A_3", "sum_A_2"]),
    ("select A, A from S", ["A", "A"]),
    ("select count(*) as count, count(*) from S", ["count", "count_2"]),
    ("select sum(A + B * A - B / A + B * B - A) + sum(B) from S", ["expr1"]),
]


@pytest.mark.parametrize(("cql", "names"), CASES, ids=[c for c, _ in CASES])
def test_output_column_names(cql: str, names: list[str]):
    q = compile_query(cql, catalog_from_ddl(DDL))
    assert [a.name for a in q.schema] == names
