"""The project as a user gets it: build the wheel, install it into a fresh venv, run the CLI from there.

The development venv holds an editable install whose import hook maps the repo folders; this test
makes sure the wheel alone works: it installs only `cqlstream` into site-packages, every layer
imports from the installed copy (not the repo), and `cqlstream run` executes a STREAM script.
Nothing is downloaded: the wheel is built without build isolation and installed without
dependencies, which the fresh venv sees through a .pth file listing this interpreter's
site-packages (a plain path line runs no editable finder, so the repo stays invisible).
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
TIMEOUT = 120  # seconds per step; the whole test takes a few seconds
# top-level folders of the tree that must only ever install as cqlstream.<name>
LAYER_FOLDERS = ("cql", "engine", "io", "server", "spark_bridge", "grammar")
# what a build must not see: local state that a stale copy would leak into the wheel
NOT_SOURCES = shutil.ignore_patterns(
    ".git", ".venv", "build", "dist", "*.egg-info", "__pycache__", ".pytest_cache", ".hypothesis", "out"
)

SCRIPT = """\
table : register stream S (A integer, B float);
source : s.dat
query : select A, count(*) from S [Range 2] group by A;
dest : counts
query : select A, B * 2 from S where A > 1;
dest : doubled
"""
DATA = "i,i,f\n1,1,0.5\n2,2,1.5\n4,2,2.0\n"
# [Range 2] holds [t-2, t]: the tuple of instant 1 leaves at 3 (seen at instant 4)
COUNTS = "[1]:+:1, 1\n[2]:+:2, 1\n[4]:-:1, 1\n[4]:-:2, 1\n[4]:+:2, 2\n"
DOUBLED = "[2]:+:2, 3\n[4]:+:2, 4\n"


def run(args: list[str], cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    out = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=TIMEOUT)
    assert out.returncode == 0, f"{args} exited {out.returncode}\nstdout:\n{out.stdout}\nstderr:\n{out.stderr}"
    return out


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Build the wheel from a clean copy of the tree (an in-tree build/ could carry removed modules)."""
    can_build = importlib.util.find_spec("setuptools.command.bdist_wheel") or importlib.util.find_spec("wheel")
    assert can_build, "this venv's setuptools cannot build wheels: `make setup` installs the dev extras"
    tmp = tmp_path_factory.mktemp("wheel")
    src = tmp / "src"
    shutil.copytree(ROOT, src, ignore=NOT_SOURCES)
    pip_wheel = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index", "-q"]
    run([*pip_wheel, "-w", str(tmp / "dist"), str(src)], cwd=tmp)
    (built,) = (tmp / "dist").glob("cqlstream-*.whl")
    return built


