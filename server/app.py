"""The FastAPI application: `create_app(dsms_or_settings)`.

Wires the engine host (server/host.py), the routers, RFC 7807 error handling (no request can take
the process down: anything unexpected becomes a 500 problem), the request-size limit (413) and
body-read timeout (408), the optional API and read keys (checked before a body is read), backpressure
on input (429), CORS, `/metrics`, `/healthz` (liveness), `/readyz` (readiness), the OpenAPI
document (`/openapi.json`, `/docs` and `/redoc`, served offline) and the web console (`/`).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.middleware.cors import CORSMiddleware
from fastapi.responses import JSONResponse, PlainTextResponse, Response
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from cqlstream.engine.dsms import Dsms
from cqlstream.server import api_console, api_control, api_queries, api_sources, api_spark, metrics
from cqlstream.server.admission import Admission
from cqlstream.server.auth import KeyCheck, api_key_dependency
from cqlstream.server.host import EngineHost
from cqlstream.server.models import DdlIn, Health, HeartbeatIn, QueryPatch, SourceIn, SparkSourceIn, ViewIn
from cqlstream.server.problems import PROBLEMS, Problem, ProblemError, problem_of
from cqlstream.server.settings import Settings

log = logging.getLogger("cqlstream.server")


class BodyTooLarge(StarletteHTTPException):
    def __init__(self, limit: int) -> None:
        super().__init__(413, f"request body larger than {limit} bytes")


class BodyTimeout(StarletteHTTPException):
    def __init__(self, seconds: float) -> None:
        super().__init__(408, f"request body not received within {seconds:g} s", headers={"Connection": "close"})


class _Limits:
    """ASGI middleware: refuse bodies over the limit (by Content-Length, or while they stream in),
    give up on a body that has not fully arrived `body_timeout` seconds after the request began
    (408: slow uploads do not hold a connection and a worker forever), and count replies per status
    class for /metrics."""

    def __init__(self, app: ASGIApp, limit: int, counts: dict[str, int], body_timeout: float | None = None) -> None:
        self.app = app
        self.limit = limit
        self.counts = counts
        self.body_timeout = body_timeout

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        limit = self.limit
        for k, v in scope.get("headers", ()):
            if k == b"content-length":
                try:
                    n = int(v)
                except ValueError:
                    n = -1
                if n > limit or n < 0:
                    p = ProblemError(
                        413 if n > limit else 400,
                        "body_too_large" if n > limit else "bad_request",
                        f"request body of {n} bytes is over the limit of {limit} bytes"
                        if n > limit
                        else "bad Content-Length",
                    )
                    await p.response()(scope, receive, send)
                    self.counts[f"{p.status // 100}xx"] = self.counts.get(f"{p.status // 100}xx", 0) + 1
                    return
        seen = 0
        timeout = self.body_timeout
        deadline = None if timeout is None else time.monotonic() + timeout
        body_done = False  # after the last body chunk, receive() waits for a disconnect: no deadline then

        async def limited_receive() -> Message:
            nonlocal seen, body_done
            if deadline is None or body_done:
                msg = await receive()
            else:
                try:
                    msg = await asyncio.wait_for(receive(), max(deadline - time.monotonic(), 0.0))
                except TimeoutError:
                    raise BodyTimeout(timeout or 0.0) from None
            if msg["type"] == "http.request":
                seen += len(msg.get("body", b""))
                body_done = not msg.get("more_body", False)
                if seen > limit:
                    raise BodyTooLarge(limit)
            return msg

        async def counting_send(msg: Message) -> None:
            if msg["type"] == "http.response.start":
                k = f"{msg['status'] // 100}xx"
                self.counts[k] = self.counts.get(k, 0) + 1
            await send(msg)

        await self.app(scope, limited_receive, counting_send)


def create_app(dsms_or_settings: Dsms | Settings | None = None, *, settings: Settings | None = None) -> FastAPI:
    """The app over a given `Dsms` (tests, embedding) or one built from `Settings` (the CLI)."""
    if isinstance(dsms_or_settings, Settings):
        settings = dsms_or_settings
        host = EngineHost(settings)
    else:
        settings = settings or Settings()
        host = EngineHost(settings, dsms_or_settings)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        host.start()
        try:
            yield
        finally:
            host.stop()

    app = FastAPI(
        title="cqlstream",
        version="0.1.0",
        lifespan=lifespan,
        docs_url=None,  # /docs and /redoc come from api_console, with their assets served locally
        redoc_url=None,
        description="Continuous CQL queries over data streams (after Stanford STREAM): register streams, "
        "relations, views and queries, push input, stream results as NDJSON, JSON, SSE or "
        "XML, read and tune control tables. Errors are RFC 7807 problem documents with a "
        "machine-readable `code`.",
    )
    app.state.host = host
    app.state.settings = settings
    http_counts: dict[str, int] = {}
    auth = api_key_dependency(settings)

    # ------------------------------------------------------------ errors
    async def on_error(request: Request, exc: Exception) -> Response:
        """Problems raised by the routes, CQL errors and engine errors, as problem documents
        (statuses from problems.STATUS); engine bugs (5xx codes) are handled like any crash."""
        p = problem_of(exc)
        if p.status == 500:  # an engine bug; 503 (Spark unavailable, the log unavailable) is not
            return await on_crash(request, exc)
        headers = {"WWW-Authenticate": f'ApiKey header="{settings.api_key_header}"'} if p.status == 401 else None
        return p.response(headers)

    for cls in PROBLEMS:
        app.add_exception_handler(cls, on_error)

    @app.exception_handler(StarletteHTTPException)
    async def on_http(request: Request, exc: StarletteHTTPException) -> Response:
        code = {404: "not_found", 405: "method_not_allowed", 408: "body_timeout", 413: "body_too_large"}.get(
            exc.status_code, "http_error"
        )
        return ProblemError(exc.status_code, code, str(exc.detail)).response(getattr(exc, "headers", None))

    @app.exception_handler(RequestValidationError)
    async def on_validation(request: Request, exc: RequestValidationError) -> Response:
        errs = exc.errors()
        first = errs[0] if errs else {}
        loc = [str(x) for x in first.get("loc", ())]
        where = ".".join(loc)
        status, code = 422, "invalid_request"
        if first.get("type") in ("json_invalid",):
            status, code = 400, "malformed_body"
        return ProblemError(
            status,
            code,
            f"{where}: {first.get('msg', 'invalid request')}" if where else first.get("msg", "invalid request"),
            field=where or None,
            errors=[{"loc": [str(x) for x in e.get("loc", ())], "msg": str(e.get("msg"))} for e in errs[:20]],
        ).response()

    @app.exception_handler(Exception)
    async def on_crash(request: Request, exc: Exception) -> Response:
        host.errors_5xx += 1
        log.error("unexpected error in %s %s", request.method, request.url.path, exc_info=exc)
        return ProblemError(
            500,
            "internal_error",
            f"unexpected {type(exc).__name__}; the server keeps running and "
            "its state is unchanged by the failed request where the engine rejected it "
            "whole",
        ).response()

    # ------------------------------------------------------------ routes
    app.include_router(api_sources.router(host, auth))
    app.include_router(api_queries.router(host, auth))
    app.include_router(api_control.router(host, auth))
    app.include_router(api_spark.router(host, auth))
    api_console.install(app, host)  # the console at /, /docs and /redoc (offline), POST /explain

    @app.get("/healthz", response_model=Health, tags=["service"], summary="Liveness and a few numbers")
    async def healthz() -> dict[str, Any]:
        return host.health()  # lock-free counters: answers while the engine is busy

    @app.get(
        "/readyz",
        tags=["service"],
        summary="Readiness: is the engine keeping up",
        description="200 when the engine is keeping up, 503 when it is behind: one engine call busy longer "
        "than the server's `max_engine_lag`, or `max_pending_pushes` pushes in flight (pushes then get "
        "429 with `Retry-After`). Read without the engine lock.",
        responses={200: {"description": "ready"}, 503: {"description": "the engine is behind"}},
    )
    async def readyz() -> JSONResponse:
        r = host.readiness()
        return JSONResponse(r, status_code=200 if r["ready"] else 503)

    @app.get(
        "/metrics",
        response_class=PlainTextResponse,
        tags=["service"],
        summary="Prometheus metrics",
        responses={200: {"content": {"text/plain": {"schema": {"type": "string"}}}}},
    )
    async def get_metrics() -> PlainTextResponse:
        m = await run_in_threadpool(host.metrics)
        return PlainTextResponse(metrics.render(m, dict(http_counts)), media_type=metrics.CONTENT_TYPE)

    # ------------------------------------------------------------ OpenAPI: problem and source schemas
    def openapi() -> dict[str, Any]:
        if app.openapi_schema:
            return app.openapi_schema
        from fastapi.openapi.utils import get_openapi

        schema = get_openapi(title=app.title, version=app.version, description=app.description, routes=app.routes)
        comps = schema.setdefault("components", {}).setdefault("schemas", {})
        for model in (SourceIn, DdlIn, SparkSourceIn, HeartbeatIn, QueryPatch, ViewIn, Problem):
            js = model.model_json_schema(ref_template="#/components/schemas/{model}")
            for name, sub in js.pop("$defs", {}).items():
                comps.setdefault(name, sub)
            comps[model.__name__] = js
        ref = {"schema": {"$ref": "#/components/schemas/Problem"}}
        for path in schema.get("paths", {}).values():
            for op in path.values():
                for status, resp in op.get("responses", {}).items():
                    if status.startswith(("4", "5")):
                        resp["content"] = {"application/problem+json": ref}
                op.get("responses", {}).setdefault(
                    "500", {"description": "Internal Server Error", "content": {"application/problem+json": ref}}
                )
        app.openapi_schema = schema
        return schema

    app.openapi = openapi  # type: ignore[method-assign]  # FastAPI's documented way to customise the schema
    # outermost last: CORS (answers preflights) > size/timeout limits and reply counts > keys >
    # backpressure > routes; none of them reads a body before the routes do
    app.add_middleware(Admission, host=host)
    app.add_middleware(KeyCheck, settings=settings)
    app.add_middleware(_Limits, limit=settings.max_body_bytes, counts=http_counts, body_timeout=settings.body_timeout)
    if settings.cors_origins:
        app.add_middleware(
            CORSMiddleware,
            allow_origins=list(settings.cors_origins),
            allow_methods=["GET", "POST", "PATCH", "DELETE", "OPTIONS"],
            allow_headers=["*"],
            expose_headers=["Location", "Retry-After"],
        )
    return app
