"""Errors of the engine's management API (the server maps them to HTTP statuses)."""

from __future__ import annotations


class InUseError(ValueError):
    """A stream, relation or view cannot be dropped: queries or views use it (`users` names them)."""

    def __init__(self, message: str, users: list[str]):
        super().__init__(message)
        self.users = users


class KnobError(ValueError):
    """An unknown control-table knob, or a value it does not accept."""
