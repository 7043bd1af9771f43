"""`pc`: pyarrow.compute, imported on first use.

Importing pyarrow.compute builds its function registry and docstrings (~0.1-0.2 s of CPU), which a
script run with numeric columns never needs: `cqlstream run` paid it at start-up, on its critical
path, through the text readers' and writers' module imports."""

from __future__ import annotations

from typing import Any


class _LazyCompute:
    def __getattr__(self, name: str) -> Any:
        import pyarrow.compute as compute

        return getattr(compute, name)


pc: Any = _LazyCompute()

__all__ = ["pc"]
