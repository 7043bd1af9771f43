"""bench.mask_sites runs a script with the engine's modules rewritten to probe mask indexing:
the run's output is the plain run's, and the report names the sites it timed."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _script(tmp: Path, dest: str) -> Path:
    rows = ["i,i,i"] + [f"{t // 4},{t % 9},{(t * 7) % 23}" for t in range(4000)]
    (tmp / "s.dat").write_text("\n".join(rows) + "\n")
    script = tmp / f"{dest}.stream"
    script.write_text(
        "table : register stream S (A integer, B integer);\n"
        f"source : {tmp / 's.dat'}\n"
        "query : select X.A, Y.B from S [Range 3] as X, S [Now] as Y where X.B = Y.B and X.A > 2;\n"
        f"dest : {tmp / dest}\n"
    )
    return script


def _run(args: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, *args], cwd=ROOT, capture_output=True, text=True, timeout=300)


def test_probed_run_writes_the_plain_runs_output_and_reports_sites(tmp_path):
    plain = _run(["-m", "cqlstream", "run", str(_script(tmp_path, "plain.txt")), "--threads", "1"])
    assert plain.returncode == 0, plain.stderr
    probed = _run(
        [
            "-m",
            "bench.mask_sites",
            "--min-rows",
            "10",
            "--",
            "run",
            str(_script(tmp_path, "probed.txt")),
            "--threads",
            "1",
        ]
    )
    assert probed.returncode == 0, probed.stderr
    out = (tmp_path / "probed.txt").read_text()
    assert out and out == (tmp_path / "plain.txt").read_text()
    sites = [line for line in probed.stdout.splitlines() if line.startswith(("engine/", "store engine/"))]
    assert sites, probed.stdout
    calls = int(sites[0].split()[-5])
    assert calls > 0
