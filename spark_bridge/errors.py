"""The error of a Spark source that cannot feed its stream: the columns at fault are named."""

from __future__ import annotations


class SparkSourceError(ValueError):
    """A Spark source refused: `missing` and `mistyped` list the columns at fault (may be empty)."""

    def __init__(self, message: str, missing: tuple[str, ...] = (), mistyped: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.missing = missing
        self.mistyped = mistyped
