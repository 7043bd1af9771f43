"""The multi-join benchmark runs end to end at a tiny size (its figures are printed, not
asserted); what it must get right regardless of timing is checked: the engine gives the same
rows in every probe order, and the model's comparison counts follow the cost model's ranking."""

from __future__ import annotations

import json

from bench import multijoin


def test_multijoin_bench_runs(tmp_path):
    report = tmp_path / "mj.json"
    assert multijoin.main(["--tuples", "150", "--engine-units", "260", "--push", "20", "--json", str(report)]) == 0
    data = json.loads(report.read_text())
    eng = data["engine"]
    assert len(eng["plans"]) == 24 and len({r["rows"] for r in eng["plans"].values()}) == 1
    model = data["model"]
    assert model["heuristic"] == model["model_best"] == "S1,S2,S3,S4"
    nlj = model["eager NLJ"]["plans"]
    # the cost model's worst plan does several times the comparisons of its best one
    assert nlj["S4,S3,S2,S1"]["comparisons_per_tuple"] > 3 * nlj["S1,S2,S3,S4"]["comparisons_per_tuple"]
    # hash buckets cut comparisons about as the model says (5 buckets: 5×)
    hsh = model["eager hash"]["plans"]["S1,S2,S3,S4"]["comparisons_per_tuple"]
    assert 3 < nlj["S1,S2,S3,S4"]["comparisons_per_tuple"] / hsh < 7
    # every plan and algorithm produces the same join rows
    assert len({r["rows"] for r in nlj.values()}) == 1
