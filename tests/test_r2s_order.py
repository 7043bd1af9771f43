"""Istream/Dstream/Rstream write an instant's rows in one order whatever the cuts
(cql/logical/instant_order.py, docs/semantics.md "Stream output order"): in arrival order over a
window or a stored relation, by value over anything else (aggregates, joins, DISTINCT, set ops).

- the exact output sequence (ts, sign, row) is the same at 1, 7 and all events per push with a
  scheduler run after each, one event per push with a run every 3 events, all events then one
  run (every instant in one round), and under other schedulers (a chain budget, the parallel
  pass);
- the same sequence as the reference evaluator's, which applies the rule by definition;
- `arrival_ordered` on plan shapes, and the ordering keys on NULLs, NaN and text.
"""

from __future__ import annotations

import math
import random

import numpy as np
import pytest

from cqlstream.cql.analyzer import AnalyzeOptions
from cqlstream.cql.catalog import Catalog
from cqlstream.cql.ddl import execute_ddl
from cqlstream.cql.frontend import compile_query
from cqlstream.cql.logical import instant_order
from cqlstream.cql.logical import nodes as L
from cqlstream.engine.dsms import Dsms
from cqlstream.engine.operators.r2s import RelToStreamOp
from cqlstream.engine.scheduler import SCHEDULERS
from tests.engine_harness import _merge_events, elements_of
from tests.reference.evaluator import _Reference, value_order_key

DDL = (
    "register stream S (a int, b int); register stream T (a int, b int); "
    "register stream U (k varchar(3), x float); register relation R (a int, b int);"
)

# (query, whether it is emitted by value)
QUERIES = [
    # aggregates: the order session 18 found cut-dependent
    ("Istream(select b, count(*), sum(a) from S [Range 3] group by b)", True),
    ("Dstream(select b, count(*) from S [Range 3] group by b)", True),
    ("Rstream(select b, count(*), max(a) from S [Range 2] group by b)", True),
    ("Istream(select a, count(*) from R group by a)", True),
    ("Rstream(select a, min(b) from R group by a)", True),
    ("Istream(select k, count(*) from U [Range 2] group by k)", True),
    ("Dstream(select count(*) from S [Rows 4])", True),
    # joins
    ("Istream(select X.a, Y.b from S [Range 2] as X, T [Rows 3] as Y where X.b = Y.b)", True),
    ("Dstream(select X.a, Y.a from S [Range 2] as X, T [Range 3] as Y where X.b = Y.b)", True),
    ("Rstream(select R.a, S.b from R, S [Rows 2] where R.b = S.b)", True),
    # DISTINCT
    ("Istream(select distinct a from S [Range 3])", True),
    ("Dstream(select distinct b from T [Rows 4])", True),
    ("Rstream(select distinct a, b from R)", True),
    # set operations
    ("Istream(select a from S [Range 2] union all select b from T [Rows 3])", True),
    ("Dstream(select a from S [Range 2] union select b from T [Rows 3])", True),
    ("Istream(select a from S [Range 3] except all select a from T [Range 1])", True),
    ("Rstream(select b from S [Rows 3] intersect select b from T [Range 2])", True),
    # arrival order: Range/Rows windows, stored relations, row-wise over them
    ("Istream(select a, b from S [Range 3])", False),
    ("Dstream(select a from S [Rows 3] where b > 0)", False),
    ("Rstream(select a + b from S [Range 1])", False),
    # Partition windows (their evictions come partition by partition: by value)
    ("Istream(select a, b from S [Partition By a Rows 1])", True),
    ("Dstream(select a, b from S [Partition By b Rows 2])", True),
    ("Rstream(select * from S [Partition By a Rows 1])", True),
    ("Istream(select * from R)", False),
    ("Dstream(select a from R)", False),
    ("Rstream(select * from R where a > 0)", False),
    ("Istream(select k, x from U [Now])", False),
]


