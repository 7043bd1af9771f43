"""bench/approx_allocation.py runs (quick sizes) and its figures say what the docs claim."""

from __future__ import annotations

import json


def test_approx_bench_quick(tmp_path, capsys):
    from bench import approx_allocation

    out = tmp_path / "approx.json"
    assert approx_allocation.main(["--quick", "--json", str(out)]) == 0
    r = json.loads(out.read_text())
    assert all(row["allocator"] >= row["uniform"] for row in r["allocation"])
    assert any(row["allocator"] > row["uniform"] + 0.01 for row in r["allocation"])
    assert all(row["incremental"] >= row["scratch"] - 1e-9 for row in r["incremental"])
    assert all(abs(row["measured_fp"] - row["formula_fp"]) <= 0.1 * row["formula_fp"] + 0.002 for row in r["bloom"])
    exact, bloom = r["distinct"][0], r["distinct"][1]
    assert exact["missed"] == 0 and bloom["state_bytes"] < exact["state_bytes"] and bloom["missed"] >= 0
    assert "== allocation" in capsys.readouterr().out
