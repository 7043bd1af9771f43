"""User errors of the I/O layer: a bad STREAM script or source file (`ScriptError`)."""

from __future__ import annotations

from pathlib import Path


class ScriptError(Exception):
    """A user error in a STREAM script or one of its files: `path:line: reason`."""

    def __init__(self, path: str | Path, line: int | None, reason: str, column: int | None = None):
        self.path = str(path)
        self.line = line
        self.reason = reason
        self.column = column
        super().__init__(str(self))

    def __str__(self) -> str:
        if self.line is None:
            return f"{self.path}: {self.reason}"
        return f"{self.path}:{self.line}: {self.reason}"
