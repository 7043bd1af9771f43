"""Each static-approximation rule alone, on fixture files: tests/fixtures/approx/<rule>.txt, one
per rule module of cql/approx/ (window_reduction, sample_rate, sample_join).

A file starts with a header of `--` lines: `-- ddl: ...` lines build the catalog, one `-- spec:`
line gives the approved ApproxSpec as JSON. Cases follow, separated by blank lines: `--` lines
saying what the case shows, the CQL query, a line `=>` (the rule must change the plan) or
`=> unchanged`, then the optimized plan as EXPLAIN prints it after applying only that rule, and
the report's lines, each prefixed `~ `.

Regenerate the expected text (not the `=>` markers: they state the intent) with
`CQLSTREAM_UPDATE_GOLDEN=1 pytest tests/test_approx_fixtures.py`, then read the diff.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, replace
from pathlib import Path

import pytest

from cqlstream.cql import approx
from cqlstream.cql.approx import ApproxSpec, approximate
from cqlstream.cql.approx.static import RULES
from cqlstream.cql.ddl import catalog_from_ddl
from cqlstream.cql.frontend import compile_query
from cqlstream.cql.logical.explain import explain_plan

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "approx"
UPDATE = os.environ.get("CQLSTREAM_UPDATE_GOLDEN", "").lower() not in ("", "0", "false", "no")


@dataclass(frozen=True)
class Case:
    rule: str
    number: int
    comment: tuple[str, ...]
    query: str
    changes: bool
    expected: str

    def text(self) -> str:
        return "\n".join([*self.comment, self.query, "=>" if self.changes else "=> unchanged", self.expected])


@dataclass(frozen=True)
class Fixture:
    rule: str
    header: tuple[str, ...]
    cases: tuple[Case, ...]

    def field(self, name: str) -> list[str]:
        lines = [h[2:].strip() for h in self.header]
        return [h.partition(":")[2].strip() for h in lines if h.startswith(name + ":")]

    def text(self) -> str:
        return "\n\n".join(["\n".join(self.header), *(c.text() for c in self.cases)]) + "\n"


def load(path: Path) -> Fixture:
    header, *chunks = [c.strip("\n") for c in path.read_text(encoding="utf-8").split("\n\n") if c.strip()]
    cases = []
    for number, chunk in enumerate(chunks, 1):
        lines = chunk.splitlines()
        comment = tuple(x for x in lines if x.startswith("--"))
        body = lines[len(comment) :]
        (at,) = [i for i, x in enumerate(body) if x.startswith("=>")]
        marker = body[at][2:].strip()
        assert marker in ("", "unchanged"), f"{path.name} case {number}: {body[at]!r}"
        assert comment, f"{path.name} case {number}: a `--` comment says what it shows"
        cases.append(Case(path.stem, number, comment, "\n".join(body[:at]), marker == "", "\n".join(body[at + 1 :])))
    return Fixture(path.stem, tuple(header.splitlines()), tuple(cases))


FIXTURE_FILES = sorted(FIXTURES.glob("*.txt"))
CASES = [(f, c) for f in map(load, FIXTURE_FILES) for c in f.cases]


def run(fixture: Fixture, case: Case) -> tuple[str, str]:
    """The optimized plan's EXPLAIN text, and the rule's result (plan + report lines)."""
    catalog = catalog_from_ddl(";\n".join(d.rstrip(";") for d in fixture.field("ddl")))
    (spec,) = fixture.field("spec")
    plan = compile_query(case.query, catalog, final=False).plan  # approximation runs before the final rewrites

    def keys(name: str) -> tuple[tuple[str, ...], ...]:
        d = catalog.get(name)
        return getattr(d, "keys", ())

    rule = getattr(getattr(approx, case.rule), case.rule)
    new, report = approximate(plan, ApproxSpec.parse(json.loads(spec)), keys, rules=(rule,))
    lines = [f"~ {x}" for x in report.lines()]
    return explain_plan(plan), "\n".join([explain_plan(new), *lines])


def test_one_fixture_per_rule() -> None:
    assert sorted(p.stem for p in FIXTURE_FILES) == sorted(r.__name__ for r in RULES)


@pytest.mark.parametrize("path", FIXTURE_FILES, ids=[p.stem for p in FIXTURE_FILES])
def test_fixture_covers_applying_and_refusing(path: Path) -> None:
    fixture = load(path)
    assert len(fixture.cases) >= 4
    assert any(c.changes for c in fixture.cases) and any(not c.changes for c in fixture.cases)
    assert any("refused" in c.expected for c in fixture.cases), "a case shows a refusal with its reason"


@pytest.mark.parametrize(("fixture", "case"), CASES, ids=[f"{c.rule}-{c.number}" for _, c in CASES])
def test_rule_alone(fixture: Fixture, case: Case) -> None:
    before, after = run(fixture, case)
    if UPDATE:
        path = FIXTURES / f"{case.rule}.txt"
        current = load(path)
        cases = tuple(replace(c, expected=after) if c.number == case.number else c for c in current.cases)
        path.write_text(replace(current, cases=cases).text(), encoding="utf-8")
        case = replace(case, expected=after)
    changed = before != after.split("\n~ ")[0]
    assert changed == case.changes, f"{case.rule}-{case.number}: rule {'did not apply' if case.changes else 'applied'}"
    assert after == case.expected
