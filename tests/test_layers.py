"""The layers import only downwards: every module's imports (lazy ones in functions too) are parsed
with `ast` and checked against `FORBIDDEN`.

cql/ (the language) < engine/ < io/ < spark_bridge/ < server/ (which embeds Spark sources); the face
package cqlstream/ (cli, client, demo) may import every layer and nothing imports it. No production
module imports the benchmarks (bench/) or the tests.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FACE = "face"  # the package cqlstream/ itself: cqlstream.cli, cqlstream.client, cqlstream.__init__, ...
LAYERS = ("cql", "engine", "io", "server", "spark_bridge")  # installed as cqlstream.<layer>
NOT_PRODUCTION = {"bench", "tests"}

# layer -> the layers its modules must not import
FORBIDDEN: dict[str, set[str]] = {
    "cql": {"engine", "io", "server", "spark_bridge", FACE} | NOT_PRODUCTION,
    "engine": {"io", "server", "spark_bridge", FACE} | NOT_PRODUCTION,
    "io": {"server", "spark_bridge", FACE} | NOT_PRODUCTION,
    "server": {FACE} | NOT_PRODUCTION,
    "spark_bridge": {"server", FACE} | NOT_PRODUCTION,
    FACE: set(NOT_PRODUCTION),
}


def layer_of_file(path: Path) -> str:
    """The layer of a source file, by its top-level folder (cqlstream/ is the face)."""
    top = path.relative_to(ROOT).parts[0]
    return FACE if top == "cqlstream" else top


def module_of_file(path: Path) -> str:
    """The installed module name of a source file: cql/analyzer.py -> cqlstream.cql.analyzer."""
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts if parts[0] == "cqlstream" else ["cqlstream", *parts])


def layer_of_module(name: str) -> str | None:
    """The layer an imported module belongs to; None for the standard library and third parties."""
    parts = name.split(".")
    if parts[0] in NOT_PRODUCTION:
        return parts[0]
    if parts[0] != "cqlstream":
        return None
    if len(parts) > 1 and parts[1] in LAYERS:
        return parts[1]
    if len(parts) > 1 and parts[1] == "grammar":
        return "grammar"  # data files only
    return FACE


def imported_modules(source: str, module: str, is_package: bool = False) -> list[tuple[int, str]]:
    """(line, absolute module name) of every import in `source`, at any depth; relative imports are
    resolved against `module`. `from X import name` counts as importing X.name too (name may be a module)."""
    out = []
    package = module if is_package else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                name = ".".join(base + ([node.module] if node.module else []))
            else:
                name = node.module or ""
            if name != "cqlstream":  # `from cqlstream import engine` imports the layer, not the face
                out.append((node.lineno, name))
            out += [(node.lineno, f"{name}.{a.name}") for a in node.names if a.name != "*"]
    return out


def violations(layer: str, source: str, module: str, is_package: bool = False) -> list[str]:
    """The imports of `source` (a module of `layer`) that the layer rules forbid."""
    bad = []
    for line, name in imported_modules(source, module, is_package):
        target = layer_of_module(name)
        if target is not None and target in FORBIDDEN.get(layer, set()):
            bad.append(f"{module}:{line}: {layer} imports {name} ({target})")
    return sorted(set(bad))


def production_files() -> list[Path]:
    files = []
    for top in (*LAYERS, "cqlstream"):
        if (ROOT / top).is_dir():
            files += sorted((ROOT / top).rglob("*.py"))
    return files


def test_every_production_module_respects_the_layers():
    files = production_files()
    assert len(files) > 40 and {layer_of_file(f) for f in files} >= {"cql", "engine", "server", FACE}
    bad = []
    for f in files:
        bad += violations(layer_of_file(f), f.read_text(encoding="utf-8"), module_of_file(f), f.name == "__init__.py")
    assert not bad, "layer violations:\n" + "\n".join(bad)


def test_the_catalog_is_a_plain_store():
    """The catalog imports nothing that executes DDL or analyzes queries (cql/ddl.py does)."""
    f = ROOT / "cql" / "catalog.py"
    names = {n for _, n in imported_modules(f.read_text(encoding="utf-8"), module_of_file(f))}
    assert not {
        n for n in names if n.startswith(("cqlstream.cql.analyzer", "cqlstream.cql.ddl", "cqlstream.cql.parser"))
    }


# ---------------------------------------------------------------- the checker itself catches violations
@pytest.mark.parametrize(
    "layer, module, source, target",
    [
        ("engine", "cqlstream.engine.x", "from cqlstream.server.app import create_app\n", "server"),
        ("engine", "cqlstream.engine.x", "def f():\n    import cqlstream.io.formats\n", "io"),  # lazy import
        ("engine", "cqlstream.engine.operators.x", "from ...server import host\n", "server"),  # relative
        ("engine", "cqlstream.engine.x", "from cqlstream import spark_bridge\n", "spark_bridge"),
        ("cql", "cqlstream.cql.x", "from cqlstream.engine.dsms import Dsms\n", "engine"),
        ("io", "cqlstream.io.x", "from cqlstream.server.problems import ProblemError\n", "server"),
        ("server", "cqlstream.server.x", "from cqlstream.client import Client\n", FACE),
        ("server", "cqlstream.server.x", "import cqlstream\n", FACE),
        ("server", "cqlstream.server.x", "from cqlstream.cli import main\n", FACE),
        ("server", "cqlstream.server.x", "from bench.__main__ import main\n", "bench"),
        (FACE, "cqlstream.cli", "from tests.strategies import rows\n", "tests"),
    ],
)
def test_checker_finds_a_violation(layer, module, source, target):
    bad = violations(layer, source, module)
    assert bad and all(f"({target})" in b for b in bad), bad


@pytest.mark.parametrize(
    "layer, module, source",
    [
        ("engine", "cqlstream.engine.x", "from cqlstream.cql.catalog import Catalog\nimport numpy as np\n"),
        ("engine", "cqlstream.engine.operators.x", "from ..batch import Batch\nfrom . import base\n"),
        ("server", "cqlstream.server.x", "from cqlstream.engine.dsms import Dsms\nimport io\nimport json\n"),
        ("io", "cqlstream.io.x", "from cqlstream.engine.batch import Batch\nfrom cqlstream.cql import ast\n"),
        (FACE, "cqlstream.cli", "from cqlstream.server.app import create_app\nfrom cqlstream.client import Client\n"),
    ],
)
def test_checker_allows_downward_imports(layer, module, source):
    assert violations(layer, source, module) == []


def test_file_paths_map_to_layers():
    assert layer_of_file(ROOT / "engine" / "operators" / "window.py") == "engine"
    assert layer_of_file(ROOT / "cqlstream" / "cli.py") == FACE
    assert module_of_file(ROOT / "cql" / "analyzer.py") == "cqlstream.cql.analyzer"
    assert module_of_file(ROOT / "engine" / "operators" / "__init__.py") == "cqlstream.engine.operators"
    assert module_of_file(ROOT / "cqlstream" / "client.py") == "cqlstream.client"
