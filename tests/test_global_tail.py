"""The global tail without Spark: a query split into per-bucket partial aggregates
(cql/logical/partial_aggregates.py) and a merge (spark_bridge/tail_merge.py), its input rows
dealt to key buckets as a distributed run deals them and fed micro-batch by micro-batch, gives the
single-node engine's answer instant by instant, in paper and compat modes; what does not merge
is refused with the reason."""

from __future__ import annotations

import random
import re
import zlib
from collections import Counter

import pyarrow as pa
import pytest

from cqlstream.cql.ddl import catalog_from_ddl
from cqlstream.cql.frontend import compile_query
from cqlstream.cql.logical.partial_aggregates import NotSplittable, split_aggregate
from cqlstream.engine.dsms import Dsms
from cqlstream.spark_bridge.keyed_engine import GroupEngine, QuerySpec
from cqlstream.spark_bridge.tail_merge import TailMerge, TailState, partials_table, tail_spec
from tests.engine_harness import net_by_instant

DDL = "register stream S (k int, v int); register stream T (k int, u int);"
GLOBAL = "select count(*), sum(v), avg(v), min(v), max(v) from S [Range 6]"
GROUPED_OVER_JOIN = "select S.v, count(*), sum(T.u) from S [Range 5], T [Range 4] where S.k = T.k group by S.v"
ISTREAM_HAVING = "Istream(select v, count(*) from S [Range 8] group by v having count(*) > 1)"
EXPRESSIONS = "select max(v) - min(v), count(v) * 2 from S [Range 4 Slide 2] where k > 1"
COMPUTED_KEY = "select v % 3, count(*), avg(k) from S [Range 5] group by v % 3"


def stream(seed: int, n: int, keys: int = 5) -> list[tuple[int, tuple[int, int]]]:
    rnd = random.Random(seed)
    t, out = 0, []
    for _ in range(n):
        t += rnd.choice([0, 0, 1, 1, 2, 12])  # gaps longer than the windows empty them
        out.append((t, (rnd.randint(1, keys), rnd.choice([None, *range(1, 6)]) if seed % 2 else rnd.randint(1, 6))))
    return out


def single_node(query: str, inputs: dict[str, list], *, compat: bool = False, ddl: str = DDL) -> dict[int, Counter]:
    """The answer of one engine fed every row, marked complete after the last instant."""
    d = Dsms(compat=compat, sys_stream=False)
    d.execute(ddl)
    sub = d.subscribe(d.register_query(query).id)
    for name, evs in inputs.items():
        d.push(name, [e[1] for e in evs], ts=[e[0] for e in evs])
    last = max(e[0] for evs in inputs.values() for e in evs)
    for name in inputs:
        d.heartbeat(name, last + 1)
    d.run()
    return net_by_instant(sub.poll())


