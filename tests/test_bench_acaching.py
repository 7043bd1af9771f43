"""The A-Caching benchmark runs end to end at a tiny size (its figures are printed, not
asserted); checked: every plan gives the same join rows (the bench asserts it too), every
figure has its points (the trees of joins too), and X (the fixed full cache set) is infeasible below the memory its
subresults were measured to need and feasible above."""

from __future__ import annotations

import json

from bench import acaching


def test_acaching_bench_runs(tmp_path, capsys):
    report = tmp_path / "ac.json"
    assert (
        acaching.main(
            [
                "--repeat",
                "1",
                "--tuples",
                "240",
                "--push",
                "30",
                "--base",
                "6",
                "--pushes",
                "5",
                "40",
                "--d-pushes",
                "60",
                "--json",
                str(report),
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    for fig in (
        "Fig 5.21",
        "Costly probes",
        "Fig 5.21 against the push size",
        "Fig 5.22",
        "Fig 5.23",
        "Shared caches",
        "Globally consistent",
        "Trees of joins",
    ):
        assert fig in out
    data = json.loads(report.read_text())
    f521 = data["fig_5_21"]
    assert sorted(f521) == [f"D{k}" for k in range(1, 9)]
    for runs in f521.values():
        assert {p: r["rows"] for p, r in runs.items()} == {p: runs["M"]["rows"] for p in "MXP"}
        assert all(r["throughput"] > 0 for r in runs.values())
        assert len(runs["X"]["caches_used"]) == 2  # the XJoin's two subresults
    costly = data["costly"]
    assert {p: r["rows"] for p, r in costly.items()} == {p: costly["M"]["rows"] for p in ("M", "MF", "F", "P", "PF")}
    assert costly["F"]["caches_used"] == ["2:[1, 0]"]  # T's pipeline caches S ⋈ R
    sweep = data["costly_push"]
    assert sorted(sweep) == ["40", "5"] and all(r["F"]["caches_used"] == ["2:[1, 0]"] for r in sweep.values())
    assert sweep["5"]["F"]["rows"] == sweep["5"]["MF"]["rows"] and sweep["40"]["F"]["rows"] == sweep["40"]["MF"]["rows"]
    assert all(r["P"]["throughput"] > 0 for r in sweep.values())
    d_sweep = data["fig_5_21_push"]
    assert sorted(d_sweep) == [f"D{k}@60" for k in range(1, 9)]
    for runs in d_sweep.values():  # the bench asserts the rows; here: every plan ran
        assert set(runs) == {"M", "X", "P"} and runs["M"]["rows"] == runs["P"]["rows"] == runs["X"]["rows"]
    f522 = data["fig_5_22"]
    assert 1 <= len(f522["M"]["slices"]) == len(f522["P"]["slices"]) <= 10
    f523 = data["fig_5_23"]
    need = f523["X_needs_bytes"]
    assert need > 0
    for mem, point in f523["points"].items():
        assert (point["X"] is None) == (int(mem) < need)
        assert point["P"] > 0
    assert sorted(data["shared"]) == sorted(data["consistent"]) == ["40", "5"]
    for shared in data["shared"].values():
        assert len({r["rows"] for r in shared.values()}) == 1
        assert shared["FT"]["caches_used"] == ["2:[1, 0]"] and shared["FU"]["caches_used"] == ["3:[1, 0]"]
        assert shared["FS"]["shared_by"] == [[2, 3]]  # one store for both pipelines
    for consistent in data["consistent"].values():
        assert len({r["rows"] for r in consistent.values()}) == 1
        assert consistent["G"]["caches_used"] == ["3:[1, 2]⋉[0]"]
    tree = data["tree"]
    assert sorted(tree) == ["costs", "pays"]
    for runs in tree.values():  # one MJoin (M, X, P), an XJoin of views (XT), a tree of MJoins (TP)
        assert set(runs) == {"M", "X", "P", "XT", "TP"} and len({r["rows"] for r in runs.values()}) == 1
        assert sorted(runs["X"]["caches_used"]) == ["2:[0, 1]", "3:[0, 1, 2]"]
