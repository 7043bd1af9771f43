"""Column pruning (engine/column_pruning.py): which output columns each operator of the global plan
fills (fixtures: queries -> the columns produced per operator), results equal to the reference
evaluator and to the engine without pruning at 1, 7 and all events per push, queries sharing an
operator getting the union of their reads, DISTINCT / Istream / set operations reading whole rows,
a query registered while data flows that reads a pruned column (its own copies, exact results),
and a checkpoint of a pruning plan continuing exactly."""

from __future__ import annotations

import pytest

from cqlstream.cql.logical.explain import node_label
from cqlstream.engine import column_pruning
from cqlstream.engine.batch import Batch, blanked, concat, placeholder
from cqlstream.engine.dsms import Dsms
from cqlstream.engine.operators.join import JoinOp
from tests.engine_harness import _merge_events, assert_same, elements_of, feed, random_join_inputs
from tests.plan_harness import Results, assert_exact_from, reference, run_all

DDL = "register stream S (a int, b int, c int); register stream T (a int, x int, y int); register relation R (a int, e int)"


def produced(d: Dsms) -> dict[str, str]:
    """operator's EXPLAIN label -> the names of the output columns the operator fills, or '*' (all)."""
    out = {}
    for pn in d.plan.nodes.values():
        op = pn.op
        if op is None:
            continue
        key = node_label(pn.node)
        names = [a.name for a in pn.node.schema]
        out[key] = "*" if op.produced is None else ",".join(names[c] for c in sorted(op.produced))
    return out


J = "JOIN ON (A.a = B.a)"
BAND = "RSTREAM JOIN [NOW] of input 1 ON "
# queries registered together -> {operator (its label's start): columns it produces ('*': all)}
FIXTURES = [
    (
        ["select istream(A.b) from S [Range 2] as A, T [Rows 3] as B where A.a = B.a"],
        {J: "b", "WINDOW [RANGE 2]": "*", "PROJECT A.b": "*", "ISTREAM": "*"},
    ),
    (["select A.b from S [Range 2] as A where A.c > 1"], {"FILTER (c > 1)": "b", "PROJECT b": "*"}),
    (
        ["select A.a, sum(B.x) from S [Range 3] as A, T [Rows 2] as B where A.a = B.a group by A.a"],
        {J: "a,x", "AGGREGATE": "*"},
    ),
    (
        ["select count(*) from S [Range 3] as A, T [Rows 2] as B where A.a = B.a and A.b < B.y"],
        {"JOIN ON ((A.a = B.a) AND (A.b < B.y))": ""},  # COUNT(*) reads no column of its rows
    ),
    (["select rstream(A.b, B.x) from S [Now] as A, T [Range 3] as B where A.a = B.a"], {BAND + "(A.a = B.a)": "b,x"}),
    (
        ["select rstream(A.c) from S [Now] as A, S [Range 3] as B where A.a = B.a and A.b <> B.b"],
        {BAND + "((A.a = B.a) AND (A.b <> B.b))": "c"},
    ),
    (["select A.c, R.e from S [Range 2] as A, R where A.a = R.a"], {"JOIN ON (A.a = R.a)": "c,e"}),
    # two queries sharing one join: the union of their reads
    (
        [
            "select A.b from S [Range 2] as A, T [Rows 3] as B where A.a = B.a",
            "select B.y from S [Range 2] as A, T [Rows 3] as B where A.a = B.a",
        ],
        {J: "b,y"},
    ),
    # DISTINCT, Istream and set operations compare whole rows: what they read is produced whole
    (["select distinct * from S [Range 2] as A, T [Rows 3] as B where A.a = B.a"], {J: "*", "DISTINCT": "*"}),
    (
        [
            "select k, count(*) from (select distinct A.a as k, A.b as v, B.x as w from S [Range 2] as A,"
            " T [Rows 3] as B where A.a = B.a) as D group by k"
        ],
        {J: "a,b,x", "PROJECT A.a AS k, A.b AS v, B.x AS w": "*", "DISTINCT": "*"},
    ),
    (["select istream(*) from S [Range 2] as A, T [Rows 3] as B where A.a = B.a"], {J: "*"}),
    (
        ["select A.a, A.b, B.x from S [Range 2] as A, T [Rows 3] as B where A.a = B.a union select * from T [Rows 1]"],
        {J: "a,b,x", "PROJECT A.a, A.b, B.x": "*"},
    ),
    # a projection's unread expression is not evaluated
    (
        ["select sum(z) from (select A.b + 1 as z, A.c * 2 as w from S [Range 2] as A) as V"],
        {"PROJECT (b + 1) AS z, (c * 2) AS w": "z"},
    ),
]


