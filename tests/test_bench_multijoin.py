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
    # probes (scans of a window or bucket, one per partial result) do not depend on the buckets:
    # hashing shortens each scan, it does not change how many there are
    for plan in nlj:
        assert nlj[plan]["probes_per_tuple"] == model["eager hash"]["plans"][plan]["probes_per_tuple"] > 1
    # the time per tuple is split into fixed work and comparisons, and the comparison-only ratio reported
    split = model["per_comparison"]
    assert {"eager NLJ", "eager hash", "comparison_bound_ratio", "paper_ratio"} <= set(split)
    best_n, best_h = nlj[model["eager NLJ"]["best"]], model["eager hash"]["plans"][model["eager hash"]["best"]]
    assert split["comparison_ratio"] == best_n["comparisons_per_tuple"] / best_h["comparisons_per_tuple"]
