"""Golden EXPLAIN tests: each tests/golden/explain/NN_name.cql compiles to exactly NN_name.out.

A .cql file starts with `--` header lines, then the query:

    -- ddl: register stream S (A integer, B integer);    (any number: the catalog for this query)
    -- options: stream_compat                            (optional: AnalyzeOptions flags)
    -- kind: stream                                      (optional: the result kind it must have)
    -- free text describing what the case shows
    select ...

The .out file holds `CompiledQuery.explain()` (cql.frontend.compile_query) plus a final newline.
Regenerate with `CQLSTREAM_UPDATE_GOLDEN=1 pytest tests/test_explain_golden.py`, then read the
diff: a golden file is only as good as the review of its plan.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import pytest

from cqlstream.cql.analyzer import AnalyzeOptions
from cqlstream.cql.catalog import Catalog
from cqlstream.cql.ddl import catalog_from_ddl
from cqlstream.cql.frontend import compile_query

GOLDEN_DIR = Path(__file__).resolve().parent / "golden" / "explain"
UPDATE = os.environ.get("CQLSTREAM_UPDATE_GOLDEN", "").lower() not in ("", "0", "false", "no")
_OPTIONS = {"stream_compat"}


@dataclass(frozen=True)
class GoldenCase:
    path: Path
    ddl: str
    options: AnalyzeOptions
    kind: str | None
    query: str

    @property
    def out_path(self) -> Path:
        return self.path.with_suffix(".out")


def load(path: Path) -> GoldenCase:
    ddl, flags, kind = [], set(), None
    lines = path.read_text(encoding="utf-8").splitlines()
    n = 0
    while n < len(lines) and lines[n].startswith("--"):
        body = lines[n][2:].strip()
        key, _, value = body.partition(":")
        key, value = key.strip().lower(), value.strip()
        if key == "ddl":
            ddl.append(value.rstrip(";"))
        elif key == "options":
            flags |= {f.strip() for f in value.split(",") if f.strip()}
        elif key == "kind":
            kind = value
        n += 1
    unknown = flags - _OPTIONS
    assert not unknown, f"{path.name}: unknown options {sorted(unknown)}"
    assert kind in (None, "stream", "relation"), f"{path.name}: kind must be stream or relation"
    query = "\n".join(lines[n:]).strip()
    assert query, f"{path.name}: no query after the header"
    return GoldenCase(path, ";\n".join(ddl), AnalyzeOptions(**{f: True for f in flags}), kind, query)


def explain_text(case: GoldenCase) -> tuple[str, str]:
    catalog = catalog_from_ddl(case.ddl) if case.ddl else Catalog()
    compiled = compile_query(case.query, catalog, options=case.options)
    return compiled.kind, compiled.explain() + "\n"


CASES = sorted(GOLDEN_DIR.glob("*.cql"))


def test_enough_golden_cases():
    assert len(CASES) >= 30


def test_every_output_has_a_query():
    orphans = [p.name for p in GOLDEN_DIR.glob("*.out") if not p.with_suffix(".cql").exists()]
    assert not orphans


@pytest.mark.parametrize("path", CASES, ids=[p.stem for p in CASES])
def test_explain_matches_golden(path: Path):
    case = load(path)
    kind, text = explain_text(case)
    if case.kind is not None:
        assert kind == case.kind, f"{path.name}: expected a {case.kind}, got a {kind}"
    if UPDATE:
        case.out_path.write_text(text, encoding="utf-8")
        return
    assert case.out_path.exists(), f"missing {case.out_path.name}; run with CQLSTREAM_UPDATE_GOLDEN=1 and review it"
    expected = case.out_path.read_text(encoding="utf-8")
    assert text == expected
