"""Optional API keys, checked before a request's body is read.

- `--api-key` (write key): every mutating request (POST, PUT, PATCH, DELETE) must carry it in the
  `X-API-Key` header (name configurable).
- `--read-key`: reads (GET: results, peek of source rows, CQL texts, /plan, /entities, ...) must
  carry the read key or the write key (the write key implies read). Without it reads stay open.
- Always open: liveness, readiness, metrics and the API documentation (`OPEN_PATHS`), and CORS
  preflights (OPTIONS).

`KeyCheck` is an ASGI middleware, so a request with a wrong or missing key is answered 401 before
the app reads or parses one byte of its body; `api_key_dependency` only documents the scheme in
OpenAPI (and checks again, harmlessly).
"""

from __future__ import annotations

import hmac
from collections.abc import Awaitable, Callable

from fastapi import Security
from fastapi.security import APIKeyHeader
from starlette.types import ASGIApp, Receive, Scope, Send

from cqlstream.server.problems import ProblemError
from cqlstream.server.settings import Settings

MUTATING = frozenset({"POST", "PUT", "PATCH", "DELETE"})
OPEN_PATHS = frozenset(
    {"/", "/healthz", "/readyz", "/metrics", "/openapi.json", "/docs", "/docs/oauth2-redirect", "/redoc"}
)
OPEN_PREFIXES = ("/console/", "/docs-assets/")  # the console's and the docs' static files: no data in them


def _matches(key: str | None, expected: str | None) -> bool:
    return key is not None and expected is not None and hmac.compare_digest(key.encode(), expected.encode())


def allowed(settings: Settings, method: str, key: str | None) -> bool:
    """Whether a request with `method` and header `key` passes (path exemptions aside)."""
    if method in MUTATING:
        return not settings.api_key or _matches(key, settings.api_key)
    if method == "OPTIONS" or not settings.read_key:
        return True
    return _matches(key, settings.read_key) or _matches(key, settings.api_key)


class KeyCheck:
    """ASGI middleware: 401 (problem document, `WWW-Authenticate`) before the body is read."""

    def __init__(self, app: ASGIApp, settings: Settings) -> None:
        self.app = app
        self.settings = settings
        self.header = settings.api_key_header.lower().encode("latin-1")

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        s = self.settings
        path = scope.get("path", "")
        if (
            scope["type"] != "http"
            or not (s.api_key or s.read_key)
            or path in OPEN_PATHS
            or path.startswith(OPEN_PREFIXES)
        ):
            return await self.app(scope, receive, send)
        key = next((v.decode("latin-1") for k, v in scope.get("headers", ()) if k == self.header), None)
        method = scope["method"]
        if allowed(s, method, key):
            return await self.app(scope, receive, send)
        what = "API key" if method in MUTATING else "read key (or API key)"
        p = ProblemError(401, "unauthorized", f"missing or wrong {what} (header {s.api_key_header})")
        headers = {"WWW-Authenticate": f'ApiKey header="{s.api_key_header}"'}
        if method in MUTATING:
            headers["Connection"] = "close"  # the body is not read: do not keep the connection for another request
        await p.response(headers)(scope, receive, send)


def api_key_dependency(settings: Settings) -> Callable[[str | None], Awaitable[None]]:
    """A FastAPI dependency (documented as an apiKey security scheme) that checks the key."""
    scheme = APIKeyHeader(
        name=settings.api_key_header,
        auto_error=False,
        description="required on mutating endpoints when the server runs with --api-key",
    )

    async def require_key(key: str | None = Security(scheme)) -> None:
        if not settings.api_key:
            return
        if key is None or not hmac.compare_digest(key.encode(), settings.api_key.encode()):
            raise ProblemError(401, "unauthorized", f"missing or wrong API key (header {settings.api_key_header})")

    return require_key
