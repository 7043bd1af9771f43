"""Static relations as inputs of a distributed run, without Spark: the partitioning analysis keys
the streams only and copies a static relation to every partition where a join combines it with
them (spark_bridge/scale_out.py `plan_query`), a relation that takes updates or is read alone is
refused with the reason, and key buckets that each start with the whole relation give the
single-node engine's answer instant by instant."""

from __future__ import annotations

import random
import zlib
from collections import Counter

import pyarrow as pa
import pytest

from cqlstream.engine.dsms import Dsms
from cqlstream.spark_bridge.errors import SparkSourceError
from cqlstream.spark_bridge.keyed_engine import GroupEngine
from cqlstream.spark_bridge.scale_out import plan_query
from tests.engine_harness import net_by_instant

DDL = "register stream S (k int, v int); register static relation R (k int, w int); register relation U (k int, w int);"
JOIN = "select S.k, S.v, R.w from S [Range 5], R where S.k = R.k and S.v > R.w"
THETA = "select S.k, R.w from S [Now], R where S.v < R.w"
R_ROWS = [(k, w) for k in range(1, 6) for w in (2, 5) if (k + w) % 3]


def test_the_analysis_keys_the_streams_and_broadcasts_the_static_relation():
    plan = plan_query(DDL, JOIN)
    # the window's tuples each live on their own and R is in every partition: any key of S will do
    assert plan.partitioning.describe() == "on any key (R broadcast to every partition)"
    assert plan.spec.streams == ("S",) and plan.keys == (("k", "v"),) and plan.spec.relation_names == ("R",)
    grouped = plan_query(DDL, "select S.k, sum(R.w) from S [Range 5], R where S.k = R.k group by S.k")
    assert grouped.partitioning.describe() == "by S.k (R broadcast to every partition)"
    theta = plan_query(DDL, THETA)  # no equi-join key: still any key of S
    assert theta.partitioning.describe() == "on any key (R broadcast to every partition)"


@pytest.mark.parametrize(
    "query,reason",
    [
        ("select S.k from S [Now], U where S.k = U.k", "relation 'U' takes updates"),
        ("select count(*) from R", "AGGREGATE: count\\(\\*\\) reads a broadcast relation: only a join may combine"),
        ("select k from R where w > 1", "reads broadcast relations only"),
        ("select k, w from R where k in (select k from S [Range 3])", "a semijoin of a broadcast relation by a stream"),
    ],
)
def test_what_cannot_be_broadcast_is_refused_with_the_reason(query, reason):
    with pytest.raises(SparkSourceError, match=reason) as e:
        plan_query(DDL, query)
    assert e.value.code == "not_partitionable"


@pytest.mark.parametrize("query", [JOIN, THETA])
def test_buckets_each_with_the_whole_relation_give_the_single_node_answer(query):
    rnd = random.Random(5)
    rows = [(t // 3, (rnd.randint(1, 6), rnd.randint(0, 7))) for t in range(150)]
    plan = plan_query(DDL, query)
    spec = plan.spec.__class__(
        **{**plan.spec.__dict__, "relations": (pa.table({"k": [r[0] for r in R_ROWS], "w": [r[1] for r in R_ROWS]}),)}
    )
    buckets = [GroupEngine(spec) for _ in range(3)]
    got: dict[int, Counter] = {}
    for b, eng in enumerate(buckets):
        mine = [r for r in rows if zlib.crc32(repr(r[1] if query == THETA else r[1][0]).encode()) % 3 == b]
        eng.push(
            "S", pa.table({"ts": [r[0] for r in mine], "k": [r[1][0] for r in mine], "v": [r[1][1] for r in mine]})
        )
        eng.advance(rows[-1][0] + 1)
        for t, c in net_by_instant(eng.drain()).items():
            got.setdefault(t, Counter()).update(c)
    d = Dsms(sys_stream=False)
    d.execute(DDL)
    d.push("R", R_ROWS, ts=[0] * len(R_ROWS))
    sub = d.subscribe(d.register_query(query).id)
    d.push("S", [r[1] for r in rows], ts=[r[0] for r in rows])
    d.heartbeat("S", rows[-1][0] + 1)
    d.heartbeat("R", rows[-1][0] + 1)
    d.run()
    expected = net_by_instant(sub.poll())
    assert len(expected) > 10
    assert {t: c for t, c in ((t, Counter({k: v for k, v in c.items() if v})) for t, c in got.items()) if c} == expected