@pytest.mark.parametrize(("queries", "want"), FIXTURES, ids=[f"f{i}" for i in range(len(FIXTURES))])
def test_each_operator_produces_the_columns_its_consumers_read(queries, want):
    d = Dsms()
    d.execute(DDL)
    for q in queries:
        d.register_query(q)
    got = produced(d)
    for k, v in want.items():
        hits = [x for label, x in got.items() if label.startswith(k)]
        assert hits == [v], (k, got)
    # every query's output node is read whole
    for h in d.queries.values():
        assert h.pnode is not None and (h.pnode.op is None or h.pnode.op.produced is None)


def test_the_analysis_is_the_union_over_consumers_of_what_each_reads():
    d = Dsms()
    d.execute(DDL)
    d.register_query("select A.b from S [Range 2] as A where A.c > 1")
    reads = column_pruning.required(d.plan, d._outputs())
    by_label = {node_label(pn.node): reads[id(pn)] for pn in d.plan.nodes.values()}
    assert by_label["FILTER (c > 1)"] == {1}  # A.b, read by the projection
    assert by_label["WINDOW [RANGE 2]"] == {1, 2}  # b above, c by the selection
    assert by_label["PROJECT b"] == {0}  # the query's output: read whole


QUERIES = [fx[0][0] for fx in FIXTURES] + [
    "select A.b, B.y from S [Range 3] as A, T [Rows 2] as B, R where A.a = B.a and B.x = R.a",
    "select istream(A.b) from S [Rows 2] as A, R where A.a = R.a and A.c <> R.e",
    "select A.c from S [Range 2] as A where A.a = 1",
    "select B.x from T [Range 2] as B where B.a = 2",
]


def _inputs(seed: int) -> dict:
    base = random_join_inputs(seed, 36)
    widen = lambda evs: [(t, None if r is None else (*r, (r[0] + 2 * r[1]) % 5)) for t, r in evs]  # noqa: E731
    return {"S": widen(base["S"]), "T": widen(base["T"]), "R": base["R"]}


@pytest.mark.parametrize("query", QUERIES)
@pytest.mark.parametrize("seed", [1, 2])
def test_results_equal_the_reference_at_every_push_size(query, seed):
    assert_same(DDL, query, _inputs(seed))


def _raw(queries: list[str], inputs: dict, step: int | None, prune: bool) -> list[list[tuple]]:
    d = Dsms(prune_columns=prune)
    d.execute(DDL)
    hs = [d.register_query(q) for q in queries]
    subs = [d.subscribe(h.id) for h in hs]
    outs: list[list] = [[] for _ in hs]

    def poll(_n: int) -> None:
        for o, s in zip(outs, subs):
            o.append(s.poll())

    feed(d, _merge_events(inputs), step, after=poll)
    d.end()
    poll(-1)
    assert any(pn.op is not None and pn.op.produced is not None for pn in d.plan.nodes.values()) == prune
    return [elements_of(o) for o in outs]


@pytest.mark.parametrize("step", [1, 7, None])
def test_raw_output_is_the_same_with_pruning_and_without(step):
    """Every element, in order, of all queries registered on one engine (shared operators)."""
    inputs = _inputs(3)
    assert _raw(QUERIES, inputs, step, True) == _raw(QUERIES, inputs, step, False)


LATE_DDL = "register stream S (a int, b int, c int); register stream T (a int, x int, y int)"
EARLY = "select A.b from S [Range 100] as A, T [Range 100] as B where A.a = B.a"
READS_PRUNED = "select A.c, B.y from S [Range 100] as A, T [Range 100] as B where A.a = B.a"
READS_KEPT = "select A.b, A.b + 1 from S [Range 100] as A, T [Range 100] as B where A.a = B.a"


@pytest.mark.parametrize("step", [1, 7])
def test_a_query_registered_while_data_flows_reading_a_pruned_column_gets_its_own_copies(step):
    """The shared join produced rows without A.c and B.y: the late query reading them is planned
    with a join of its own (exact from its complete_from); one reading only produced columns
    shares the running join."""
    inputs = _inputs(4)
    inputs = {"S": inputs["S"], "T": inputs["T"]}
    events = _merge_events(inputs)
    d = Dsms()
    d.execute(LATE_DDL)
    first = d.register_query(EARLY)
    res = Results(d)
    res.watch(first.id)
    half = len(events) // 2
    feed(d, events[:half], step, after=lambda n: res.poll())
    joins = lambda: [o for o in d.plan.operators if isinstance(o, JoinOp)]  # noqa: E731
    assert [sorted(o.produced or ()) for o in joins()] == [[1]]
    kept = d.register_query(READS_KEPT)
    assert len(joins()) == 1
    wide = d.register_query(READS_PRUNED)
    assert len(joins()) == 2
    text = d.explain_plan()
    assert "not shared: an operator below produced rows without columns this query reads" in text
    assert "produces only (b) of 6 columns (column pruning)" in text
    res.watch(kept.id, snapshot=True)
    res.watch(wide.id, snapshot=True)
    feed(d, events[half:], step, after=lambda n: res.poll())
    d.end()
    res.poll()
    assert res.of(first.id) == reference(LATE_DDL, EARLY, inputs)
    for h, q in ((kept, READS_KEPT), (wide, READS_PRUNED)):
        assert_exact_from(h, res.of(h.id), reference(LATE_DDL, q, inputs))
    assert sum(sum(c.values()) for c in res.of(wide.id).values()) > 0


