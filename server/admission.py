"""Backpressure on input: when the engine is behind (one engine call busy longer than
`max_engine_lag`, or `max_pending_pushes` pushes in flight), a push or heartbeat is answered 429 with
`Retry-After` before its body is read, instead of queueing without bound behind the engine lock."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from starlette.types import ASGIApp, Receive, Scope, Send

from cqlstream.server.problems import ProblemError

if TYPE_CHECKING:
    from cqlstream.server.host import EngineHost

INPUT_PATH = re.compile(r"^/streams/[^/]+/(tuples|heartbeat)$")


class Admission:
    """ASGI middleware counting input requests in flight (`host.pending_pushes`) and refusing new
    ones while `host.behind()` says the engine is behind."""

    def __init__(self, app: ASGIApp, host: EngineHost) -> None:
        self.app = app
        self.host = host

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "POST" or not INPUT_PATH.match(scope["path"]):
            return await self.app(scope, receive, send)
        host = self.host
        why = host.behind()
        if why is not None:
            host.busy_replies += 1
            retry = str(host.settings.retry_after)
            p = ProblemError(429, "engine_busy", f"the engine is behind: {why}; retry in {retry} s", retry_after=retry)
            await p.response({"Retry-After": retry, "Connection": "close"})(scope, receive, send)
            return
        host.pending_pushes += 1  # the event loop's thread only: no lock needed
        try:
            await self.app(scope, receive, send)
        finally:
            host.pending_pushes -= 1
