"""The benchmarks run end to end at a tiny size (figures are printed, never asserted)."""
from __future__ import annotations

import json

from bench import operators, stream_queries


def test_operator_families_run(tmp_path, capsys):
    report = tmp_path / "ops.json"
    assert operators.main(["--rows", "3000", "--batch", "700", "--json", str(report)]) == 0
    data = json.loads(report.read_text())
    assert set(data["results"]) == {name for name, _ in operators.FAMILIES}
    assert data["results"]["select"]["output_tuples"] > 0


def test_stream_queries_run_through_the_cli(tmp_path):
    report = tmp_path / "q.json"
    assert stream_queries.main(["--rows", "2000", "--json", str(report)]) == 0
    data = json.loads(report.read_text())
    assert [data["results"][q]["output_lines"] > 0 for q in ("Q1", "Q2", "Q3", "Q4")] == [True] * 4
