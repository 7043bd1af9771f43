"""The conformance corpus: hand-checked STREAM scripts in tests/conformance/NNN_name/.

Each case folder holds `script.stream` (STREAM script format, docs/formats.md), its source
`.dat` files, and `expected/<dest file name>` for every query's dest: the expected output in
STREAM's text form, worked out by hand from docs/semantics.md (tricky cases explain the timeline
in NOTES.md). A `COMPAT` file in the folder means the case runs with --stream-compat.

Expected files are written in *net* form: per instant, the multiset of `+`/`-` lines after
cancelling a `+` and a `-` of the same values, then sorted (`+` lines first, then `-`, each
group by text). Engine output is compared in that form, so transient +/- pairs are allowed.

Every expected file is checked against both implementations:
- the engine, through `io.script_runner.run_script` (what `cqlstream run` does);
- the reference evaluator (tests/reference), on both the analyzed and the optimized plan of
  every query, with the sources read by `io.dat_source.read_source`.
The engine also runs every case fed 1 and 3 source rows per scheduling round (results must not
depend on batching).
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import pytest

from cqlstream.cql import ast
from cqlstream.cql.analyzer import AnalyzeOptions
from cqlstream.cql.catalog import Catalog
from cqlstream.cql.ddl import register_source, register_view
from cqlstream.cql.frontend import compile_query
from cqlstream.cql.parser import parse_query, parse_statement
from cqlstream.io.dat_source import read_source
from cqlstream.io.script_runner import run_script
from cqlstream.io.stream_script import parse_script
from tests.reference import evaluate, format_result

CORPUS = Path(__file__).parent / "conformance"
CASES = sorted(p for p in CORPUS.iterdir() if p.is_dir() and (p / "script.stream").is_file())

_LINE = re.compile(r"^\[(-?\d+)\]:([+-]):(.*)$")


def net_lines(lines: list[str], where: str = "") -> list[str]:
    """STREAM output lines → their net form: per instant, +/- pairs of equal text cancelled,
    instants in time order, then `+` lines before `-` lines, each group sorted by text."""
    by_t: dict[int, Counter] = {}
    for line in lines:
        if not line.strip():
            continue
        m = _LINE.match(line)
        assert m, f"{where}: not a STREAM output line: {line!r}"
        t, sign, rest = int(m.group(1)), m.group(2), m.group(3)
        by_t.setdefault(t, Counter())[rest] += 1 if sign == "+" else -1
    out = []
    for t in sorted(by_t):
        group = []
        for rest, n in by_t[t].items():
            group.extend([f"[{t}]:{'+' if n > 0 else '-'}:{rest}"] * abs(n))
        out.extend(sorted(group))
    return out


def read_lines(path: Path) -> list[str]:
    return [ln for ln in path.read_text(encoding="utf-8").split("\n") if ln.strip()]


def expected_outputs(case: Path, script) -> dict[str, list[str]]:
    """{dest file name: expected lines}; the expected files must already be in net form."""
    out = {}
    for q in script.queries:
        name = Path(q.dest).name
        f = case / "expected" / name
        assert f.is_file(), f"{case.name}: no expected/{name} for the query of line {q.line}"
        lines = read_lines(f)
        assert lines == net_lines(lines, str(f)), f"{f} is not in net, sorted form"
        out[name] = lines
    extra = {p.name for p in (case / "expected").iterdir()} - set(out)
    assert not extra, f"{case.name}: expected files without a query: {sorted(extra)}"
    return out


def is_compat(case: Path) -> bool:
    return (case / "COMPAT").exists()


def test_corpus_size():
    assert len(CASES) >= 65, f"the conformance corpus has {len(CASES)} cases"


def _reference_catalog(script) -> Catalog:
    """The script's tables and views registered as the script runner registers them."""
    cat = Catalog()
    for step in script.steps:
        if step.kind == "table":
            register_source(cat, parse_statement(step.text))
        elif step.kind == "view":
            vt = parse_statement(step.ddl)
            rv = ast.RegisterView(vt.name, tuple(a.name for a in vt.attrs), parse_query(step.text), pos=vt.pos)
            register_view(cat, rv, step.text)
    return cat


def _reference_inputs(script, cat: Catalog) -> dict:
    """Each source file as the reference's events: (ts, row) / (ts, sign, row), in file order."""
    inputs = {}
    for table in script.tables:
        name = parse_statement(table.ddl).name
        d = cat.get(name)
        b = read_source(table.source, d)
        rows, ts, signs = b.rows(), b.ts.tolist(), b.sign.tolist()
        if d.kind == "stream":
            inputs[d.name] = list(zip(ts, rows))
        else:
            inputs[d.name] = list(zip(ts, signs, rows))
    return inputs


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_reference(case: Path):
    compat = is_compat(case)
    script = parse_script(case / "script.stream")
    want = expected_outputs(case, script)
    cat = _reference_catalog(script)
    inputs = _reference_inputs(script, cat)
    failures = []
    for q in script.queries:
        name = Path(q.dest).name
        compiled = compile_query(q.cql, cat, options=AnalyzeOptions(stream_compat=compat))
        for label, plan in (("analyzed", compiled.analyzed.plan), ("optimized", compiled.plan)):
            got = format_result(evaluate(plan, inputs, compat=compat, functions=cat.functions))
            if got != want[name]:
                failures.append(
                    f"--- {name} ({label} plan) {q.cql}\nexpected:\n  "
                    + "\n  ".join(want[name])
                    + "\nreference:\n  "
                    + "\n  ".join(got)
                )
    assert not failures, f"{case.name} (compat={compat})\n" + "\n".join(failures)


@pytest.mark.parametrize("rows", [None, 1, 3])
@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_engine(case: Path, rows: int | None, tmp_path):
    """Each case through `run_script`, fed `rows` source rows per scheduling round (None: the
    default), equals the expected output: results must not depend on the round size."""
    script = parse_script(case / "script.stream")
    want = expected_outputs(case, script)
    sizes = {} if rows is None else {"batch_rows": rows}
    run_script(case / "script.stream", out_dir=tmp_path, compat=is_compat(case), **sizes)
    failures = []
    for name, lines in want.items():
        got = net_lines(read_lines(tmp_path / name), name)
        if got != lines:
            failures.append(f"--- {name}\nexpected:\n  " + "\n  ".join(lines) + "\nengine:\n  " + "\n  ".join(got))
    assert not failures, f"{case.name} (compat={is_compat(case)}, {rows} rows per round)\n" + "\n".join(failures)