# Rstream over a [Now] join with an arrival-ordered relation keeps the join's order, which the
# stream-join rewrite gives (not the reference's nested loops: compared with itself over the cuts
# only); with any other relation (its rows' order follows the rounds) it is by value, which the
# stream join gives by sorting on the plan's output columns (StreamJoin.order)
NOW_JOINS = [
    ("Rstream(select S.a, T.b from S [Now], T [Range 3] where S.b = T.b)", False),
    ("Rstream(select S.a, R.b from S [Now], R where S.b = R.b)", False),
    ("Rstream(select S.a, T.a from S [Now], T [Rows 3] where S.b < T.b)", False),
    # the reproduction of session 19 (cut-dependent on main at b480e3e)
    (
        "Rstream(select S.a, A.c from S [Now], (select b, count(*) as c from T [Range 3] group by b) as A where S.b = A.b)",
        True,
    ),
    ("Rstream(select A.b, S.a from (select distinct b from T [Rows 3]) as A, S [Now] where S.b = A.b)", True),
    (
        "Rstream(select S.a, J.a, J.b from S [Now], (select T.a, R.b from T [Range 2], R where T.b = R.a) as J where S.b = J.b)",
        True,
    ),
    (
        "Rstream(select S.a + A.c, A.b from S [Now], (select b, sum(a) as c from T [Range 2] group by b) as A where S.b <= A.b)",
        True,
    ),
    ("Rstream(select S.a, A.n from S [Now], (select a, count(*) as n from R group by a) as A where S.b = A.a)", True),
    ("Rstream(select * from S [Now], (select a from T [Range 2] union select b from R) as V where S.a = V.a)", True),
    (
        "Rstream(select A.c from S [Now], (select b, max(a) as c from T [Range 3] group by b) as A where S.b = A.b and S.a > 1)",
        True,
    ),
    ("Istream(select S.a, T.b from S [Now], T [Range 3] where S.b = T.b)", True),
]


def _inputs(seed: int) -> dict[str, list]:
    """Several elements per instant, repeated values, deletes in R, NULLs/NaN and text in U."""
    rng = random.Random(seed)
    s = [(t, (rng.randint(0, 5), rng.randint(0, 3))) for t in range(9) for _ in range(rng.randint(0, 5))]
    tt = [(t, (rng.randint(0, 5), rng.randint(0, 3))) for t in range(9) for _ in range(rng.randint(0, 3))]
    vals = [None, "", "a", "ab", "b", "é", "B"]
    floats = [None, 0.5, -1.0, 2.0, math.nan]
    u = [(t, (rng.choice(vals), rng.choice(floats))) for t in range(9) for _ in range(rng.randint(0, 4))]
    r: list[tuple] = []
    live: list[tuple] = []
    for t in range(9):
        for _ in range(rng.randint(0, 4)):
            if live and rng.random() < 0.4:
                r.append((t, -1, live.pop(rng.randrange(len(live)))))
            else:
                x = (rng.randint(0, 3), rng.randint(0, 2))
                live.append(x)
                r.append((t, 1, x))
    return {"S": s, "T": tt, "U": u, "R": r}


def _row_key(row: tuple) -> tuple:
    """A row comparable by equality with NaN equal to NaN (tuple equality is identity-based)."""
    return tuple("NaN" if isinstance(v, float) and math.isnan(v) else v for v in row)


def _seq(elements) -> list[tuple]:
    return [(ts, sign, _row_key(row)) for ts, sign, row in elements]


def run_cut(
    query: str, inputs: dict, push: int | None, run_every: int = 1, scheduler=None, compat: bool = False
) -> list[tuple]:
    """The exact output sequence, `push` consecutive events of a source per push (None: all), a
    scheduler run after every `run_every` pushes."""
    d = Dsms(scheduler=scheduler, sys_stream=False, compat=compat)
    d.execute(DDL)
    h = d.register_query(query)
    sub = d.subscribe(h.id)
    events = _merge_events(inputs)
    pushes: list[tuple[str, list]] = []
    for name, ev in events:
        if pushes and pushes[-1][0] == name and (push is None or len(pushes[-1][1]) < push):
            pushes[-1][1].append(ev)
        else:
            pushes.append((name, [ev]))
    out = []
    for i, (name, evs) in enumerate(pushes):
        if len(evs[0]) == 3:
            d.push(name, [e[2] for e in evs], ts=[e[0] for e in evs], signs=[e[1] for e in evs])
        else:
            d.push(name, [e[1] for e in evs], ts=[e[0] for e in evs])
        if (i + 1) % run_every == 0:
            d.run()
            out.append(sub.poll())
    d.end()
    out.append(sub.poll())
    return _seq(elements_of(out))


ALL = 1 << 30  # one scheduler run, at the end: every instant in one round
CUTS = [
    (None, ALL, None),
    (1, 1, None),
    (7, 1, None),
    (None, 1, None),
    (1, 3, None),
    (1, 1, ("chain", 2)),
    (2, 1, ("parallel", 1)),
    (None, ALL, ("parallel", 2)),
]


def _cuts(query: str, inputs: dict) -> dict:
    got = {}
    for push, every, sched in CUTS:
        s = None if sched is None else SCHEDULERS[sched[0]](sched[1])
        got[(push, every, sched)] = run_cut(query, inputs, push, every, s)
    return got


