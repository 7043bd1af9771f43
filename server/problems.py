"""RFC 7807 problem details: every error reply is `application/problem+json` with a machine-readable
`code`; CQL errors add line/column/excerpt (caret text), input errors add row/field. `STATUS` maps
the error codes of CQL and of the engine to HTTP statuses; `problem_of` turns an exception into its
problem (the app registers one handler for every class in `PROBLEMS`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError
from starlette.responses import JSONResponse

from cqlstream.cql.errors import CqlError
from cqlstream.engine.errors import EngineError

PROBLEM_TYPE = "https://cqlstream.dev/problems/"
_TITLES = {
    400: "Bad Request",
    401: "Unauthorized",
    404: "Not Found",
    405: "Method Not Allowed",
    406: "Not Acceptable",
    408: "Request Timeout",
    409: "Conflict",
    410: "Gone",
    413: "Payload Too Large",
    415: "Unsupported Media Type",
    422: "Unprocessable Content",
    429: "Too Many Requests",
    500: "Internal Server Error",
    503: "Service Unavailable",
}


class Problem(BaseModel):
    """An error reply (RFC 7807). `code` is stable and machine-readable; extra members depend on it:
    CQL errors carry `line`, `column` and `excerpt` (the offending line with a caret), input errors
    `row` (0-based row of the push) and `field`."""

    model_config = ConfigDict(extra="allow")
    type: str
    title: str
    status: int
    detail: str
    code: str
    line: int | None = None
    column: int | None = None
    excerpt: str | None = None
    row: int | None = None
    field: str | None = None


class ProblemError(Exception):
    """Raise anywhere in a request to reply with a problem document."""

    def __init__(self, status: int, code: str, detail: str, **extra: Any):
        super().__init__(detail)
        self.status = status
        self.code = code
        self.detail = detail
        self.extra = {k: v for k, v in extra.items() if v is not None}

    def to_dict(self) -> dict[str, Any]:
        return {
            "type": PROBLEM_TYPE + self.code,
            "title": _TITLES.get(self.status, "Error"),
            "status": self.status,
            "detail": self.detail,
            "code": self.code,
            **self.extra,
        }

    def response(self, headers: dict[str, str] | None = None) -> JSONResponse:
        return JSONResponse(
            self.to_dict(), status_code=self.status, media_type="application/problem+json", headers=headers
        )


# (error family, code) -> HTTP status of the reply; code None: the family's default. CQL codes and
# engine codes are separate families (a CQL `unknown_source` is bad query text, 422; the engine's
# is a missing resource, 404). Adding an engine error code: give it a row here.
STATUS: dict[tuple[str, str | None], int] = {
    ("cql", None): 422,  # CQL text the engine cannot take
    ("cql", "duplicate_name"): 409,
    ("engine", None): 422,
    ("engine", "unknown_source"): 404,
    ("engine", "unknown_view"): 404,
    ("engine", "unknown_entity"): 404,
    ("engine", "in_use"): 409,
    ("engine", "query_id_taken"): 409,
    ("engine", "bad_knob_value"): 422,
    ("engine", "invalid_input"): 422,
    ("engine", "invalid_argument"): 422,
    ("engine", "nothing_to_seed"): 422,
    ("engine", "bad_plan_file"): 500,
    ("engine", "no_implementation"): 500,
    ("engine", "internal"): 500,
    ("engine", "bad_source"): 422,
    ("engine", "source_exists"): 409,
    ("engine", "spark_unavailable"): 503,
    ("engine", "not_partitionable"): 422,
}


def status_of(family: str, code: str) -> int:
    """The HTTP status for an error `code` of `family` ("cql" or "engine")."""
    return STATUS.get((family, code), STATUS[(family, None)])


def cql_problem(e: CqlError) -> ProblemError:
    """A `CqlError` as a problem with its position and caret excerpt."""
    d = e.to_dict()
    code = d.get("code") or "cql_error"
    return ProblemError(
        status_of("cql", code),
        code,
        str(e.reason),
        line=d.get("line"),
        column=d.get("column"),
        excerpt=d.get("excerpt") or None,
    )


def engine_problem(e: EngineError) -> ProblemError:
    """An `EngineError` as a problem; its details (`users`, `row`, `field`, ...) become members."""
    return ProblemError(status_of("engine", e.code), e.code, str(e), **e.details)


# exception class -> its problem document (the app's one error handler looks the class up here)
PROBLEMS: dict[type[Exception], Callable[[Any], ProblemError]] = {
    ProblemError: lambda e: e,
    CqlError: cql_problem,
    EngineError: engine_problem,
}


def problem_of(exc: Exception) -> ProblemError:
    """The problem document for an exception of a class in `PROBLEMS` (or a subclass)."""
    for cls in type(exc).__mro__:
        if cls in PROBLEMS:
            return PROBLEMS[cls](exc)
    raise TypeError(f"no problem document for {type(exc).__name__}")


def validation_problem(e: ValidationError) -> ProblemError:
    """A pydantic validation error of a body the route parsed itself: 422 naming the first field."""
    err = e.errors()[0]
    loc = ".".join(str(x) for x in err.get("loc", ()))
    return ProblemError(
        422, "invalid_request", f"{loc}: {err.get('msg')}" if loc else err.get("msg", "invalid"), field=loc or None
    )


def responses(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI `responses=` entry documenting problem replies."""
    return {
        s: {"model": Problem, "description": _TITLES.get(s, "Error"), "content": {"application/problem+json": {}}}
        for s in statuses
    }
