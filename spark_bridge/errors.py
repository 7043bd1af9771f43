"""The errors of Spark sources, as engine errors with codes: a source that cannot feed its stream
names the columns or the setting at fault (`bad_source`); Spark that cannot start is `spark_unavailable`."""

from __future__ import annotations

from typing import Any

from cqlstream.engine.errors import EngineError


class SparkSourceError(EngineError):
    """A Spark source refused: `missing` and `mistyped` list the columns at fault (may be empty)."""

    def __init__(
        self,
        message: str,
        missing: tuple[str, ...] = (),
        mistyped: tuple[str, ...] = (),
        *,
        code: str = "bad_source",
        **details: Any,
    ) -> None:
        if missing:
            details["missing"] = list(missing)
        if mistyped:
            details["mistyped"] = list(mistyped)
        super().__init__(code, message, **details)
        self.missing = missing
        self.mistyped = mistyped
