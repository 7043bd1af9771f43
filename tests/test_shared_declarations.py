"""Operators declare the state they share with other operators (`Operator.shared_stores`,
`shared_operators`, engine/operators/base.py); the parallel scheduler orders the operators of its
pass graph by them (engine/parallel_pass.py), so a store left out lets two operators change it at
once. Every declaration is held here to a scan of the operator's attributes: the synopses and
operators among them (in lists, tuples, sets and dict values too) and the stores those synopses
read (`Synopsis.backing`, itself held to the synopsis's attributes), on every plan the scheduler
builds for: the conformance scripts, the paper corpus, test_parallel_scheduler's shared plan,
grouped selections, Linear Road, A-Caching joins and random differential queries. A declaration
leaving one object out fails them."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import pytest
from hypothesis import HealthCheck, given, settings

from bench.linear_road import gen
from bench.linear_road.bench import SCRIPTS
from cqlstream.cql.types import BOOL
from cqlstream.engine import parallel
from cqlstream.engine import parallel_pass as PP
from cqlstream.engine.adaptive.config import AdaptiveConfig
from cqlstream.engine.dsms import Dsms
from cqlstream.engine.operators.base import Operator
from cqlstream.engine.operators.filterhub import FilterHub, HubMember
from cqlstream.engine.operators.join import JoinOp
from cqlstream.engine.operators.window import WindowOp
from cqlstream.engine.scheduler import Parallel
from cqlstream.engine.synopses import Synopsis
from cqlstream.engine.window_store import WindowRelation
from cqlstream.io.script_runner import run_script
from tests import test_corpus, test_parallel_scheduler
from tests.engine_harness import assert_same, run_engine
from tests.test_acaching import EAGER, RANDOM_DDL, RANDOM_QUERIES, _force_any
from tests.test_adaptive_mjoin import _join
from tests.test_conformance import CASES, is_compat
from tests.test_differential import DDL as DIFF_DDL
from tests.test_differential import query, relation_events, stream_events


def _items(v: object) -> list[object]:
    if type(v) in (list, tuple, set, frozenset):
        return list(v)  # type: ignore[call-overload]
    if type(v) is dict:
        return list(v.values())  # type: ignore[attr-defined]
    return [v]


def scan(op: Operator) -> dict[int, object]:
    """What `op` holds that other operators may hold too (by id): the synopses and operators
    among its attributes and their items, and the stores those synopses read."""
    found: dict[int, object] = {}
    for v in vars(op).values():
        for x in _items(v):
            if isinstance(x, (Synopsis, Operator)) and x is not op:
                found[id(x)] = x
    for x in list(found.values()):
        if isinstance(x, Synopsis):
            found.update((id(b), b) for b in x.backing())
    return found


def _names(xs) -> list[str]:
    return sorted(type(x).__name__ for x in xs)


def check_synopsis(st: Synopsis) -> None:
    """A store's `backing` is the stores among its own attributes (a list of them, like a window
    store's views, is what reads it, not what it reads)."""
    held = [v for v in vars(st).values() if isinstance(v, Synopsis)]
    assert {id(b) for b in st.backing()} == {id(b) for b in held}, (type(st).__name__, _names(held))


def check(ops: Sequence[Operator]) -> Counter:
    """Every operator's declarations (and its members', recursively) equal `scan`; returns
    (operator class, declared class) → count, to see what the plans exercised."""
    seen: Counter = Counter()
    todo, done = list(ops), set()
    while todo:
        op = todo.pop()
        if id(op) in done:
            continue
        done.add(id(op))
        stores, others = op.shared_stores(), op.shared_operators()
        assert all(isinstance(s, Synopsis) for s in stores), (op.name, _names(stores))
        assert all(isinstance(o, Operator) for o in others), (op.name, _names(others))
        want = scan(op)
        got = {id(x) for x in [*stores, *others]}
        assert got == set(want), f"{op.name}: declares {_names([*stores, *others])}, holds {_names(want.values())}"
        for st in stores:
            check_synopsis(st)
        seen.update((type(op).__name__, type(x).__name__) for x in [*stores, *others])
        seen[(type(op).__name__, "")] += 1
        todo += others
    return seen


