"""The I/O layer's place: the engine and the CQL front end know nothing of io/, and io/ knows
nothing of the server or the face package (it may use cql/ and engine/)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
_IMPORT = re.compile(r"^\s*(?:from|import)\s+cqlstream\.(\w+)", re.M)


def _imported_layers(folder: str) -> dict[str, set[str]]:
    return {
        str(p.relative_to(ROOT)): set(_IMPORT.findall(p.read_text(encoding="utf-8")))
        for p in sorted((ROOT / folder).rglob("*.py"))
    }


def test_engine_and_cql_do_not_import_io():
    for folder in ("cql", "engine"):
        bad = {f: layers for f, layers in _imported_layers(folder).items() if "io" in layers}
        assert not bad, f"{folder}/ must not import cqlstream.io: {bad}"


def test_io_imports_only_cql_engine_and_itself():
    for f, layers in _imported_layers("io").items():
        assert layers <= {"cql", "engine", "io"}, f"{f} imports {sorted(layers - {'cql', 'engine', 'io'})}"
