"""cqlstream — a data stream management system for CQL continuous queries (after Stanford STREAM).

This package is the thin public face: the `cqlstream` CLI and re-exports of the public API. The
re-exports are looked up on first use (PEP 562), so importing a submodule — the CLI running a
script, the writer process — does not import the query compiler's front end (~0.2 s).

Importing any part of cqlstream first routes `dataclasses`' code generation through a cache of
compiled methods (cqlstream/dataclass_code.py): creating the package's ~130 dataclasses then no
longer compiles ~700 methods at every start.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from cqlstream import dataclass_code as _dataclass_code

_dataclass_code.install()

if TYPE_CHECKING:
    from cqlstream.cql.catalog import Catalog
    from cqlstream.cql.errors import CqlError
    from cqlstream.cql.frontend import CompiledQuery, compile_query, explain

__all__ = ["Catalog", "CompiledQuery", "CqlError", "compile_query", "explain"]
__version__ = "0.1.0"

_HOMES = {
    "Catalog": "cqlstream.cql.catalog",
    "CqlError": "cqlstream.cql.errors",
    "CompiledQuery": "cqlstream.cql.frontend",
    "compile_query": "cqlstream.cql.frontend",
    "explain": "cqlstream.cql.frontend",
}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(home), name)
    globals()[name] = value  # looked up once
    return value
