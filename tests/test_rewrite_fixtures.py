"""Each rewrite rule alone, on fixture files: tests/fixtures/rewrites/<rule>.txt, one per rule module.

A file starts with a header of `--` lines; `-- ddl: register ...` lines build the catalog. Cases
follow, separated by blank lines: `--` lines saying what the case shows, the CQL query, then a
line `=>` (the rule must change the plan) or `=> unchanged` (it must not fire), then the logical
plan as EXPLAIN prints it after applying only that rule, to a fixpoint, to the analyzed plan.

Regenerate the plans (not the `=>` markers: they state the intent) with `CQLSTREAM_UPDATE_GOLDEN=1 pytest tests/test_rewrite_fixtures.py`, then
read the diff: a fixture states the rule's correct behaviour, not whatever the code does today.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from pathlib import Path

import pytest

from cqlstream.cql import logical
from cqlstream.cql.analyzer import analyze
from cqlstream.cql.ddl import catalog_from_ddl
from cqlstream.cql.logical import rewrites
from cqlstream.cql.logical.explain import explain_plan
from cqlstream.cql.parser import parse_query

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "rewrites"
RULES_DIR = Path(logical.__file__).resolve().parent / "rewrites"
UPDATE = os.environ.get("CQLSTREAM_UPDATE_GOLDEN", "").lower() not in ("", "0", "false", "no")
MIN_CASES = 4


@dataclass(frozen=True)
class Case:
    rule: str
    number: int
    comment: tuple[str, ...]
    query: str
    changes: bool  # `=>` (True) or `=> unchanged` (False)
    plan: str

    @property
    def id(self) -> str:
        return f"{self.rule}-{self.number}"

    def text(self) -> str:
        arrow = "=>" if self.changes else "=> unchanged"
        return "\n".join([*self.comment, self.query, arrow, self.plan])


@dataclass(frozen=True)
class Fixture:
    rule: str
    header: tuple[str, ...]
    cases: tuple[Case, ...]

    @property
    def ddl(self) -> str:
        lines = [h[2:].strip() for h in self.header]
        return ";\n".join(h.partition(":")[2].strip().rstrip(";") for h in lines if h.startswith("ddl:"))

    def text(self) -> str:
        return "\n\n".join(["\n".join(self.header), *(c.text() for c in self.cases)]) + "\n"


def load(path: Path) -> Fixture:
    rule = path.stem
    header, *chunks = [c.strip("\n") for c in path.read_text(encoding="utf-8").split("\n\n") if c.strip()]
    head = tuple(header.splitlines())
    assert all(h.startswith("--") for h in head), f"{path.name}: the header holds only `--` lines"
    cases = []
    for number, chunk in enumerate(chunks, 1):
        lines = chunk.splitlines()
        comment = tuple(x for x in lines if x.startswith("--"))
        body = lines[len(comment) :]
        arrows = [i for i, x in enumerate(body) if x.startswith("=>")]
        assert len(arrows) == 1, f"{path.name} case {number}: one `=>` line between query and plan"
        (at,) = arrows
        marker = body[at][2:].strip()
        assert marker in ("", "unchanged"), f"{path.name} case {number}: `=>` or `=> unchanged`, not {body[at]!r}"
        query, plan = "\n".join(body[:at]).strip(), "\n".join(body[at + 1 :])
        assert comment and query, f"{path.name} case {number}: a `--` comment and a query"
        cases.append(Case(rule, number, comment, query, marker == "", plan))
    return Fixture(rule, head, tuple(cases))


def rule_names() -> list[str]:
    return sorted(p.stem for p in RULES_DIR.glob("*.py") if p.stem != "__init__")


FIXTURE_FILES = sorted(FIXTURES.glob("*.txt"))
CASES = [(f, c) for f in map(load, FIXTURE_FILES) for c in f.cases]


def applied(fixture: Fixture, case: Case) -> tuple[str, str]:
    """The analyzed plan's EXPLAIN text, and the text after applying only the case's rule."""
    catalog = catalog_from_ddl(fixture.ddl)
    plan = analyze(parse_query(case.query), catalog).plan
    rule = getattr(rewrites, case.rule)
    return explain_plan(plan), explain_plan(rewrites.optimize(plan, rules=(rule,)))


def test_one_fixture_file_per_rule() -> None:
    assert [p.stem for p in FIXTURE_FILES] == rule_names()
    registered = {r.__name__ for r in (*rewrites.RULES, *rewrites.COMPAT_RULES, *rewrites.FINAL_RULES)}
    assert registered == set(rule_names())


@pytest.mark.parametrize("path", FIXTURE_FILES, ids=[p.stem for p in FIXTURE_FILES])
def test_fixture_covers_firing_and_not_firing(path: Path) -> None:
    fixture = load(path)
    assert len(fixture.cases) >= MIN_CASES, f"{path.name}: at least {MIN_CASES} cases"
    assert any(c.changes for c in fixture.cases), f"{path.name}: no case where the rule fires"
    assert any(not c.changes for c in fixture.cases), f"{path.name}: no case where the rule must not fire"
    assert fixture.ddl, f"{path.name}: no `-- ddl:` line in the header"


@pytest.mark.parametrize(("fixture", "case"), CASES, ids=[c.id for _, c in CASES])
def test_rule_alone(fixture: Fixture, case: Case) -> None:
    before, after = applied(fixture, case)
    if UPDATE:
        path = FIXTURES / f"{case.rule}.txt"
        current = load(path)
        cases = tuple(replace(c, plan=after) if c.number == case.number else c for c in current.cases)
        path.write_text(replace(current, cases=cases).text(), encoding="utf-8")
        case = replace(case, plan=after)
    assert (before != after) == case.changes, f"{case.id}: rule {'did not fire' if case.changes else 'fired'}"
    assert after == case.plan
