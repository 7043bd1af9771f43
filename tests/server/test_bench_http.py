"""The HTTP ingest benchmark (bench/http_ingest.py) runs end to end on a small input."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.server.conftest import ROOT


@pytest.mark.time_limit(60)
def test_http_ingest_bench_smoke():
    out = subprocess.run(
        [sys.executable, "-m", "bench.http_ingest", "--tuples", "40000", "--batch", "10000", "--subscribers", "3"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=50,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    lines = [line for line in out.stdout.splitlines() if "tuples/s ingest" in line]
    assert len(lines) == 2 and all("got all" in line and " yes " in line for line in lines), out.stdout
