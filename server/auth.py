"""Optional API-key authentication: when a key is configured, every mutating request (POST,
PATCH, DELETE) must carry it in the `X-API-Key` header (name configurable); reads stay open."""

from __future__ import annotations

import hmac
from collections.abc import Awaitable, Callable

from fastapi import Security
from fastapi.security import APIKeyHeader

from cqlstream.server.problems import ProblemError
from cqlstream.server.settings import Settings


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
