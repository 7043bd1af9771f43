"""Byte-compile the cqlstream a benchmark is about to time, so that it starts as an installed package does.

An installed package has its .pyc files (pip writes them); a checkout run with
`PYTHONDONTWRITEBYTECODE=1` in the environment (some sandboxes and CI images set it) has none, and
every process then compiles its ~150 modules again: ~0.2 s more CPU per start, serial, which is a
tenth of a Linear Road run at 720k and a quarter of a Q2 run. Whole-process benchmarks call
`compile_for` on each executable they will time before the first timed run; `make setup` runs
`python -m bench.bytecode` for the checkout's own venv.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

# Run by the executable's own interpreter: the folders its `cqlstream` package is imported from (an
# editable install maps sub-packages to the tree's top-level folders), each compiled in place.
_COMPILE = """
import compileall, importlib.util, sys
roots = set(importlib.util.find_spec("cqlstream").submodule_search_locations)
for sub in ("cql", "engine", "io", "server", "spark_bridge", "grammar", "demo"):
    spec = importlib.util.find_spec("cqlstream." + sub)
    roots.update((spec.submodule_search_locations or ()) if spec else ())
sys.exit(0 if all(compileall.compile_dir(r, quiet=1) for r in sorted(roots)) else 1)
"""

_SH_EXEC = "'''exec' "  # pip's console script under #!/bin/sh when the interpreter's path is too long for #!


def interpreter_of(executable: str) -> str:
    """The Python a console script (a `cqlstream` next to a venv's python) runs on: its #! line, or
    the `exec` line pip writes under `#!/bin/sh`."""
    with open(executable, "rb") as f:
        first, second = (f.readline().decode(errors="replace").strip() for _ in range(2))
    if first.startswith("#!/bin/sh") and second.startswith(_SH_EXEC):
        return second[len(_SH_EXEC) :].split('"')[1]
    if not first.startswith("#!"):
        raise SystemExit(f"{executable}: not a Python console script (no #! line)")
    return first[2:].split()[0]


def compile_for(executable: str) -> None:
    """Write the .pyc files of the cqlstream package that `executable` runs (a no-op when up to date)."""
    done = subprocess.run([interpreter_of(executable), "-c", _COMPILE], capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"byte-compiling {executable}'s cqlstream failed:\n{done.stdout}{done.stderr}")


if __name__ == "__main__":  # python -m bench.bytecode [EXECUTABLE]: default, the cqlstream beside this Python
    compile_for(sys.argv[1] if len(sys.argv) > 1 else str(Path(sys.executable).with_name("cqlstream")))