@pytest.mark.parametrize("query", [q for q, _ in QUERIES + NOW_JOINS])
def test_the_same_sequence_whatever_the_cuts(query):
    for seed in range(6):
        inputs = _inputs(seed)
        got = _cuts(query, inputs)
        base = got[(None, ALL, None)]
        for cut, seq in got.items():
            assert seq == base, f"seed={seed} cut={cut}"


def reference_sequence(query: str, inputs: dict, compat: bool = False) -> list[tuple]:
    """The reference's stream of `query` as (ts, 1, row) in its order."""
    cat = Catalog()
    execute_ddl(cat, DDL)
    plan = compile_query(query, cat, options=AnalyzeOptions(stream_compat=compat)).analyzed.plan
    ref = _Reference(plan, inputs, compat, None, None)
    if ref.t0 is None or ref.L is None:
        return []
    return [(ts, 1, _row_key(row)) for ts, row in ref.stream(plan) if ref.t0 <= ts <= ref.L]


@pytest.mark.parametrize("query", [q for q, v in QUERIES + NOW_JOINS if v or "[Now]," not in q])
def test_the_reference_sequence(query):
    for seed in range(6):
        inputs = _inputs(seed)
        want = reference_sequence(query, inputs)
        for push, every in ((1, 1), (7, 1), (None, ALL)):
            assert run_cut(query, inputs, push, every) == want, f"seed={seed} push={push}"


@pytest.mark.parametrize(
    "query", ["Istream(select b, count(*) from S [Range 3] group by b)", "Istream(select a, b from S [Range 3])"]
)
def test_compat_last_instant(query):
    """STREAM 0.6 compat: nothing at the last instant, the rest in the same order."""
    for seed in range(4):
        inputs = {"S": _inputs(seed)["S"]}
        want = reference_sequence(query, inputs, compat=True)
        for push, every in ((1, 1), (7, 1), (None, ALL)):
            assert run_cut(query, inputs, push, every, compat=True) == want, f"seed={seed} push={push}"


def _plan(query: str) -> L.Plan:
    cat = Catalog()
    execute_ddl(cat, DDL)
    return compile_query(query, cat).analyzed.plan


@pytest.mark.parametrize(("query", "value"), QUERIES + NOW_JOINS)
def test_the_rule(query, value):
    plan = _plan(query)
    assert isinstance(plan, L.RelToStream)
    assert instant_order.by_value(plan) is value
    assert instant_order.arrival_ordered(plan.input) is (value is False and "[Now]," not in query)


def test_the_operator_takes_the_rule(monkeypatch):
    """The built operator's flag is the rule's (the tests above would pass on a plan the rule
    does not see otherwise)."""
    ops: list[RelToStreamOp] = []
    real = RelToStreamOp.from_node.__func__  # type: ignore[attr-defined]

    def spy(cls, node, ctx):
        op = real(cls, node, ctx)
        ops.append(op)
        return op

    monkeypatch.setattr(RelToStreamOp, "from_node", classmethod(spy))
    for query, value in QUERIES + NOW_JOINS[-1:]:  # (an Rstream over [Now] ⋈ is a stream join)
        ops.clear()
        d = Dsms(sys_stream=False)
        d.execute(DDL)
        d.register_query(query)
        assert [op.by_value for op in ops] == [value], query


def test_value_order_key():
    rows = [(1, "b"), (None, "a"), (0, None), (0, "a"), (1, "B"), (0, "é")]
    assert sorted(rows, key=value_order_key) == [(None, "a"), (0, None), (0, "a"), (0, "é"), (1, "B"), (1, "b")]
    floats = [(2.0,), (math.nan,), (None,), (-1.0,)]
    got = sorted(floats, key=value_order_key)
    assert got[0] == (None,) and got[1:3] == [(-1.0,), (2.0,)] and math.isnan(got[3][0])


