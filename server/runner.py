"""Running the app under uvicorn: a `uvicorn.Server` that ends every result stream (with an `end`
message) as soon as shutdown begins, so open subscriptions do not hold the shutdown back."""

from __future__ import annotations

import socket
from typing import Any

import uvicorn
from fastapi import FastAPI

from cqlstream.server.host import EngineHost


class Server(uvicorn.Server):
    def __init__(self, config: uvicorn.Config, host: EngineHost) -> None:
        super().__init__(config)
        self.engine_host = host

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        self.engine_host.end_streams("server stopping")
        await super().shutdown(sockets=sockets)


def serve(app: FastAPI, host: str = "127.0.0.1", port: int = 8000, **config: Any) -> None:
    """Serve `app` (from `server.app.create_app`) until SIGINT/SIGTERM."""
    config.setdefault("timeout_graceful_shutdown", 5)
    Server(uvicorn.Config(app, host=host, port=port, **config), app.state.host).run()
