"""Start-up cost of `cqlstream run`: the CLI and a script run import only what the run uses.

Every `cqlstream run` pays its imports before reading a row (~0.5 s of a 1 s fixed cost was
imports). Modules of optional features — static approximation's rules, k-constraint strategies,
the adaptive join machinery and join ordering, the server, Spark, the HTTP client — load on first
use; these checks run in a fresh interpreter and fail when one of them is imported eagerly again.
The writer process (io/writer_process.py) imports neither pyarrow nor the query compiler.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

# loaded on first use only: a run of a plain aggregate (no join, no approximation) never needs them
OPTIONAL = [
    "cqlstream.cql.approx.static",
    "cqlstream.engine.approx.shedding",  # load shedding: an overloaded server's
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


# what `cqlstream run` does without since session 18 (bench/README.md, "session 18, start-up
# imports"): the CLI's JSON output and the server's settings (other commands'), argparse's
# terminal width through shutil (with bz2, lzma, zlib), difflib (a name's hint in an error),
# hashlib (OpenSSL: the caches' digests come from _blake2)
LAZY_IN_A_RUN = [
    "json",
    "cqlstream.server.settings",
    "cqlstream.limit_options",
    "shutil",
    "bz2",
    "lzma",
    "difflib",
    "hashlib",
    "_hashlib",
]


def _modules_after(code: str) -> set[str]:
    """sys.modules of a fresh interpreter after running `code`."""
    prog = (
        code
        + "\nimport sys\n_loaded = sorted(sys.modules)  # before json, which prints them\nimport json\nprint(json.dumps(_loaded))\n"
    )
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


def test_a_cli_run_with_its_caches_loads_only_what_it_uses(tmp_path: Path):
    """`cqlstream run` of a plain aggregate, its statements and dataclass code cached by an
    earlier run: no parser (lark), no random generators, no thread pool, no child processes,
    no temporary files, no logging (each was ~3-20 ms of every start)."""
    (tmp_path / "s.dat").write_text("i,i,i\n" + "".join(f"{i // 10 + 1},{i % 100},{i % 7}\n" for i in range(500)))
    (tmp_path / "run.cql").write_text(
        "table : register stream S (A integer, B integer);\nsource : s.dat\n"
        "query : select B, Sum(A) from S [Rows 50] group by B;\ndest : out\n"
    )
    code = textwrap.dedent(f"""
        import os
        os.environ["CQLSTREAM_CACHE_DIR"] = {str(tmp_path / "cache")!r}
        from cqlstream.cli import main
        assert main(["run", {str(tmp_path / "run.cql")!r}, "--out-dir", {str(tmp_path / "o")!r}]) == 0
    """)
    unused = {
        "lark",
        "numpy.random",
        "concurrent.futures",
        "subprocess",
        "tempfile",
        "ctypes.util",
        "logging",
        *LAZY_IN_A_RUN,
        *OPTIONAL,
    }
    first = _modules_after(code)
    assert "lark" in first and "tempfile" in first  # parsed, and the caches written
    assert sorted(_modules_after(code) & unused) == []


def test_a_cli_run_asks_for_one_blas_thread_unless_the_user_chose(tmp_path: Path):
    """`cqlstream run` sets OPENBLAS_NUM_THREADS=1 before numpy loads OpenBLAS (whose threads' spin-up
    was ~40 ms of every start), and leaves a count the user set (in any of OpenBLAS's variables)."""
    (tmp_path / "s.dat").write_text("i,i\n1,1\n")
    (tmp_path / "run.cql").write_text(
        "table : register stream S (A integer);\nsource : s.dat\nquery : select A from S;\ndest : out\n"
    )
    code = textwrap.dedent(f"""
        import json, os, sys
        from cqlstream.cli import main
        assert "numpy" not in sys.modules
        assert main(["run", {str(tmp_path / "run.cql")!r}, "--out-dir", {str(tmp_path / "o")!r}]) == 0
        print(json.dumps({{v: os.environ.get(v) for v in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS")}}))
    """)
    env = {
        k: v for k, v in os.environ.items() if k not in ("OPENBLAS_NUM_THREADS", "GOTO_NUM_THREADS", "OMP_NUM_THREADS")
    }
    outs = []
    for extra in ({}, {"OMP_NUM_THREADS": "2"}):
        r = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, env={**env, **extra}, timeout=120
        )
        assert r.returncode == 0, r.stderr
        outs.append(json.loads(r.stdout.strip().splitlines()[-1]))
    assert outs == [
        {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": None},
        {"OPENBLAS_NUM_THREADS": None, "OMP_NUM_THREADS": "2"},
    ]


def test_the_kmon_strategy_loads_only_for_a_join_a_constraint_applies_to():
    """Registering a join reads k-Mon's configuration (engine/kconstraints/config.py); the strategy
    module (~20 ms of imports) loads when a declared constraint applies to the join (Linear Road's
    joins have none)."""
    code = textwrap.dedent("""
        import sys
        from cqlstream.engine.dsms import Dsms
        d = Dsms()
        d.execute("register stream S (a int, b int); register relation R (a int, b int)")
        d.register_query("select * from S [Rows 5], R where S.a = R.a")
        assert "cqlstream.engine.kconstraints.strategy" not in sys.modules
        d2 = Dsms()
        d2.execute("register stream S (a int, b int) with constraints (unique(a)); register relation R (a int, b int)")
        d2.register_query("select * from S [Rows 5], R where S.a = R.a")
        from cqlstream.engine.operators.join import JoinOp
        assert next(o for o in d2.plan.operators if isinstance(o, JoinOp)).kmon is not None
    """)
    loaded = _modules_after(code)
    assert {"cqlstream.engine.kconstraints.strategy", "cqlstream.engine.kconstraints.config"} <= loaded


def test_a_run_without_an_aggregate_does_not_load_the_bounded_aggregate(tmp_path: Path):
    """The synopsis choice loads `engine/bounded_aggregate.py` (~1 ms) only for a query with an
    aggregate under its projections: Linear Road's three queries (a window, two joins) have none."""
    (tmp_path / "s.dat").write_text("i,i,i\n1,1,2\n2,2,3\n")
    (tmp_path / "t.dat").write_text("i,i,i\n1,1,5\n2,2,6\n")
    (tmp_path / "run.cql").write_text(
        "table : register stream S (A integer, B integer);\nsource : s.dat\n"
        "table : register stream T (A integer, C integer);\nsource : t.dat\n"
        "query : select S.A, C from S [Rows 5], T [Rows 5] where S.A = T.A;\ndest : out\n"
        "query : select A, Sum(B) from S group by A;\ndest : out2\n"
    )
    script = tmp_path / "run.cql"
    join_only = textwrap.dedent("""
        from cqlstream.engine.dsms import Dsms
        d = Dsms()
        d.register_source("register stream S (A integer, B integer)")
        d.register_source("register stream T (A integer, C integer)")
        d.register_query("select S.A, C from S [Rows 5], T [Rows 5] where S.A = T.A")
    """)
    assert "cqlstream.engine.bounded_aggregate" not in _modules_after(join_only)
    code = textwrap.dedent(f"""
        from cqlstream.io.script_runner import run_script
        counts = run_script({str(script)!r}, out_dir={str(tmp_path / "o")!r}, threads=1)
        assert sum(counts.values()) > 0, counts
    """)
    assert "cqlstream.engine.bounded_aggregate" in _modules_after(code)  # an aggregate still loads it