def distributed(query: str, inputs: dict[str, list], buckets: int, *, compat: bool = False, batches: int = 4):
    """The two stages as a distributed run performs them: rows by hash of their k into buckets,
    per micro-batch each bucket's final partial changes below the mark, merged by one tail engine
    that is pickled between batches."""
    catalog = catalog_from_ddl(DDL)
    names = tuple(a.name for a in compile_query(query, catalog).schema)
    split = split_aggregate(query, catalog, names, compat=compat)
    spec = QuerySpec(DDL, split.prefix, tuple(inputs), compat)
    engines = [GroupEngine(spec) for _ in range(buckets)]
    partial_names = [c.split()[0] for c in split.partials_ddl[split.partials_ddl.index("(") + 1 : -1].split(", ")]
    tail = tail_spec(split.partials_ddl, split.tail, compat)
    state: bytes | None = None
    last = max(e[0] for evs in inputs.values() for e in evs)
    results = []
    for b in range(batches + 1):
        for name, evs in inputs.items():
            part = evs[len(evs) * b // batches : len(evs) * (b + 1) // batches] if b < batches else []
            for i, eng in enumerate(engines):
                mine = [e for e in part if zlib.crc32(str(e[1][0]).encode()) % buckets == i]
                if mine:
                    field = "v" if name == "S" else "u"
                    eng.push(
                        name,
                        pa.table(
                            {"ts": [e[0] for e in mine], "k": [e[1][0] for e in mine], field: [e[1][1] for e in mine]}
                        ),
                    )
        # the watermark: every instant before the batches read so far is final (the last: all)
        seen = [e[0] for evs in inputs.values() for e in evs[: len(evs) * (b + 1) // batches]]
        mark = last + 1 if b == batches else min(seen, default=0)
        for eng in engines:
            eng.advance(mark)
        changes = [partials_table(eng.final_before(mark), partial_names) for eng in engines]
        merge = TailMerge(tail, GroupEngine.loads(state)) if state else TailMerge(tail)
        results.append(merge.merge(pa.concat_tables(changes)))
        state = merge.engine.dumps()
    out: dict[int, Counter] = {}
    for r in results:
        for t, c in net_by_instant(r).items():
            out.setdefault(t, Counter()).update(c)
    nonzero = {t: Counter({row: n for row, n in c.items() if n}) for t, c in out.items()}
    return {t: c for t, c in nonzero.items() if c}


@pytest.mark.parametrize("compat", [False, True])
@pytest.mark.parametrize("query", [GLOBAL, GROUPED_OVER_JOIN, ISTREAM_HAVING, EXPRESSIONS, COMPUTED_KEY])
@pytest.mark.parametrize("buckets", [1, 3])
def test_partials_and_merge_give_the_single_node_answer(query, compat, buckets):
    inputs = {"S": stream(1 + buckets, 120), "T": stream(2, 90)}
    if "T" not in query:
        inputs = {"S": inputs["S"]}
    expected = single_node(query, inputs, compat=compat)
    assert len(expected) > 20
    assert distributed(query, inputs, buckets, compat=compat) == expected


def test_nulls_avg_and_empty_windows_merge_exactly():
    inputs = {"S": stream(3, 150)}  # odd seed: v is null now and then
    assert any(e[1][1] is None for e in inputs["S"])
    expected = single_node(GLOBAL, inputs)
    assert any(row[0] == 0 for c in expected.values() for row in c)  # windows that emptied
    assert distributed(GLOBAL, inputs, 4, batches=6) == expected


@pytest.mark.parametrize(
    "query,reason",
    [
        ("select count(distinct v) from S [Range 3]", "count(DISTINCT v) is not mergeable from partials"),
        ("select k from S [Range 3]", "no aggregate at its top"),
        ("select v from S [Range 3] group by k", "column v is neither a group-by key nor inside an aggregate"),
        ("select * from (select count(*) as c from S [Range 3]) as x where c > 1", "no aggregate at its top"),
        ("select count(*) from S [Range 3] union select count(*) from T [Range 3]", "only an aggregate at the top"),
    ],
)
def test_what_does_not_merge_from_partials_is_refused_with_the_reason(query, reason):
    catalog = catalog_from_ddl(DDL)
    with pytest.raises(NotSplittable, match=re.escape(reason)):
        split_aggregate(query, catalog, ("a",))


def test_the_state_files_restart_a_replayed_batch_from_the_state_before_it(tmp_path):
    catalog = catalog_from_ddl(DDL)
    split = split_aggregate("select count(*) from S [Range 3]", catalog, ("count",))
    spec = tail_spec(split.partials_ddl, split.tail, False)
    st = TailState(tmp_path)
    one = pa.table({"ts": [1], "sign": [1], "p0": [1]})
    m = st.load(0, spec)
    assert len(m.merge(one)) == 1
    st.save(0, m)
    two = pa.table({"ts": [2, 2], "sign": [-1, 1], "p0": [1, 2]})
    m = st.load(1, spec)
    first = m.merge(two)
    st.save(1, m)
    again = st.load(1, spec).merge(two)  # batch 1 replayed: from batch 0's state, the same answer
    assert first.rows() == again.rows() == [(1,), (2,)] and first.sign.tolist() == [-1, 1]
    st.save(2, st.load(2, spec))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["000000000001.engine", "000000000002.engine"]