def test_a_query_registered_before_data_widens_the_shared_operator():
    d = Dsms()
    d.execute(LATE_DDL)
    d.register_query(EARLY)
    d.register_query(READS_PRUNED)
    joins = [o for o in d.plan.operators if isinstance(o, JoinOp)]
    assert len(joins) == 1 and sorted(joins[0].produced or ()) == [1, 2, 5]


def test_a_checkpoint_of_a_pruning_plan_continues_exactly(tmp_path):
    from tests.engine_harness import continue_from_checkpoint

    inputs = _inputs(5)
    events = _merge_events(inputs)
    d = Dsms()
    d.execute(DDL)
    h = d.register_query(FIXTURES[0][0][0])
    chunks = [events[i : i + 9] for i in range(0, len(events), 9)]
    copy, a, b = continue_from_checkpoint(d, h.id, tmp_path, lambda e, t: feed(e, chunks[t]), 4, len(chunks))
    assert a == b and len(a) > 0
    assert produced(copy) == produced(d) and produced(d)[J] == "b"


def test_placeholders_are_free_to_gather_and_refuse_writes():
    import numpy as np

    from cqlstream.cql.types import INT

    b = Batch(
        [np.arange(5), np.arange(5) * 2], [None, None], np.arange(5), np.ones(5, np.int8), np.arange(5, dtype=np.uint64)
    )
    w = blanked(b, [INT, INT], frozenset({0}))
    v, m = w.cols[1], w.nulls[1]
    assert v.strides == (0,) and m is not None and bool(m.all())
    with pytest.raises(ValueError):
        v[0] = 1
    t = w.take(np.array([4, 0, 2]))
    assert t.cols[1].strides == (0,) and t.rows() == [(4, None), (0, None), (2, None)]
    c = concat([w, t])
    assert c.cols[1].strides == (0,) and len(c) == 8 and c.rows()[5:] == t.rows()
    # a plain batch holding them (after with_columns, say) copies them like any column
    assert Batch(w.cols, w.nulls, w.ts, w.sign, w.id).take(np.array([1])).rows() == [(1, None)]
    assert placeholder(INT, 3)[0].tolist() == [0, 0, 0]


HUB = [
    "select istream(A.b) from S as A where A.a = 0",
    "select istream(A.c) from S as A where A.a = 1",
    "select istream(A.b, A.c) from S as A where A.a = 2",
]


@pytest.mark.parametrize("step", [1, 7, None])
def test_grouped_selections_fill_only_what_each_member_reads(step):
    """`column = constant` selections over one stream run as one grouped operator; each member
    copies only the columns its query reads."""
    inputs = {"S": _inputs(6)["S"]}
    got, d = run_all("register stream S (a int, b int, c int)", HUB, inputs, step)
    fills = produced(d)
    assert [fills[f"FILTER (a = {k})"] for k in range(3)] == ["b", "c", "b,c"]
    assert sum("grouped in" in pn.note for pn in d.plan.nodes.values()) == 3
    for i, q in enumerate(HUB):
        assert got[i] == reference("register stream S (a int, b int, c int)", q, inputs), q


def test_a_peek_at_a_pruned_operator_names_the_columns_nothing_reads():
    """Its rows may hold NULL placeholders in the unread columns: the peek says so, instead of
    letting them pass for NULL data; an unpruned operator's peek says nothing of the kind."""
    from cqlstream.engine.control import entity_id

    d = Dsms()
    d.execute(DDL)
    d.register_query("select A.b from S [Range 2] as A where A.c > 1")
    feed(d, [("S", (t, (t, 10 + t, t % 3))) for t in range(1, 6)])
    by_label = {node_label(pn.node): pn for pn in d.plan.nodes.values()}
    pruned = d.peek(entity_id(by_label["FILTER (c > 1)"].queue.eid), 5)
    assert pruned["what"].endswith("(column pruning: nothing reads a, c, which may show NULL)"), pruned["what"]
    rows = [t["row"] for t in pruned["tuples"]]
    assert rows and all(r[0] is None and r[1] in (12, 15) for r in rows), rows
    whole = d.peek(entity_id(by_label["PROJECT b"].queue.eid), 5)
    assert whole["what"] == "recent tuples entering the queue" and whole["tuples"]
