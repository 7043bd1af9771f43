"""bench/summaries.py runs end to end at its quick size (figures are printed, never asserted)."""

from __future__ import annotations

from bench import summaries


def test_summaries_bench_runs(capsys):
    assert summaries.main(["--quick"]) == 0
    out = capsys.readouterr().out
    for section in ("1. set operations", "2. window join", "3. quantiles"):
        assert section in out
    assert out.count("\n| ") >= 3 + 5 + 4 + 5  # a header and every row of each table
