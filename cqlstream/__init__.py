"""cqlstream — a data stream management system for CQL continuous queries (after Stanford STREAM).

This package is the thin public face: the `cqlstream` CLI and re-exports of the public API.
"""

from cqlstream.cql.catalog import Catalog
from cqlstream.cql.errors import CqlError
from cqlstream.cql.frontend import CompiledQuery, compile_query, explain

__all__ = ["Catalog", "CompiledQuery", "CqlError", "compile_query", "explain"]
__version__ = "0.1.0"
