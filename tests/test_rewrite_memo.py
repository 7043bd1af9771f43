"""The rewrites' fixpoint remembers what a pass made of each node (cql/logical/rewrites/__init__.py).

A subtree met again — unchanged since the previous pass, or one view inlined at several places —
is not walked again. The optimized plans must be exactly those of the plain fixpoint (every node
walked in every pass), on Linear Road's queries (both scripts) and on every rewrite fixture's
query, under each rule set; and the memo must actually save rule calls there. The same holds for
a `RewriteMemo` kept between calls (a Dsms keeps one between its queries).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest

from bench.linear_road import gen
from bench.linear_road.bench import SCRIPTS
from cqlstream.cql.analyzer import AnalyzeOptions, analyze
from cqlstream.cql.ddl import catalog_from_ddl
from cqlstream.cql.logical import rewrites
from cqlstream.cql.logical.nodes import Plan, with_inputs
from cqlstream.cql.parser import parse_query
from cqlstream.engine.dsms import Dsms
from cqlstream.io.stream_script import Registrar, parse_script
from tests.test_rewrite_fixtures import CASES


def _plain_pass(node: Plan, rules: Sequence[rewrites.Rule]) -> Plan:
    kids = tuple(_plain_pass(i, rules) for i in node.inputs)
    if kids != node.inputs:
        node = with_inputs(node, kids)
    for rule in rules:
        out = rule(node)
        if out is not None:
            return out
    return node


def _plain(plan: Plan, rules: Sequence[rewrites.Rule], max_passes: int = 50) -> Plan:
    for _ in range(max_passes):
        new = _plain_pass(plan, rules)
        if new == plan:
            return new
        plan = new
    return plan


def _counting(rules: Sequence[rewrites.Rule], calls: list[int]) -> tuple[rewrites.Rule, ...]:
    def wrap(rule: rewrites.Rule) -> rewrites.Rule:
        def counted(node: Plan) -> Plan | None:
            calls.append(1)
            return rule(node)

        return counted

    return tuple(wrap(r) for r in rules)


RULE_SETS = {
    "rules": rewrites.RULES,
    "compat": rewrites.COMPAT_RULES,
    "final": rewrites.FINAL_RULES,
    "all": rewrites.RULES + rewrites.FINAL_RULES,
}


@pytest.fixture(scope="module")
def linear_road_plans(tmp_path_factory) -> list[Plan]:
    source = tmp_path_factory.mktemp("lr_memo")
    gen.write(gen.PRESETS["reference"], source)
    plans = []
    for script_path, flags in SCRIPTS.values():
        compat = "--stream-compat" in flags
        script = parse_script(script_path, compat=compat, source_dir=source)
        reg = Registrar(script, None, compat, check_only=True)
        reg.register_all()
        for step in script.steps:
            if step.kind == "query":
                q = parse_query(step.text)
                plans.append(analyze(q, reg.catalog, text=step.text, options=AnalyzeOptions(stream_compat=compat)).plan)
    assert len(plans) >= 6
    return plans


@pytest.mark.parametrize("rule_set", sorted(RULE_SETS))
def test_linear_road_plans_are_those_of_the_plain_fixpoint(linear_road_plans, rule_set):
    rules = RULE_SETS[rule_set]
    memo_calls: list[int] = []
    plain_calls: list[int] = []
    changed = 0
    for plan in linear_road_plans:
        got = rewrites.optimize(plan, _counting(rules, memo_calls))
        want = _plain(plan, _counting(rules, plain_calls))
        assert got == want
        changed += got != plan
    assert changed > 0  # the rules did rewrite these plans
    assert len(memo_calls) < len(plain_calls) / 2  # the memo saved most of the walk


def test_default_rule_sets_match_the_plain_fixpoint(linear_road_plans):
    for plan in linear_road_plans:
        for compat in (False, True):
            want = _plain(_plain(plan, rewrites.COMPAT_RULES if compat else rewrites.RULES), rewrites.FINAL_RULES)
            assert rewrites.optimize(plan, compat=compat) == want


@pytest.mark.parametrize("fixture,case", CASES, ids=[c.id for _, c in CASES])
def test_fixture_queries_match_the_plain_fixpoint(fixture, case):
    plan = analyze(parse_query(case.query), catalog_from_ddl(fixture.ddl)).plan
    for rules in RULE_SETS.values():
        assert rewrites.optimize(plan, rules) == _plain(plan, rules)
    rule = getattr(rewrites, case.rule)
    assert rewrites.optimize(plan, (rule,)) == _plain(plan, (rule,))


def test_the_fixtures_are_there():
    assert len(CASES) >= 20 and Path(rewrites.__file__).is_file()


# ---------------------------------------------------------------- a memo kept between queries


@pytest.mark.parametrize("rule_set", sorted(RULE_SETS))
def test_a_memo_kept_between_queries_gives_the_plain_plans(linear_road_plans, rule_set):
    """One RewriteMemo for all of Linear Road's queries (as a Dsms keeps one): every plan is the
    plain fixpoint's, field for field (repr: also the fields plans do not compare), and the views
    the queries share are rewritten once (fewer rule calls than with a memo per call)."""
    rules = RULE_SETS[rule_set]
    memo = rewrites.RewriteMemo()
    shared_calls: list[int] = []
    per_call: list[int] = []
    counted, counted_apart = _counting(rules, shared_calls), _counting(rules, per_call)  # the memo is by rules
    for plan in linear_road_plans:
        got = rewrites.optimize(plan, counted, memo=memo)
        assert repr(got) == repr(_plain(plan, rules))
        rewrites.optimize(plan, counted_apart)
    assert len(shared_calls) < 0.75 * len(per_call)


def test_a_memo_keeps_each_rule_sets_results_apart(linear_road_plans):
    """The same nodes under other rules: each rule set gets its own entries (a pass's result is a
    function of the node and the rules)."""
    memo = rewrites.RewriteMemo()
    for plan in linear_road_plans:
        for compat in (False, True):
            want = _plain(_plain(plan, rewrites.COMPAT_RULES if compat else rewrites.RULES), rewrites.FINAL_RULES)
            assert repr(rewrites.optimize(plan, compat=compat, memo=memo)) == repr(want)
            assert repr(rewrites.optimize(plan, compat=compat, final=False, memo=memo)) == repr(
                _plain(plan, rewrites.COMPAT_RULES if compat else rewrites.RULES)
            )


def test_a_full_memo_is_emptied_and_still_right(linear_road_plans):
    memo = rewrites.RewriteMemo(limit=50)
    for plan in linear_road_plans * 2:
        assert repr(rewrites.optimize(plan, rewrites.RULES, memo=memo)) == repr(_plain(plan, rewrites.RULES))
        biggest = max(len(memo.table(rewrites.RULES)), 0)
        assert biggest <= 50  # emptied once past its limit, before the next call adds to it


def test_a_dsms_registers_the_same_plans_with_its_memo(tmp_path):
    """Linear Road's scripts registered into a Dsms (its memo kept between the queries) and into
    one whose memo is emptied at every call: the same queries' plans and the same operators."""
    gen.write(gen.PRESETS["reference"], tmp_path)
    for script_path, flags in SCRIPTS.values():
        compat = "--stream-compat" in flags
        plans, explains = [], []
        for limit in (50_000, 0):
            d = Dsms(compat=compat, recent_tails=False)
            d._rewrites = rewrites.RewriteMemo(limit=limit)
            Registrar(parse_script(script_path, compat=compat, source_dir=tmp_path), d, compat).register_all()
            plans.append([repr(q.compiled.plan) for q in d.queries.values()])
            explains.append(d.explain_plan())
        assert plans[0] == plans[1] and explains[0] == explains[1], script_path


