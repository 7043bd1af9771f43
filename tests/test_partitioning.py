"""Partitioning analysis (cql/logical/partitioning.py), one case per line: query → the key its
state partitions on, or the reason it does not (and the partitionable prefix / global tail)."""

from __future__ import annotations

import json

import pytest

from cqlstream.cli import main
from cqlstream.cql.ddl import catalog_from_ddl
from cqlstream.cql.frontend import compile_query
from cqlstream.cql.logical.partitioning import partitioning
from cqlstream.engine.dsms import Dsms

DDL = (
    "register stream S (k int, v int, w int); register stream T (k int, u int); "
    "register stream U (k int, z int); register relation R (k int, x int)"
)

# query → expected `describe()`; keys are `by ...`, no keyed state `on any key ...`, else `none: <reason>...`
CASES = [
    ("select k, sum(v) from S [Range 10] group by k", "by S.k"),
    ("select k, sum(v) from S [Range 10] group by k, v", "by S.k, S.v"),
    ("select * from S [Range 10], T [Range 10] where S.k = T.k", "by S.k = T.k"),
    ("select * from S [Range 10], T [Range 10] where T.k = S.k and S.v > T.u", "by S.k = T.k"),
    ("select * from S [Range 10], T [Range 5], U [Now] where S.k = T.k and T.k = U.k", "by S.k = T.k = U.k"),
    ("select T.k, count(*) from S [Range 10], T [Range 10] where S.k = T.k group by T.k", "by S.k = T.k"),
    ("select * from S [Partition By k Rows 3]", "by S.k"),
    ("select k, count(*) from S [Partition By k, v Rows 2] group by k", "by S.k"),
    ("select distinct k from S [Range 5]", "by S.k"),
    ("Istream(select k, sum(v) from S [Range 10] group by k)", "by S.k"),
    ("select * from S [Range 10], R where S.k = R.k", "by R.k = S.k"),
    ("select * from S where v > 1", "on any key (no keyed state)"),
    ("select k, v + 1 from S [Range 4]", "on any key (no keyed state)"),
    ("select k from S [Range 3] union select k from T [Range 3]", "on any key (no keyed state)"),
    (
        "select sum(v), count(*) from S [Range 10]",
        "none: a global aggregate (no group-by) needs every row; partitionable prefix: the input, on any key; "
        "global tail: a final merge of per-partition partial count, sum",
    ),
    (
        "select count(distinct v) from S [Range 10]",
        "none: a global aggregate (no group-by) needs every row; partitionable prefix: the input, on any key; "
        "global tail: AGGREGATE: count(DISTINCT v) over every row (count(DISTINCT v) not mergeable from partials)",
    ),
    ("select k, count(*) from S [Rows 10] group by k", "none: a Rows 10 window over the whole stream needs"),
    ("select * from S [Range 10], T [Range 10] where S.v < T.u", "none: the join has no equi-join key common"),
    ("select * from S [Range 10], T [Range 10]", "none: the join has no equi-join key common to all its inputs"),
    (
        "select * from S [Range 10], T [Range 5], U [Now] where S.k = T.k and S.v = U.z",
        "none: the join has no equi-join key common to all its inputs",
    ),
    (
        "select S.v, count(*) from S [Range 10], T [Range 10] where S.k = T.k group by S.v",
        "none: the group-by keys (S.v) share no column with the key below (S.k = T.k); partitionable prefix: "
        "the inputs, by S.k = T.k; global tail: a final merge of per-partition partial count by the group-by keys",
    ),
    ("select k + 1, count(*) from S [Range 10] group by k + 1", "none: the group-by keys are not source columns"),
    (
        "select A.k from S [Range 3] as A, S [Range 3] as B where A.k = B.v",
        "none: S is read twice, keyed on different columns",
    ),
]


@pytest.fixture(scope="module")
def catalog():
    return catalog_from_ddl(DDL)


@pytest.mark.parametrize("query,expected", CASES, ids=[q for q, _ in CASES])
def test_partitioning(catalog, query, expected):
    p = partitioning(compile_query(query, catalog).plan)
    assert p.describe().startswith(expected), p.describe()
    assert p.partitioned == (not expected.startswith("none"))


def test_source_keys_name_each_streams_columns(catalog):
    p = partitioning(compile_query("select * from S [Range 10], T [Range 10] where S.k = T.k", catalog).plan)
    assert [(s.source, s.columns, s.names) for s in p.sources] == [("S", (0,), ("k",)), ("T", (0,), ("k",))]
    p2 = partitioning(compile_query("select w, v, sum(k) from S [Range 10] group by w, v", catalog).plan)
    assert p2.key == ("S.v", "S.w") and p2.sources[0].columns == (1, 2)
    assert p2.to_dict()["sources"] == {"S": ["v", "w"]}


def test_reported_in_explain_api_and_cli(capsys):
    d = Dsms()
    d.execute(DDL)
    h = d.register_query("select k, sum(v) from S [Range 10] group by k")
    assert h.explain().splitlines()[-1] == "Partitioning: by S.k"
    assert h.partitioning.to_dict()["key"] == ["S.k"]
    g = d.register_query("select sum(v) from S [Range 10]")
    assert g.partitioning.to_dict()["reason"] == "a global aggregate (no group-by) needs every row"
    assert main(["explain", "--ddl", DDL, "select * from S [Rows 3]"]) == 0
    assert capsys.readouterr().out.splitlines()[-1].startswith("Partitioning: none: a Rows 3 window")
    assert main(["explain", "--json", "--ddl", DDL, "select k, count(*) from S [Range 2] group by k"]) == 0
    assert json.loads(capsys.readouterr().out)["partitioning"]["sources"] == {"S": ["k"]}


def test_spark_run_refuses_what_does_not_partition(capsys):
    assert main(["spark-run", "--explain", "--ddl", DDL, "select k, max(v) from S [Range 5] group by k"]) == 0
    assert capsys.readouterr().out == "partitioning: by S.k\n"
    assert main(["spark-run", "--ddl", DDL, "select * from S [Rows 4]", "--source", "S=csv:/nowhere"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("cqlstream spark-run: this query cannot run partitioned: a Rows 4 window over the whole")
