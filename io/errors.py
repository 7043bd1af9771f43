"""User errors of the I/O layer: a bad STREAM script or source file (`ScriptError`), a rejected
push body (`IngestError`)."""

from __future__ import annotations

import os


class ScriptError(Exception):
    """A user error in a STREAM script or one of its files: `path:line: reason`."""

    def __init__(self, path: str | os.PathLike[str], line: int | None, reason: str, column: int | None = None) -> None:
        self.path = str(path)
        self.line = line
        self.reason = reason
        self.column = column
        super().__init__(str(self))

    def __str__(self) -> str:
        if self.line is None:
            return f"{self.path}: {self.reason}"
        return f"{self.path}:{self.line}: {self.reason}"


class IngestError(ValueError):
    """A rejected body: `status` 400 (malformed) or 422 (well-formed but wrong); `row` 0-based."""

    def __init__(
        self,
        message: str,
        row: int | None = None,
        field: str | None = None,
        *,
        status: int = 422,
        code: str = "invalid_input",
    ) -> None:
        super().__init__(message)
        self.row = row
        self.field = field
        self.status = status
        self.code = code
