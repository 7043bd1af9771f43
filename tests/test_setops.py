"""CQL's set operations are bag operations: `Union`, `Except`, `Intersect` (and their `ALL`
spellings) keep multiplicities; SQL's set versions are written with `DISTINCT`.

The engine is checked against the multiplicity formulas directly (each side evaluated on its own
by the engine, combined by the formula), independently of the reference evaluator; a Union of
streams against the merged input streams; and the STREAM Linear Road idioms in both modes.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cqlstream.cql import ast
from cqlstream.cql.parser import parse_query
from cqlstream.cql.printer import to_cql
from cqlstream.io.script_runner import run_script
from tests import strategies
from tests.engine_harness import assert_same, run_engine

DDL = (
    "register stream S (a int, b int); register stream T (a int, c int); "
    "register relation R (a int, b int); register relation Q (a int, b int);"
)
SETTINGS = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])

# output multiplicity of a value from its (left, right) multiplicities
BAG = {
    "union": lambda m1, m2: m1 + m2,
    "except": lambda m1, m2: max(m1 - m2, 0),
    "intersect": lambda m1, m2: min(m1, m2),
}
DISTINCT = {
    "union": lambda m1, m2: int(m1 + m2 > 0),
    "except": lambda m1, m2: int(m1 > 0 and m2 == 0),
    "intersect": lambda m1, m2: int(m1 > 0 and m2 > 0),
}
# (spelling, formula): plain and ALL are the bag operators, DISTINCT the set ones
SPELLINGS = [(f"{op}{q}", BAG[op]) for op in BAG for q in ("", " all")]
SPELLINGS += [(f"{op} distinct", DISTINCT[op]) for op in DISTINCT]
SPELLINGS += [("minus", BAG["except"]), ("minus distinct", DISTINCT["except"])]

WINDOWS = ["[Range 2]", "[Now]", "[Rows 2]", "[Range 3 Slide 2]", "[Partition By a Rows 1]", "[Range Unbounded]"]

small = st.integers(0, 2)  # few distinct values: duplicates on both sides


@st.composite
def operand(draw, stream: str, rel: str) -> str:
    """A relation-valued operand: a windowed stream or a relation (with deletions)."""
    if draw(st.booleans()):
        return f"select a from {rel}"
    return f"select a from {stream} {draw(st.sampled_from(WINDOWS))}"


def combine(left: dict, right: dict, f) -> dict[int, Counter]:
    """Net changes per instant of f(m1, m2) over two relations given as net changes per instant."""
    now_l, now_r, out = Counter(), Counter(), {}
    before: dict = {}
    for t in sorted(set(left) | set(right)):
        now_l.update(left.get(t, {}))
        now_r.update(right.get(t, {}))
        after = {v: f(now_l[v], now_r[v]) for v in set(now_l) | set(now_r)}
        delta = Counter({v: after.get(v, 0) - before.get(v, 0) for v in set(after) | set(before)})
        delta = Counter({v: n for v, n in delta.items() if n})
        if delta:
            out[t] = delta
        before = after
    return out


@settings(max_examples=120, **SETTINGS)
@given(
    left=operand("S", "R"),
    right=operand("T", "Q"),
    spelling=st.sampled_from(SPELLINGS),
    s=strategies.stream_events(n=9, first=small),
    t=strategies.stream_events(n=9, first=small),
    r=strategies.relation_events(n=9, first=small),
    q=strategies.relation_events(n=9, first=small),
    compat=st.booleans(),
)
def test_engine_follows_the_multiplicity_formulas(left, right, spelling, s, t, r, q, compat):
    word, f = spelling
    inputs = {"S": s, "T": t, "R": r, "Q": q}
    sides = [run_engine(DDL, side, inputs, compat=compat)[0] for side in (left, right)]
    got, h = run_engine(DDL, f"{left} {word} {right}", inputs, chunk=3, compat=compat)
    assert not h.compiled.plan.is_stream
    assert got == combine(sides[0], sides[1], f), h.explain()


@settings(max_examples=60, **SETTINGS)
@given(
    left=operand("S", "R"),
    right=operand("T", "Q"),
    op=st.sampled_from(["union", "except", "intersect"]),
    s=strategies.stream_events(n=9, first=small),
    t=strategies.stream_events(n=9, first=small),
    r=strategies.relation_events(n=9, first=small),
    q=strategies.relation_events(n=9, first=small),
)
def test_plain_and_all_agree_and_match_the_reference(left, right, op, s, t, r, q):
    inputs = {"S": s, "T": t, "R": r, "Q": q}
    plain = run_engine(DDL, f"{left} {op} {right}", inputs)[0]
    assert plain == run_engine(DDL, f"{left} {op} all {right}", inputs)[0]
    for word in (op, f"{op} distinct"):
        assert_same(DDL, f"{left} {word} {right}", inputs, chunks=(1, None))


def merged(*streams) -> dict[int, Counter]:
    """The merged stream of the inputs' first columns, per instant (heartbeats dropped)."""
    out: dict[int, Counter] = {}
    for events in streams:
        for ts, row in events:
            if row is not None:
                out.setdefault(ts, Counter())[(row[0],)] += 1
    return out


