"""CQL errors as values: a code, a one-line reason, and where (line/column) with a caret excerpt."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

# How alike a misspelling and a name must be (difflib's ratio) to be suggested.
HINT_CUTOFF = 0.8


@dataclass(frozen=True)
class Pos:
    """A span in the query text: 1-based line and column, end column exclusive (same line)."""

    line: int
    column: int
    end_line: int | None = None
    end_column: int | None = None


def close_matches(word: str, candidates: Iterable[str], n: int = 1) -> list[str]:
    """The candidates most like `word` (case-insensitive), best first, each as spelled in
    `candidates`; none when nothing is close enough or `word` itself is one of them."""
    by_lower: dict[str, str] = {}
    for c in candidates:
        by_lower.setdefault(c.lower(), c)
    if word.lower() in by_lower:
        return []
    import difflib  # only for a hint (a run without errors does without it)

    return [by_lower[m] for m in difflib.get_close_matches(word.lower(), list(by_lower), n=n, cutoff=HINT_CUTOFF)]


def did_you_mean(word: str, candidates: Iterable[str]) -> str:
    """A `; did you mean X?` suffix for an error reason, or "" when nothing is close."""
    best = close_matches(word, candidates)
    return f"; did you mean {best[0]}?" if best else ""


class CqlError(Exception):
    """A user-facing error in CQL text; never wraps a Python traceback.

    `code` is machine-readable (e.g. ``unknown_source``), `reason` a one-line explanation.
    """

    def __init__(self, code: str, reason: str, pos: Pos | None = None, text: str | None = None):
        super().__init__(reason)
        self.code = code
        self.reason = reason
        self.pos = pos
        self.text = text

    @property
    def line(self) -> int | None:
        return self.pos.line if self.pos else None

    @property
    def column(self) -> int | None:
        return self.pos.column if self.pos else None

    def with_text(self, text: str) -> CqlError:
        """Attach the query text (for the caret excerpt) if not already attached."""
        if self.text is None:
            self.text = text
        return self

    def excerpt(self) -> str:
        """The offending line with a caret under the span."""
        if not self.pos or self.text is None:
            return ""
        lines = self.text.splitlines() or [""]
        if not 1 <= self.pos.line <= len(lines):
            return ""
        src = lines[self.pos.line - 1].expandtabs(1)
        start = max(self.pos.column - 1, 0)
        width = 1
        if self.pos.end_column and (self.pos.end_line in (None, self.pos.line)):
            width = max(self.pos.end_column - self.pos.column, 1)
        width = min(width, max(len(src) - start, 1))
        return f"  {src}\n  {' ' * start}{'^' * width}"

    def __str__(self) -> str:
        where = f"line {self.pos.line}, column {self.pos.column}: " if self.pos else ""
        head = f"{where}{self.reason}"
        ex = self.excerpt()
        return f"{head}\n{ex}" if ex else head

    def to_dict(self) -> dict[str, Any]:
        """Problem-details friendly form (used by the CLI and, later, the HTTP API)."""
        return {
            "code": self.code,
            "reason": self.reason,
            "line": self.line,
            "column": self.column,
            "excerpt": self.excerpt(),
        }