@pytest.fixture(scope="module")
def venv(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, set[str]]:
    """A fresh venv with the wheel installed; returns its bin folder and the new site-packages entries."""
    home = tmp_path_factory.mktemp("venv") / "env"
    run([sys.executable, "-m", "venv", "--without-pip", str(home)], cwd=home.parent)
    py = home / "bin" / "python"
    site = Path(run([str(py), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"], cwd=home).stdout.strip())
    before = set(os.listdir(site))
    pip_install = [sys.executable, "-m", "pip", "--python", str(py), "install", "--no-deps", "--no-index", "-q"]
    run([*pip_install, str(wheel)], cwd=home.parent)
    added = set(os.listdir(site)) - before
    (site / "_dependencies.pth").write_text("\n".join(_dependency_dirs()) + "\n")
    return home / "bin", added


def _dependency_dirs() -> list[str]:
    """This interpreter's site-packages folders (where numpy, lark, fastapi, ... live), never the repo."""
    ours = dict.fromkeys([sysconfig.get_path("purelib"), *sys.path])  # in import order
    dirs = [p for p in ours if p and Path(p).name in ("site-packages", "dist-packages") and Path(p).is_dir()]
    assert dirs, "no site-packages folder found for the dependencies"
    assert all(not Path(p).resolve().is_relative_to(ROOT) or ".venv" in Path(p).parts for p in dirs)
    return dirs


def clean_env(bin_dir: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    env["PATH"] = f"{bin_dir}{os.pathsep}{env.get('PATH', '')}"
    return env


def test_wheel_has_only_the_cqlstream_package(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
        info = next(n.split("/")[0] for n in names if n.endswith(".dist-info/RECORD"))
        record = z.read(f"{info}/RECORD").decode().splitlines()
        top_level = z.read(f"{info}/top_level.txt").decode().split()
        entry_points = z.read(f"{info}/entry_points.txt").decode()
    tops = {line.split(",")[0].split("/")[0] for line in record if line}
    assert tops == {"cqlstream", info}
    assert top_level == ["cqlstream"]
    assert "cqlstream = cqlstream.cli:main" in entry_points
    # every layer is inside, sub-packages included (a hand-written list once forgot engine.operators)
    for pkg in ("cql/logical/rewrites", "engine/operators", "server"):
        assert f"cqlstream/{pkg}/__init__.py" in names, pkg
    assert "cqlstream/grammar/cql.lark" in names


def test_wheel_declares_every_package_it_imports(wheel: Path) -> None:
    """Each third-party module the installed package imports comes from a distribution the wheel
    requires (not an extra): the dev venv has every extra, so a missing runtime dependency would
    only show on a user's machine (`serve --demo` once failed on a missing httpx)."""
    import ast
    import re
    from importlib.metadata import packages_distributions

    with zipfile.ZipFile(wheel) as z:
        info = next(n.split("/")[0] for n in z.namelist() if n.endswith(".dist-info/METADATA"))
        meta = z.read(f"{info}/METADATA").decode()
        sources = {n: z.read(n).decode() for n in z.namelist() if n.endswith(".py")}
    required = {
        re.split(r"[<>=!~;\[ ]", line.split(":", 1)[1].strip())[0].lower().replace("_", "-")
        for line in meta.splitlines()
        if line.startswith("Requires-Dist:") and "extra ==" not in line
    }
    imported: set[str] = set()
    for text in sources.values():
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.Import):
                imported |= {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                imported.add(node.module.split(".")[0])
    dists = packages_distributions()
    third_party = {m for m in imported if m in dists and m not in sys.stdlib_module_names and m != "cqlstream"}
    missing = {m: dists[m] for m in third_party if not any(d.lower().replace("_", "-") in required for d in dists[m])}
    assert not missing, f"imported but not required by the wheel: {missing} (requires {sorted(required)})"
    assert {"httpx", "numpy", "pyarrow", "fastapi"} <= third_party  # the scan sees the real imports


def test_fresh_venv_gets_only_cqlstream(venv: tuple[Path, set[str]]) -> None:
    _, added = venv
    assert {a for a in added if not a.endswith(".dist-info")} == {"cqlstream"}
    assert not added & set(LAYER_FOLDERS)


def test_layers_import_from_the_installed_copy(venv: tuple[Path, set[str]], tmp_path: Path) -> None:
    bin_dir, _ = venv
    probe = (
        "import importlib.util, sysconfig, cqlstream, cqlstream.engine.dsms, cqlstream.cql.frontend, "
        "cqlstream.server.app, cqlstream.engine.operators\n"
        "from cqlstream.engine import Dsms\n"
        "print(sysconfig.get_path('purelib'))\n"
        "print(cqlstream.__file__)\n"
        "print(cqlstream.engine.operators.__file__)\n"
        f"print([n for n in {[n for n in LAYER_FOLDERS if n != 'io']!r} if importlib.util.find_spec(n)])\n"
    )
    out = run([str(bin_dir / "python"), "-c", probe], cwd=tmp_path, env=clean_env(bin_dir)).stdout.splitlines()
    site, init, operators, visible = out
    assert Path(init).is_relative_to(site), init
    assert Path(operators).is_relative_to(site), operators
    assert not Path(init).resolve().is_relative_to(ROOT)
    assert visible == "[]", f"layer folders importable at top level: {visible}"


def test_cli_runs_from_the_wheel(venv: tuple[Path, set[str]], tmp_path: Path) -> None:
    """Twice: the first run saves the parser's tables in the user's cache folder (never in the
    installed package), the second loads them; both give the same results."""
    bin_dir, _ = venv
    env = {**clean_env(bin_dir), "CQLSTREAM_CACHE_DIR": str(tmp_path / "cache")}
    cli = str(bin_dir / "cqlstream")
    helped = run([cli, "--help"], cwd=tmp_path, env=env).stdout
    assert helped.startswith("usage: cqlstream") and "run" in helped
    (tmp_path / "t.cql").write_text(SCRIPT)
    (tmp_path / "s.dat").write_text(DATA)
    site = Path(run([str(bin_dir / "python"), "-c", PURELIB], cwd=tmp_path, env=env).stdout.strip())
    for _ in range(2):
        ran = run([cli, "run", "t.cql", "--out-dir", "out"], cwd=tmp_path, env=env)
        assert (tmp_path / "out" / "counts").read_text() == COUNTS, ran.stderr
        assert (tmp_path / "out" / "doubled").read_text() == DOUBLED, ran.stderr
        assert sorted(p.name[:9] for p in (tmp_path / "cache").iterdir()) == ["cql-lalr-", "cql-parse", "dataclass"]
    kept = ("lalr", "lark_cache", "dataclass-code", "cql-parsed")
    assert not [p for p in site.rglob("*") if any(k in p.name for k in kept)]


PURELIB = "import sysconfig; print(sysconfig.get_path('purelib'))"


def test_serve_demo_starts_from_the_wheel(venv: tuple[Path, set[str]], tmp_path: Path) -> None:
    """README's first command from an installed wheel: `cqlstream serve --demo` comes up, the demo
    shop registers its queries over HTTP and its big orders are printed. Without Spark here
    (--no-spark): the Spark demo takes 40-70 s and runs from the source tree in
    tests/test_demo_server.py; what the wheel must add for it, the Spark log configuration the
    session is started with, is checked to be installed."""
    import httpx

    from tests.demo_process import running_demo

    bin_dir, _ = venv
    env = clean_env(bin_dir)
    probe = "from cqlstream.spark_bridge.runtime import LOG4J; print(LOG4J.is_file())"
    assert run([str(bin_dir / "python"), "-c", probe], cwd=tmp_path, env=env).stdout.strip() == "True"
    with running_demo(str(bin_dir / "cqlstream"), cwd=tmp_path, env=env, spark=False) as (url, _lines):
        queries = httpx.get(f"{url}/queries", timeout=10).json()
        assert {q["name"] for q in queries} == {"big_orders", "sales_last_10s", "clicks_then_orders", "engine_load"}
        assert httpx.get(f"{url}/healthz", timeout=10).status_code == 200


def test_offline_demo_runs_from_the_wheel(venv: tuple[Path, set[str]], tmp_path: Path) -> None:
    """`cqlstream demo` from an installed wheel: its script and recorded files are package data, its
    results go to ./cqlstream-demo-out (never into site-packages) and equal the source checkout's."""
    bin_dir, _ = venv
    env = clean_env(bin_dir)
    site = Path(run([str(bin_dir / "python"), "-c", PURELIB], cwd=tmp_path, env=env).stdout.strip())
    run([str(bin_dir / "cqlstream"), "demo", "--lines", "2"], cwd=tmp_path, env=env)
    installed = {p.name: p.read_text() for p in (tmp_path / "cqlstream-demo-out").iterdir()}
    assert not (site / "cqlstream" / "demo" / "out").exists()
    checkout = tmp_path / "checkout-out"
    run([sys.executable, "-m", "cqlstream", "demo", "--out-dir", str(checkout)], cwd=ROOT)
    expected = {p.name: p.read_text() for p in checkout.iterdir()}
    assert installed == expected and len(expected) >= 4 and all(expected.values())