@settings(max_examples=60, **SETTINGS)
@given(
    s=strategies.stream_events(n=9, first=small),
    t=strategies.stream_events(n=9, first=small),
    word=st.sampled_from(["union", "union all"]),
    named=st.booleans(),
)
def test_union_of_streams_is_the_merged_stream(s, t, word, named):
    ddl = DDL + " register view VS as select a from S; register view VT as select a from T;"
    query = f"VS {word} VT" if named else f"select a from S {word} select a from T"
    got, h = run_engine(ddl, query, {"S": s, "T": t}, chunk=2)
    assert h.compiled.plan.is_stream
    assert got == merged(s, t)
    if named:
        return  # under --stream-compat a stream view's Istream outputs nothing at the last instant
    # --stream-compat has no implicit top-level Istream: the relation grows by the same elements
    got, h = run_engine(ddl, query, {"S": s, "T": t}, chunk=2, compat=True)
    assert not h.compiled.plan.is_stream
    assert got == merged(s, t)


def test_union_distinct_of_streams_keeps_first_occurrences():
    s = [(1, (1, 0)), (1, (1, 0)), (2, (2, 0))]
    t = [(2, (1, 0)), (3, (3, 0)), (3, (3, 0))]
    got, h = run_engine(DDL, "select a from S union distinct select a from T", {"S": s, "T": t})
    assert h.compiled.plan.is_stream
    assert got == {1: Counter({(1,): 1}), 2: Counter({(2,): 1}), 3: Counter({(3,): 1})}


@pytest.mark.parametrize(
    "text,bag,printed",
    [
        ("R union Q", True, "R UNION Q"),
        ("R Union All Q", True, "R UNION Q"),
        ("R UNION DISTINCT Q", False, "R UNION DISTINCT Q"),
        ("R except Q", True, "R EXCEPT Q"),
        ("R minus all Q", True, "R EXCEPT Q"),
        ("R except distinct Q", False, "R EXCEPT DISTINCT Q"),
        ("R intersect Q", True, "R INTERSECT Q"),
        ("R intersect distinct Q", False, "R INTERSECT DISTINCT Q"),
    ],
)
def test_spellings(text, bag, printed):
    q = parse_query(text)
    assert isinstance(q, ast.SetOp) and q.all is bag
    assert to_cql(q) == printed
    assert parse_query(printed) == q


# ------------------------------------------------------------------ STREAM's Linear Road idioms

LINEAR_ROAD = """\
table : register stream MinSegStr (Mnt integer, Seg integer);
source : minseg.dat
table : register stream SegA (Mnt integer, Seg integer);
source : a.dat
table : register stream SegB (Mnt integer, Seg integer);
source : b.dat
vquery : select * from SegA [Range 1];
vtable : register relation AffSegWest (Mnt integer, Seg integer);
vquery : select * from SegB [Range 1];
vtable : register relation AffSegEast (Mnt integer, Seg integer);
vquery : AffSegWest Union AffSegEast;
vtable : register relation AffSeg (Mnt integer, Seg integer);
vquery : MinSegStr Except AffSeg;
vtable : register relation NonAffSegInt (Mnt integer, Seg integer);
vquery : SegA Union SegB;
vtable : register stream ModStr (Mnt integer, Seg integer);
query : select * from AffSeg;
dest : affseg.txt
query : select * from NonAffSegInt;
dest : nonaff.txt
query : Rstream(select * from ModStr [Now]);
dest : mod.txt
"""


@pytest.mark.parametrize("compat", [False, True])
def test_linear_road_union_except_idioms(tmp_path: Path, compat: bool):
    files = {
        "minseg.dat": "i,i,i\n1,1,1\n1,1,1\n2,1,1\n2,2,2\n4,9,9\n",
        "a.dat": "i,i,i\n1,1,1\n2,2,2\n",
        "b.dat": "i,i,i\n1,1,1\n",
        "s.stream": LINEAR_ROAD,
    }
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    run_script(tmp_path / "s.stream", out_dir=tmp_path / "out", compat=compat)

    def lines(name):
        return sorted((tmp_path / "out" / name).read_text().split("\n")[:-1])

    # AffSeg at 1 holds (1, 1) twice (bag union), so both copies of MinSegStr's (1, 1) are removed
    assert [ln for ln in lines("affseg.txt") if ln.startswith("[1]")] == ["[1]:+:1, 1", "[1]:+:1, 1"]
    assert not [ln for ln in lines("nonaff.txt") if ln.startswith("[1]")]
    # the stream union keeps both copies of (1, 1) at instant 1
    assert [ln for ln in lines("mod.txt") if ln.startswith("[1]")] == ["[1]:+:1, 1", "[1]:+:1, 1"]