@contextmanager
def checking() -> Iterator[Counter]:
    """Check every plan the parallel scheduler builds a pass graph for while inside."""
    seen: Counter = Counter()
    graph = PP.graph

    def checked(operators: Sequence[Operator]) -> PP.Graph:
        seen.update(check(operators))
        seen["plans"] += 1
        g = graph(operators)
        assert not [g.ops[i].name for i, ds in enumerate(g.deps) if i in ds], "waits for itself: never ready"
        return g

    PP.graph = checked
    try:
        yield seen
    finally:
        PP.graph = graph


@pytest.fixture
def two_threads():
    before = parallel.threads()
    parallel.set_threads(2)
    yield
    parallel.set_threads(before)


def _shared_plan(seen: Counter) -> None:
    for chunk in (1, 7, None):
        test_parallel_scheduler.run_all_queries(Parallel(), chunk)
    assert seen[("WindowOp", "WindowStore")] and seen[("JoinOp", "WindowRelation")], seen
    assert seen[("JoinOp", "WindowStore")], seen  # the store behind a join's view


def test_shared_plan(two_threads):
    with checking() as seen:
        _shared_plan(seen)


def test_conformance_scripts(tmp_path):
    with checking() as seen:
        for case in CASES:
            out = tmp_path / case.name
            run_script(case / "script.stream", out_dir=out, compat=is_compat(case), batch_rows=3, engine_threads=2)
    assert seen["plans"] >= len(CASES), seen
    assert seen[("JoinOp", "RelationStore")] and seen[("WindowOp", "WindowStore")], seen


def test_paper_corpus_in_one_engine(two_threads):
    """Every query of the paper corpus registered in one engine (the most sharing)."""
    d = Dsms(scheduler=Parallel(), sys_stream=False)
    d.catalog.functions.register_scalar("lookup", lambda addr, table: True, BOOL, min_args=2, max_args=2)
    d.catalog.functions.register_scalar("match", lambda data, pattern: True, BOOL, min_args=2, max_args=2)
    d.execute(test_corpus.CORPUS.read_text().split("\n--", 1)[0])
    registered = 0
    for _, expect, text in test_corpus.BLOCKS:
        if expect is None:
            d.register_query(text.rstrip().rstrip(";"))
            registered += 1
    assert registered >= 25
    with checking() as seen:
        d.run()
    assert seen["plans"] == 1 and seen[("JoinOp", "WindowRelation")], seen


def test_grouped_selections(two_threads):
    """Selections on one column grouped into a hub (engine/operators/filterhub.py), and a member
    leaving it while data flows."""
    d = Dsms(scheduler=Parallel(), sys_stream=False)
    d.execute("register stream S (a int, b int);")
    hs = [d.register_query(f"select b from S where a = {k}") for k in range(10)]
    with checking() as seen:
        d.push("S", [(k % 12, k) for k in range(40)], ts=list(range(40)))
        d.run()
        d.deregister(hs[3].id)
        d.register_query("select b from S where a = 11")  # joins the hub while data flows
        d.push("S", [(k % 12, k) for k in range(40)], ts=list(range(40, 80)))
        d.run()
    check(d.plan.operators)
    assert seen[("FilterHub", "HubMember")] >= 9, seen


def test_linear_road(tmp_path):
    src = tmp_path / "in"
    src.mkdir()
    gen.write(gen.PRESETS["tiny"], src)
    script, _ = SCRIPTS["compat"]
    with checking() as seen:
        run_script(script, out_dir=tmp_path / "out", compat=True, source_dir=src, batch_rows=2000, engine_threads=2)
    assert seen["plans"] >= 1 and seen[("WindowOp", "WindowStore")], seen


