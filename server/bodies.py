"""Request bodies parsed off the event loop: a route reads the bytes on the loop, then parses and
validates them in the same worker-thread call that does the work (one thread hop, whatever the
size), with the replies a typed FastAPI body gives (422 naming `body.<field>`, 400 malformed JSON).

Why not FastAPI's typed bodies: FastAPI parses them on the event loop before the route runs, so a
large JSON body (up to `--max-body-mb`) to any route would stall every connection while it parses.
"""

from __future__ import annotations

import json
from typing import Any, TypeVar

from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel, ValidationError
from starlette.requests import Request

from cqlstream.server.problems import ProblemError

M = TypeVar("M", bound=BaseModel)


def content_type(request: Request) -> str:
    return (request.headers.get("content-type") or "").split(";")[0].strip().lower()


def is_json(ctype: str) -> bool:
    return ctype in ("application/json", "") or ctype.endswith("+json")


def json_data(body: bytes) -> Any:
    """The JSON value of a body (call in a worker thread), or the problem a typed body would give."""
    if not body:
        raise RequestValidationError([{"type": "missing", "loc": ("body",), "msg": "Field required", "input": None}])
    try:
        return json.loads(body)
    except json.JSONDecodeError as e:
        raise RequestValidationError(
            [{"type": "json_invalid", "loc": ("body", e.pos), "msg": "JSON decode error"}]
        ) from None
    except (ValueError, UnicodeDecodeError) as e:
        raise ProblemError(400, "malformed_body", f"malformed JSON: {e}") from None
    except RecursionError:
        raise ProblemError(422, "too_deep", "JSON nested too deeply") from None


def validated(model: type[M], data: Any) -> M:
    """`data` as `model`, a validation error located under `body` as FastAPI locates them."""
    try:
        return model.model_validate(data)
    except ValidationError as e:
        errs = e.errors(include_url=False)
        raise RequestValidationError([{**err, "loc": ("body", *err["loc"])} for err in errs]) from None


def json_model(model: type[M], body: bytes, ctype: str) -> M:
    """A JSON body as `model` (call in a worker thread). A body sent as another media type (or none)
    is refused as FastAPI refuses it for a typed body."""
    if body and not (ctype == "application/json" or (ctype.startswith("application/") and ctype.endswith("+json"))):
        msg = "Input should be a valid dictionary or object to extract fields from"
        raise RequestValidationError([{"type": "model_attributes_type", "loc": ("body",), "msg": msg}])
    return validated(model, json_data(body))


def request_body(model: type[BaseModel]) -> dict[str, Any]:
    """The OpenAPI `requestBody` of a route that parses `model` itself (its schema is listed under
    components by the app)."""
    return {
        "required": True,
        "content": {"application/json": {"schema": {"$ref": f"#/components/schemas/{model.__name__}"}}},
    }
