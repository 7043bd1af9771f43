"""The engine's one error type: a machine-readable `code`, a one-line message and details.

Every error the engine reports to its caller is an `EngineError` (as every error in CQL text is a
`CqlError`); the code says what went wrong, the server maps it to an HTTP status
(server/problems.py) and the details become members of the problem document. Adding a code: list
it in `CODES` below, raise `EngineError(code, message, **details)`, give it a status in
`server/problems.py`.
"""

from __future__ import annotations

from typing import Any

# code -> what it means. Every raised code is listed here (EngineError checks it).
CODES: dict[str, str] = {
    "unknown_source": "no stream or relation of that name",
    "unknown_view": "no view of that name",
    "unknown_entity": "no plan entity (control table) of that id",
    "query_id_taken": "a query with that id is registered already",
    "in_use": "a stream, relation or view that queries or views still read (details: users)",
    "bad_knob_value": "an unknown knob of an entity, or a value the knob does not accept",
    "invalid_input": "pushed tuples or a heartbeat the input manager rejects (details: row, field)",
    "invalid_argument": "an argument of an engine call outside its domain",
    "bad_plan_file": "the plan file under the data directory cannot be restored",
    "no_implementation": "a registered function or aggregate has no implementation to run",
    "bad_source": "a Spark source that cannot feed its stream: a bad definition or DataFrame (details: missing, mistyped)",
    "source_exists": "a Spark source already feeds that stream",
    "spark_unavailable": "Spark (pyspark and Java) cannot be started in this process",
    "nothing_to_seed": "a query registered from an earlier instant (seeding) has no state its sources' past could build",
    "not_partitionable": "a query whose state does not partition, refused for a distributed run (details: partitioning)",
    "internal": "a broken invariant of the engine (a bug, never the caller's fault)",
}


class EngineError(Exception):
    """An error of the engine: `code` (one of `CODES`), the message (`str(e)`), and `details`
    (JSON-safe values such as `users`, `row`, `field`) that callers may show."""

    def __init__(self, code: str, message: str, **details: Any):
        if code not in CODES:
            raise ValueError(f"unlisted engine error code {code!r}")  # add it to CODES
        super().__init__(message)
        self.code = code
        self.message = message
        self.details = details


class InUseError(EngineError):
    """A stream, relation or view cannot be dropped: queries or views use it (`users` names them)."""

    def __init__(self, message: str, users: list[str]):
        super().__init__("in_use", message, users=users)
        self.users = users


class KnobError(EngineError):
    """An unknown control-table knob, or a value it does not accept."""

    def __init__(self, message: str, **details: Any):
        super().__init__("bad_knob_value", message, **details)


class InputError(EngineError):
    """Rejected input; `row` is the 0-based offending row of the push (None if not row-specific)."""

    def __init__(self, message: str, row: int | None = None, field: str | None = None):
        super().__init__("invalid_input", message, row=row, field=field)
        self.row = row
        self.field = field


class PlanFileError(EngineError):
    """plan.json is malformed; the message names the file and the entry."""

    def __init__(self, message: str):
        super().__init__("bad_plan_file", message)