@pytest.mark.parametrize("q", RANDOM_QUERIES)
def test_acaching_joins(q, two_threads):
    """N-ary joins with a subresult cache forced in use (engine/adaptive/caching.py)."""
    from tests.engine_harness import random_join_inputs

    with checking() as seen:
        run_engine(
            RANDOM_DDL,
            q,
            random_join_inputs(0, 60),
            chunk=7,
            prepare=lambda h: _force_any(_join(h)),
            scheduler=Parallel(),
            adaptive=AdaptiveConfig(caching=EAGER),
        )
    assert seen[("JoinOp", "")], seen


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(q=query(), s=stream_events(), t=stream_events(), r=relation_events())
def test_random_queries(q, s, t, r):
    with checking():
        assert_same(DIFF_DDL, q, {"S": s, "T": t, "R": r}, scheduler=Parallel())


# ---------------------------------------------------------------- the checks catch a broken declaration


def _drop_first(method):
    def broken(self):
        return method(self)[1:]

    return broken


BROKEN = [
    (WindowOp, "shared_stores"),
    (JoinOp, "shared_stores"),
    (FilterHub, "shared_operators"),
    (HubMember, "shared_operators"),
]


@pytest.mark.parametrize("cls,method", BROKEN, ids=[f"{c.__name__}.{m}" for c, m in BROKEN])
def test_a_declaration_leaving_one_object_out_fails(cls, method, monkeypatch):
    monkeypatch.setattr(cls, method, _drop_first(getattr(cls, method)))
    d = Dsms(scheduler=Parallel(), sys_stream=False)
    d.execute(test_parallel_scheduler.DDL)
    for q in [*test_parallel_scheduler.QUERIES, "select b from S where a = 1", "select b from S where a = 2"]:
        d.register_query(q)
    with pytest.raises(AssertionError, match="declares"):
        check(d.plan.operators)


def test_a_view_that_forgets_its_store_fails(monkeypatch):
    d = Dsms(scheduler=Parallel(), sys_stream=False)
    d.execute(test_parallel_scheduler.DDL)
    d.register_query("select * from S [Range 3] as x, T [Range 2] as y where x.a = y.a")
    check(d.plan.operators)
    monkeypatch.setattr(WindowRelation, "backing", lambda self: [])
    with pytest.raises(AssertionError, match="WindowRelation"):
        check(d.plan.operators)


# ---------------------------------------------------------------- what the declarations order


def test_a_join_reading_a_view_waits_for_every_window_of_its_store():
    """A join reads a window's relation through a view slicing the stream's window store, which
    the store's other windows append to and purge: in the pass graph the join and each of them
    are ordered (one runs after the other, transitively), never side by side."""
    d = Dsms(scheduler=Parallel(), sys_stream=False)
    d.execute(test_parallel_scheduler.DDL)
    for q in test_parallel_scheduler.QUERIES:
        d.register_query(q)
    g = PP.graph(d.plan.operators)
    before: list[set[int]] = []  # the operators that run before each, transitively
    for j in range(len(g.ops)):
        before.append(set(g.deps[j]).union(*(before[k] for k in g.deps[j])))
    pairs = 0
    for j, op in enumerate(g.ops):
        behind = {id(b) for st in op.shared_stores() for b in st.backing()}
        if not behind:
            continue
        for i, w in enumerate(g.ops):
            if i != j and {id(s) for s in w.shared_stores()} & behind:
                pairs += 1
                assert i in before[j] or j in before[i], (op.name, w.name)
    assert pairs >= 4


def test_a_self_join_over_one_window_runs_on_two_threads(two_threads):
    """Both sides of a self-join read the same window through one view: declared twice, it must
    not make the join wait for itself (the pass would never end)."""
    q = "select X.a, Y.a from S [Range 1] as X, S [Range 1] as Y where X.b = Y.b and X.a < Y.a"
    d = Dsms(scheduler=Parallel(), sys_stream=False)
    d.execute(test_parallel_scheduler.DDL)
    d.register_query(q)
    g = PP.graph(d.plan.operators)
    assert all(i not in ds for i, ds in enumerate(g.deps))
    (join,) = [op for op in g.ops if op.shared_stores()[1:]]
    assert join.shared_stores()[0] is join.shared_stores()[1]  # the one view, on both sides
    with checking():
        assert_same(test_parallel_scheduler.DDL, q, {"S": test_parallel_scheduler.INPUTS["S"]}, scheduler=Parallel())
