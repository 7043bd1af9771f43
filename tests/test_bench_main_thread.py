"""bench/main_thread.py runs end to end at a tiny size and accounts for the main thread's time
(figures are printed, never asserted)."""

from __future__ import annotations

import json

from bench import main_thread


def test_main_thread_clocks_per_thread_count(tmp_path, capsys):
    report = tmp_path / "m.json"
    argv = ["--rows", "2000", "--only", "Q2", "--threads", "1,2", "--rounds", "1", "--json", str(report)]
    assert main_thread.main(argv) == 0
    out = capsys.readouterr().out
    assert "Q2 --threads 1:" in out and "Q2 --threads 2:" in out
    data = json.loads(report.read_text())
    one, two = data["Q2 --threads 1"], data["Q2 --threads 2"]
    for m in (one, two):
        assert 0 < m["startup"] <= m["main"]
        assert m["step:AggregateOp"] > 0 and m["step:WindowOp"] > 0
        assert m["steps"] >= m["step:AggregateOp"] + m["step:WindowOp"]
        assert m["write"] > 0  # formatting inline, or handing rounds to the writer thread
    assert one["write_after"] == one["read_after"] == 0  # no reader or writer threads at 1
    assert two["write_after"] > 0 and two["read_startup"] + two["read_after"] > 0
