"""`cqlstream run --approximate static`: the script's queries are registered with static
approximation approved (a TOLERATE clause takes effect); without it they run as written."""

from __future__ import annotations

from collections import Counter

from cqlstream.cli import main as cli_main


def test_run_approximate_static_applies_the_tolerated_window(tmp_path):
    (tmp_path / "s.dat").write_text("i,i,i\n" + "".join(f"{t},{t},{t % 3}\n" for t in range(1, 40)))
    (tmp_path / "run.cql").write_text(
        "table : register stream S (A integer, B integer);\nsource : s.dat\n"
        "query : Rstream(select A from S [Range 10 Tolerate 2]);\ndest : counts\n"
    )
    outs = {}
    for mode in ("exact", "static"):
        out = tmp_path / mode
        assert cli_main(["run", str(tmp_path / "run.cql"), "--out-dir", str(out), "--approximate", mode]) == 0
        outs[mode] = (out / "counts").read_text().splitlines()
    assert cli_main(["run", str(tmp_path / "run.cql"), "--out-dir", str(tmp_path / "plain")]) == 0
    assert (tmp_path / "plain" / "counts").read_text().splitlines() == outs["exact"]
    # Rstream repeats the window's rows at every instant: Range 10 holds 11 instants, Range 2 holds 3
    per_instant = {m: Counter(x.split(":")[0] for x in lines) for m, lines in outs.items()}
    assert max(per_instant["exact"].values()) == 11 and max(per_instant["static"].values()) == 3
    assert set(outs["static"]) <= set(outs["exact"])
