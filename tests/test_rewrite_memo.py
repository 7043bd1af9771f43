"""The rewrites' fixpoint remembers what a pass made of each node (cql/logical/rewrites/__init__.py).

A subtree met again — unchanged since the previous pass, or one view inlined at several places —
is not walked again. The optimized plans must be exactly those of the plain fixpoint (every node
walked in every pass), on Linear Road's queries (both scripts) and on every rewrite fixture's
query, under each rule set; and the memo must actually save rule calls there.
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
