"""RFC 7807 problem details: every error reply is `application/problem+json` with a machine-readable
`code`; CQL errors add line/column/excerpt (caret text), input errors add row/field."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict
from starlette.responses import JSONResponse

PROBLEM_TYPE = "https://cqlstream.dev/problems/"
_TITLES = {
    400: "Bad Request",
    401: "Unauthorized",
    404: "Not Found",
    405: "Method Not Allowed",
    406: "Not Acceptable",
    409: "Conflict",
    413: "Payload Too Large",
    415: "Unsupported Media Type",
    422: "Unprocessable Content",
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

    def to_dict(self) -> dict:
        return {
            "type": PROBLEM_TYPE + self.code,
            "title": _TITLES.get(self.status, "Error"),
            "status": self.status,
            "detail": self.detail,
            "code": self.code,
            **self.extra,
        }

    def response(self, headers: dict | None = None) -> JSONResponse:
        return JSONResponse(
            self.to_dict(), status_code=self.status, media_type="application/problem+json", headers=headers
        )


def cql_problem(e, status: int = 400) -> ProblemError:
    """A `cql.errors.CqlError` as a problem (duplicate names are conflicts)."""
    d = e.to_dict()
    if d.get("code") == "duplicate_name":
        status = 409
    return ProblemError(
        status,
        d.get("code") or "cql_error",
        str(e.reason),
        line=d.get("line"),
        column=d.get("column"),
        excerpt=d.get("excerpt") or None,
    )


def input_problem(e, status: int = 422) -> ProblemError:
    """An `engine.inputs.InputError` (or our own parse error) as a problem naming row and field."""
    return ProblemError(
        status,
        getattr(e, "code", None) or "invalid_input",
        str(e),
        row=getattr(e, "row", None),
        field=getattr(e, "field", None),
    )


def responses(*statuses: int) -> dict:
    """OpenAPI `responses=` entry documenting problem replies."""
    return {
        s: {"model": Problem, "description": _TITLES.get(s, "Error"), "content": {"application/problem+json": {}}}
        for s in statuses
    }
