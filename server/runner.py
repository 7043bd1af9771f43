"""Running the app under uvicorn: a `uvicorn.Server` that ends every result stream (with an `end`
message) as soon as shutdown begins, so open subscriptions do not hold the shutdown back, and the
connection limits of the settings (README "Limits"):

- `keep_alive_timeout`: an idle keep-alive connection is closed after this many seconds;
- `header_timeout`: a connection must send a request's complete head (request line and headers)
  within this many seconds of opening or of its previous response, else it is closed (idle sockets
  and slow headers do not stay open forever);
- `max_header_bytes`: a request head still incomplete after this many bytes is refused (400, and
  the connection closed; h11's limit on an incomplete event);
- `body_timeout` (enforced by the app, server/app.py): a body must arrive within this many seconds.
"""

from __future__ import annotations

import asyncio
import socket
from typing import Any

import uvicorn
from fastapi import FastAPI
from uvicorn.protocols.http import h11_impl
from uvicorn.protocols.http.h11_impl import H11Protocol

from cqlstream.server.host import EngineHost
from cqlstream.server.settings import Settings


class Server(uvicorn.Server):
    def __init__(self, config: uvicorn.Config, host: EngineHost) -> None:
        super().__init__(config)
        self.engine_host = host

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        self.engine_host.end_streams("server stopping")
        await super().shutdown(sockets=sockets)


def header_timeout_protocol(seconds: float) -> type[H11Protocol]:
    """uvicorn's h11 protocol, closing a connection that has not sent a complete request head within
    `seconds` of opening or of its previous response (uvicorn itself times out only idle keep-alive
    connections after a response, never a fresh or half-sent one)."""

    class HeaderTimeoutProtocol(H11Protocol):
        _head_timer: asyncio.TimerHandle | None = None

        def _arm(self) -> None:
            self._disarm()
            self._head_timer = self.loop.call_later(seconds, self._head_expired)

        def _disarm(self) -> None:
            if self._head_timer is not None:
                self._head_timer.cancel()
                self._head_timer = None

        def _head_expired(self) -> None:
            self._head_timer = None
            if self.conn.their_state is IDLE and not self.transport.is_closing():
                self.transport.close()  # no complete request head in time: nothing to answer

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            self._arm()

        def data_received(self, data: bytes) -> None:
            super().data_received(data)
            if self.conn.their_state is not IDLE:
                self._disarm()  # the head is complete: the body has its own timeout

        def on_response_complete(self) -> None:
            super().on_response_complete()
            if not self.transport.is_closing():
                self._arm()

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            super().connection_lost(exc)

    return HeaderTimeoutProtocol


IDLE = h11_impl.h11.IDLE  # h11's "waiting for a request head" state, as uvicorn's protocol sees it


def config(app: FastAPI, settings: Settings, **kw: Any) -> uvicorn.Config:
    """A uvicorn configuration for `app` with the settings' connection limits (`kw`: other options)."""
    kw.setdefault("timeout_graceful_shutdown", 5)
    kw.setdefault("timeout_keep_alive", settings.keep_alive_timeout)
    kw.setdefault("h11_max_incomplete_event_size", settings.max_header_bytes)
    kw.setdefault("http", header_timeout_protocol(settings.header_timeout))
    return uvicorn.Config(app, **kw)


def serve(app: FastAPI, host: str = "127.0.0.1", port: int = 8000, **kw: Any) -> None:
    """Serve `app` (from `server.app.create_app`) until SIGINT/SIGTERM."""
    Server(config(app, app.state.settings, host=host, port=port, **kw), app.state.host).run()
