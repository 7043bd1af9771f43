"""Start-up cost of `cqlstream run`: the CLI and a script run import only what the run uses.

Every `cqlstream run` pays its imports before reading a row (~0.5 s of a 1 s fixed cost was
imports). Modules of optional features — static approximation's rules, k-constraint strategies,
the adaptive join machinery and join ordering, the server, Spark, the HTTP client — load on first
use; these checks run in a fresh interpreter and fail when one of them is imported eagerly again.
The writer process (io/writer_process.py) imports neither pyarrow nor the query compiler.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

# loaded on first use only: a run of a plain aggregate (no join, no approximation) never needs them
OPTIONAL = [
    "cqlstream.cql.approx.static",
    "cqlstream.engine.kconstraints.strategy",
    "cqlstream.engine.adaptive.mjoin",
    "cqlstream.engine.adaptive.caching",
    "cqlstream.engine.joinorder.ordering",
    "cqlstream.server.app",
    "cqlstream.spark_bridge.spec",
    "cqlstream.client",
    "pyspark",
    "pandas",
    "fastapi",
    "uvicorn",
    "httpx",
]


def _modules_after(code: str) -> set[str]:
    """sys.modules of a fresh interpreter after running `code`."""
    prog = code + "\nimport json, sys\nprint(json.dumps(sorted(sys.modules)))\n"
    r = subprocess.run([sys.executable, "-c", prog], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return set(json.loads(r.stdout.strip().splitlines()[-1]))


def test_importing_the_cli_loads_no_optional_feature():
    loaded = _modules_after("import cqlstream.cli")
    assert "cqlstream.cli" in loaded
    assert sorted(loaded & set(OPTIONAL)) == []


def test_running_a_script_loads_no_optional_feature(tmp_path: Path):
    (tmp_path / "s.dat").write_text("i,i,i\n" + "".join(f"{i // 10 + 1},{i % 1000},{i % 100}\n" for i in range(3000)))
    (tmp_path / "run.cql").write_text(
        "table : register stream S (A integer, B integer);\nsource : s.dat\n"
        "query : select B, Sum(A), Count(A) from S [Rows 1000] group by B;\ndest : out\n"
    )
    code = textwrap.dedent(f"""
        from cqlstream.io.script_runner import run_script
        counts = run_script({str(tmp_path / "run.cql")!r}, threads=1)
        assert sum(counts.values()) > 0, counts
    """)
    loaded = _modules_after(code)
    assert "cqlstream.engine.dsms" in loaded
    assert sorted(loaded & set(OPTIONAL)) == []


def test_a_join_still_loads_what_it_uses():
    """The lazy imports happen: registering a join loads the adaptive machinery and join ordering
    (so the checks above are not passing because those modules vanished)."""
    code = textwrap.dedent("""
        from cqlstream.engine.dsms import Dsms
        d = Dsms()
        d.register_source("register stream S (A integer)")
        d.register_source("register stream T (A integer)")
        d.register_query("select * from S [Rows 5], T [Rows 5] where S.A = T.A")
    """)
    loaded = _modules_after(code)
    for m in (
        "cqlstream.engine.adaptive.mjoin",
        "cqlstream.engine.adaptive.caching",
        "cqlstream.engine.joinorder.ordering",
    ):
        assert m in loaded, m


def test_the_writer_process_imports_neither_pyarrow_nor_the_compiler():
    loaded = _modules_after("import cqlstream.io.writer_process, cqlstream.io.result_writer")
    assert sorted(loaded & {"pyarrow", "lark", "cqlstream.cql.ast", "cqlstream.engine.dsms", *OPTIONAL}) == []


def test_cli_help_loads_neither_numpy_nor_the_compiler():
    """`cqlstream --help` (and a subcommand's) builds the whole argument parser: the compiler and
    the engine (and numpy with them) are imported by the commands that use them."""
    code = "from cqlstream.cli import build_parser\nbuild_parser().format_help()"
    loaded = _modules_after(code)
    heavy = {"numpy", "lark", "pyarrow", "cqlstream.cql.analyzer", "cqlstream.engine.boundedness", *OPTIONAL}
    assert sorted(loaded & heavy) == []


def test_cli_explain_and_shedding_still_load_what_they_use():
    """The lazily imported paths work in a fresh interpreter: `cqlstream explain` compiles and
    prints its verdicts, and load shedding finds which operators take a sampling rate."""
    code = textwrap.dedent("""
        import contextlib, io
        from cqlstream.cli import main
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            rc = main(["explain", "--ddl", "register stream S (a int)", "select a, count(*) from S [Range 5] group by a"])
        assert rc == 0 and "AGGREGATE GROUP BY a" in out.getvalue() and "Bounded memory" in out.getvalue()
        from cqlstream.engine.approx import shedding
        from cqlstream.engine.dsms import Dsms
        d = Dsms()
        d.register_source("register stream S (a int)")
        h = d.register_query("select a from S [Rows 5]")
        assert any(shedding._sheddable(pn) for pn in d.plan.nodes.values()), "no sheddable operator"
    """)
    loaded = _modules_after(code)
    assert {"cqlstream.engine.boundedness", "cqlstream.engine.operators.base"} <= loaded


def _blas_after_run(tmp_path: Path, env: dict[str, str]) -> tuple[str | None, int | None]:
    """OPENBLAS_NUM_THREADS as `cqlstream run` left it, and the thread count numpy's OpenBLAS
    reports after the run (None when numpy is built on another BLAS)."""
    import os

    tmp_path.mkdir()
    (tmp_path / "s.dat").write_text("i,i,i\n" + "".join(f"{i + 1},{i},{i}\n" for i in range(50)))
    (tmp_path / "run.cql").write_text(
        "table : register stream S (A integer, B integer);\nsource : s.dat\nquery : select * from S;\ndest : out\n"
    )
    prog = textwrap.dedent(f"""
        import ctypes, json, os
        from cqlstream.cli import main
        assert main(["run", {str(tmp_path / "run.cql")!r}, "--threads", "2"]) == 0
        n = None
        for lib in {{line.split()[-1] for line in open("/proc/self/maps") if "openblas" in line}}:
            for name in ("scipy_openblas_get_num_threads64_", "openblas_get_num_threads64_", "openblas_get_num_threads"):
                fn = getattr(ctypes.CDLL(lib), name, None)
                if fn is not None:
                    n = fn()
                    break
        print(json.dumps([os.environ.get("OPENBLAS_NUM_THREADS"), n]))
    """)
    base = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
    r = subprocess.run(
        [sys.executable, "-c", prog], capture_output=True, text=True, timeout=120, env={**base, **env}, cwd=tmp_path
    )
    assert r.returncode == 0, r.stderr
    value, threads = json.loads(r.stdout.strip().splitlines()[-1])
    return value, threads


def test_a_run_starts_no_blas_threads(tmp_path: Path):
    """numpy's OpenBLAS would start a thread per core at import, spinning on the cores the run's
    own threads use: `cqlstream run` asks for one, i.e. no pool (unless the user set a count)."""
    value, threads = _blas_after_run(tmp_path / "a", {})
    users, theirs = _blas_after_run(tmp_path / "b", {"OPENBLAS_NUM_THREADS": "2"})
    assert value == "1" and users == "2"  # the user's count wins
    if threads is not None:  # numpy on OpenBLAS (as this project's wheels are)
        assert threads == 1 and theirs == 2
