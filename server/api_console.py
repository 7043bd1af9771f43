"""The web console at `/` and the API docs at `/docs` and `/redoc`, all served from package data.

Nothing loads from a CDN: the console is plain HTML/CSS and ES modules (server/console/static/), Swagger UI 5
and ReDoc 2 are vendored with their licenses (server/console/vendor/).
`POST /explain` compiles a query against the live catalog without registering it, so the console's
editor can show EXPLAIN and error markers before anything changes.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fastapi import APIRouter, FastAPI
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html
from fastapi.responses import FileResponse, HTMLResponse
from pydantic import BaseModel, ConfigDict, Field
from starlette.concurrency import run_in_threadpool
from starlette.staticfiles import StaticFiles

from cqlstream.cql.analyzer import AnalyzeOptions
from cqlstream.cql.errors import CqlError
from cqlstream.cql.frontend import compile_query
from cqlstream.engine.boundedness import decide
from cqlstream.engine.boundedness import explain as explain_with_verdict
from cqlstream.server.models import AttrOut, MemoryVerdict
from cqlstream.server.problems import responses

if TYPE_CHECKING:
    from cqlstream.server.host import EngineHost

PACKAGE_DIR = Path(str(resources.files("cqlstream.server.console")))
CONSOLE_DIR = PACKAGE_DIR / "static"
ASSETS = "/console"  # the console's files
SWAGGER_ASSETS = "/docs-assets/swagger"
REDOC_ASSETS = "/docs-assets/redoc"


class ExplainIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    cql: str = Field(min_length=1, max_length=1 << 20, examples=["select * from S where A > 10"])


class ExplainOut(BaseModel):
    kind: str
    schema_: list[AttrOut] = Field(alias="schema", serialization_alias="schema")
    explain: str
    bounded_memory: MemoryVerdict


def _explain(host: EngineHost, cql: str) -> dict[str, Any]:
    with host.lock:  # the catalog changes under the lock only
        try:
            compiled = compile_query(cql, host.d.catalog, options=AnalyzeOptions(stream_compat=host.d.compat))
        except CqlError as e:
            raise e.with_text(cql) from None
    return {
        "kind": compiled.kind,
        "schema": [{"name": a.name, "type": str(a.type)} for a in compiled.schema],
        "explain": explain_with_verdict(compiled),
        "bounded_memory": decide(compiled.plan).to_dict(),
    }


def router(host: EngineHost) -> APIRouter:
    r = APIRouter()

    @r.get("/", include_in_schema=False)
    async def console() -> FileResponse:
        return FileResponse(CONSOLE_DIR / "index.html", media_type="text/html")

    @r.post(
        "/explain",
        response_model=ExplainOut,
        response_model_by_alias=True,
        tags=["queries"],
        summary="EXPLAIN a query without registering it",
        description="Compiles the query against the current catalog: its result kind, schema and EXPLAIN text "
        "(the analyzed query with defaults made explicit, and its logical plan). CQL errors carry `line`, "
        "`column` and a caret `excerpt`. Nothing is registered.",
        responses=responses(400, 413, 422),
    )
    async def explain(body: ExplainIn) -> dict[str, Any]:
        return await run_in_threadpool(_explain, host, body.cql)

    @r.get("/docs", include_in_schema=False)
    async def swagger() -> HTMLResponse:
        return get_swagger_ui_html(
            openapi_url="/openapi.json",
            title="cqlstream API",
            swagger_js_url=f"{SWAGGER_ASSETS}/swagger-ui-bundle.js",
            swagger_css_url=f"{SWAGGER_ASSETS}/swagger-ui.css",
            swagger_favicon_url=f"{SWAGGER_ASSETS}/favicon-32x32.png",
        )

    @r.get("/redoc", include_in_schema=False)
    async def redoc() -> HTMLResponse:
        return get_redoc_html(
            openapi_url="/openapi.json",
            title="cqlstream API",
            redoc_js_url=f"{REDOC_ASSETS}/redoc.standalone.js",
            redoc_favicon_url=f"{SWAGGER_ASSETS}/favicon-32x32.png",
            with_google_fonts=False,
        )

    return r


def install(app: FastAPI, host: EngineHost) -> None:
    """Add the console, the docs pages and their static files to the app."""
    app.include_router(router(host))
    app.mount(ASSETS, StaticFiles(directory=CONSOLE_DIR), name="console")
    app.mount(SWAGGER_ASSETS, StaticFiles(directory=PACKAGE_DIR / "vendor" / "swagger-ui"), name="swagger-assets")
    app.mount(REDOC_ASSETS, StaticFiles(directory=PACKAGE_DIR / "vendor" / "redoc"), name="redoc-assets")
