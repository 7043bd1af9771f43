"""Running the app under uvicorn: a `uvicorn.Server` that ends every result stream (with an `end`
message) as soon as shutdown begins, so open subscriptions do not hold the shutdown back."""

from __future__ import annotations

import uvicorn


class Server(uvicorn.Server):
    def __init__(self, config: uvicorn.Config, host):
        super().__init__(config)
        self.engine_host = host

    async def shutdown(self, sockets=None) -> None:
        self.engine_host.end_streams("server stopping")
        await super().shutdown(sockets=sockets)


def serve(app, host: str = "127.0.0.1", port: int = 8000, **config) -> None:
    """Serve `app` (from `server.app.create_app`) until SIGINT/SIGTERM."""
    config.setdefault("timeout_graceful_shutdown", 5)
    Server(uvicorn.Config(app, host=host, port=port, **config), app.state.host).run()