@pytest.mark.parametrize("final", [False, True])
def test_by_value_rows_are_sorted_within_each_instant(final):
    """Directly on the operator: an aggregate-like batch (deletes and inserts of several groups
    per instant, out of value order) comes out by (instant, value), whatever its row order, the
    rows those of the per-row model (tests/test_istream_singles.py); `final`: compat's last call,
    nothing at the bound's instant."""
    from cqlstream.engine.batch import Batch
    from cqlstream.engine.operators.base import IdSource
    from tests.test_istream_singles import _model

    rng = np.random.default_rng(3)
    n = 200
    ts = np.sort(rng.integers(0, 5, n))
    a = rng.integers(0, 6, n)
    sign = rng.choice(np.array([1, -1], np.int8), n)
    bound = 4
    for kind in ("istream", "dstream"):
        outs = []
        for perm_seed in (0, 1):
            p = np.random.default_rng(perm_seed).permutation(n)
            p = p[np.argsort(ts[p], kind="stable")]  # rows shuffled within each instant
            op = object.__new__(RelToStreamOp)
            op.op, op.compat, op.ids, op.by_value = kind, final, IdSource(), True
            op._final = lambda bound: final  # type: ignore[method-assign]
            b = Batch([a[p].astype(np.int64)], [None], ts[p].astype(np.int64), sign[p], np.arange(n, dtype=np.uint64))
            out = op.process([b], bound)
            pairs = list(zip(out.ts.tolist(), out.cols[0].tolist()))
            rows = [(int(x),) for x in a[p]]
            want = _model(kind, rows, ts[p].tolist(), sign[p].tolist(), bound, final)
            assert pairs == sorted((int(ts[p][i]), rows[i][0]) for i in want)
            outs.append(pairs)
        assert outs[0] == outs[1]
        assert not final or all(t < bound for t, _ in outs[0])


def _published(query: str, inputs: dict, push: int | None) -> tuple[list[tuple], list[tuple]]:
    """The server's streaming path (server/publication.py): what a query's publication offers to
    its subscribers, chunk by chunk after each engine run, and what a subscriber resuming from
    the start gets from its history."""
    from cqlstream.server.publication import Fanout

    d = Dsms(sys_stream=False)
    d.execute(DDL)
    h = d.register_query(query)
    fan = Fanout(d, lag_grace=1.0)
    pub = fan.add(h)
    chunks: list[tuple] = []
    real_add = pub.history.add

    def add(b, through):
        chunks.extend(_seq(b.elements()))
        real_add(b, through)

    pub.history.add = add  # type: ignore[method-assign]
    for name, ev in _merge_events(inputs):  # (one source here: consecutive events, `push` a push)
        d.push(name, [ev[1]], ts=[ev[0]])
        if push is not None:
            d.run()
            fan.publish()
    d.end()
    fan.publish()
    return chunks, _seq(fan.resume(pub, -(1 << 62)).elements())


@pytest.mark.parametrize(
    "query",
    [
        "Istream(select b, count(*), sum(a) from S [Range 3] group by b)",
        "Rstream(select b, count(*) from S [Range 2] group by b)",
        "Dstream(select distinct a from S [Rows 3])",
    ],
)
def test_the_server_publishes_one_order(query):
    for seed in range(4):
        inputs = {"S": _inputs(seed)["S"]}
        want = reference_sequence(query, inputs)
        for push in (1, None):
            chunks, resumed = _published(query, inputs, push)
            assert chunks == want and resumed == want, f"seed={seed} push={push}"


VALUE_NOW_JOINS = [q for q, v in NOW_JOINS if v and q.startswith("Rstream")]


@pytest.mark.parametrize("query", VALUE_NOW_JOINS)
def test_unfused_now_join_gives_the_same_sequence(query, monkeypatch):
    """Without the stream-join rewrite, Rstream over the general join sorts by value what the
    stream join sorts by `StreamJoin.order`: the same sequence as the reference's and the fused
    plan's, at every cut (the order is the plan's, not the rewrite's)."""
    from cqlstream.cql.logical import rewrites
    from cqlstream.cql.logical.rewrites.stream_join import stream_join

    for seed in range(4):
        inputs = _inputs(seed)
        fused = run_cut(query, inputs, None, ALL)
        with monkeypatch.context() as m:
            m.setattr(rewrites, "FINAL_RULES", tuple(x for x in rewrites.FINAL_RULES if x is not stream_join))
            for push, every in ((1, 1), (7, 1), (None, 1), (None, ALL)):
                assert run_cut(query, inputs, push, every) == fused, f"seed={seed} push={push} every={every}"
        assert fused == reference_sequence(query, inputs), f"seed={seed}"


@pytest.mark.parametrize(("query", "value"), [(q, v) for q, v in NOW_JOINS if q.startswith("Rstream")])
def test_the_stream_join_carries_the_order(query, value):
    """The rewrite sets `StreamJoin.order` exactly when the rule says by value: the plan's output
    columns (through the projections above the node) over the join's columns."""
    from cqlstream.cql.logical.rewrites.stream_join import stream_join

    plan = _plan(query)
    assert isinstance(plan, L.RelToStream)
    out = stream_join(plan)
    while isinstance(out, (L.Filter, L.Project)):
        out = out.input
    assert isinstance(out, L.StreamJoin)
    assert (out.order is not None) is value is instant_order.by_value(plan)
    if out.order is not None:
        assert len(out.order) == len(plan.schema)
        assert [e.type for e in out.order] == [a.type for a in plan.schema]
