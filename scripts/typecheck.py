"""Run mypy on the whole tree under its import name.

The folders cql/, engine/, server/, ... install as cqlstream.cql, cqlstream.engine, ... (see
setup.py); mypy cannot follow that mapping, so this builds a tree of symbolic links that has
the installed shape (build/typecheck/cqlstream/engine -> ../../../engine, ...) and checks it.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LINKS = {
    "cql": "cql",
    "engine": "engine",
    "io": "io",
    "server": "server",
    "spark_bridge": "spark_bridge",
    "grammar": "grammar",
}


def shadow_tree() -> Path:
    pkg = ROOT / "build" / "typecheck" / "cqlstream"
    pkg.mkdir(parents=True, exist_ok=True)
    wanted = {p.name: p for p in (ROOT / "cqlstream").iterdir() if p.name != "__pycache__"}
    wanted.update({name: ROOT / src for name, src in LINKS.items() if (ROOT / src).exists()})
    for old in pkg.iterdir():
        if old.name not in wanted or old.resolve() != wanted[old.name].resolve():
            old.unlink()
    for name, target in wanted.items():
        link = pkg / name
        if not link.is_symlink():
            link.symlink_to(target)
    return pkg.parent


def main(argv: list[str]) -> int:
    tree = shadow_tree()
    cmd = [sys.executable, "-m", "mypy", "--config-file", str(ROOT / "pyproject.toml"), "-p", "cqlstream", *argv]
    return subprocess.call(cmd, cwd=tree)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