def test_walk_is_the_recursive_pre_order(linear_road_plans):
    """`nodes.walk` (a stack, not nested generators) yields the nodes of the recursive pre-order,
    in its order, on Linear Road's deep query plans and on their rewritten forms."""
    from cqlstream.cql.logical.nodes import walk

    def recursive(node: Plan):
        yield node
        for i in node.inputs:
            yield from recursive(i)

    for plan in linear_road_plans:
        for p in (plan, rewrites.optimize(plan)):
            got = [id(n) for n in walk(p)]
            assert got == [id(n) for n in recursive(p)] and len(got) > 10


def test_a_memo_entry_serves_only_its_own_node(linear_road_plans):
    """An entry is used for the very node it was made for: an id met again on another object (ids
    are reused once a node is gone) is not taken for it; and a copied or pickled memo starts empty."""
    import copy
    import pickle

    memo = rewrites.RewriteMemo()
    plan, other = linear_road_plans[0], linear_road_plans[1]
    memo.table(rewrites.RULES)[id(plan)] = (other, other)  # as if `plan` reused a dead node's id
    memo.note(1)
    assert repr(rewrites.optimize(plan, rewrites.RULES, memo=memo)) == repr(_plain(plan, rewrites.RULES))
    for twin in (copy.copy(memo), copy.deepcopy(memo), pickle.loads(pickle.dumps(memo))):
        assert twin.limit == memo.limit and twin.table(rewrites.RULES) == {}
