"""The streaming reply of `GET /queries/{id}/results`: a raw ASGI response that drains one
subscriber's buffer into the connection.

It listens for the client's disconnect while it waits for results (the subscription is released at
once), sends keep-alives on idle SSE/JSON/XML streams, and cuts off a lagged subscriber whose
client does not even read the final `lagged` message within the grace period (the connection is
then closed without a proper end).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import anyio
import numpy as np
from anyio import to_thread
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from cqlstream.io.formats import RESULT_FORMATS
from cqlstream.server.publication import ControlChunk, ResultChunk, Subscriber


class _Abandon(Exception):
    """The client stopped reading after being lagged: give up on this connection."""


class ResultsResponse(Response):
    def __init__(
        self,
        sub: Subscriber | None,
        fmt: str,
        head: bytes,
        *,
        follow: bool = True,
        limit: int | None = None,
        until: int | None = None,
        keepalive: float = 15.0,
        snapshot_chunk: ResultChunk | None = None,
        on_done: Callable[[ResultsResponse], None] | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        self.sub = sub
        self.fmt = fmt
        self.format = RESULT_FORMATS[fmt]
        self.head = head
        self.follow = follow
        self.limit = limit
        self.until = until
        self.keepalive = keepalive
        self.snapshot_chunk = snapshot_chunk
        self.on_done = on_done
        self.sent = 0
        self.status_code = 200
        self.background = None
        self.media_type = self.format.media_type
        self.raw_headers = [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in (headers or {}).items()]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [
                    (b"content-type", self.format.content_type.encode()),
                    (b"cache-control", b"no-cache"),
                    (b"x-accel-buffering", b"no"),
                    *self.raw_headers,
                ],
            }
        )
        try:
            async with anyio.create_task_group() as tg:

                async def watch_disconnect() -> None:
                    while True:
                        msg = await receive()
                        if msg["type"] == "http.disconnect":
                            tg.cancel_scope.cancel()
                            return

                tg.start_soon(watch_disconnect)
                try:
                    # one scope for the whole stream (not one per send: each costs tens of µs, per
                    # subscriber and chunk): a lag gives it a deadline, cutting off a client that
                    # does not read even the `lagged` message within the grace period
                    with anyio.CancelScope() as cs:
                        if self.sub is not None:
                            self.sub.send_scope = cs
                            if self.sub.lag_deadline is not None:  # lagged before the stream began
                                cs.deadline = self.sub.lag_deadline
                        await self._pump(send)
                    if self.sub is not None:
                        self.sub.send_scope = None
                    if cs.cancelled_caught:
                        raise _Abandon()
                    await send({"type": "http.response.body", "body": b"", "more_body": False})
                except _Abandon:
                    if self.sub is not None:
                        self.sub.fanout.cutoffs += 1
                finally:
                    tg.cancel_scope.cancel()
        finally:
            if self.sub is not None:
                self.sub.detached = True  # the host drops it at its next publish (no lock on the loop)
            if self.on_done is not None:
                self.on_done(self)

    # ------------------------------------------------------------------
    async def _send(self, send: Send, data: bytes) -> None:
        if data:
            await send({"type": "http.response.body", "body": data, "more_body": True})

    async def _emit(self, send: Send, chunk: ResultChunk) -> bool:
        """Send a chunk's elements (within until/limit); True when the stream is complete."""
        if isinstance(chunk, ControlChunk):
            await self._send(send, chunk.encoded(self.fmt))
            return False
        b = chunk.batch
        done = False
        if len(b):
            sel = None
            if self.until is not None and int(b.ts[-1]) > self.until:
                sel = np.flatnonzero(b.ts <= self.until)
            if self.limit is not None:
                room = self.limit - self.sent
                idx = np.arange(len(b)) if sel is None else sel
                if len(idx) >= room:
                    sel, done = idx[:room], True
            if sel is not None:
                chunk = ResultChunk(b.take(sel), chunk.through)
            n = len(chunk)
            if n:
                data = chunk.encoded(self.fmt) if n < 2000 else await to_thread.run_sync(chunk.encoded, self.fmt)
                await self._send(send, data)
                self.sent += n
        if self.until is not None and chunk.through is not None and chunk.through >= self.until:
            done = True
        return done

    async def _wait(self, sub: Subscriber) -> bool:
        """Wait for the engine to wake `sub`, or `keepalive` seconds: True when the time ran out.
        A loop timer that sets the event, not a cancel scope per wait (anyio's costs tens of µs, paid
        per subscriber and publish on the event loop that also serves the pushes)."""
        timed_out = False

        def ping() -> None:
            nonlocal timed_out
            timed_out = True
            sub.event.set()

        timer = asyncio.get_running_loop().call_later(self.keepalive, ping)
        try:
            await sub.event.wait()
        finally:
            timer.cancel()
        return timed_out and not (sub.pending() or sub.lagged or sub.ended)

    async def _pump(self, send: Send) -> None:
        sub = self.sub
        await self._send(send, self.head)
        if self.snapshot_chunk is not None and await self._emit(send, self.snapshot_chunk):
            return await self._send(send, self.format.footer())
        if sub is None or not self.follow:
            return await self._send(send, self.format.footer())
        if self.limit is not None and self.sent >= self.limit:
            return await self._send(send, self.format.footer())
        while True:
            chunk = sub.take()
            if chunk is not None:
                if await self._emit(send, chunk):
                    break
                continue
            if sub.lagged:
                await self._send(
                    send,
                    self.format.control(
                        "lagged",
                        {
                            "detail": f"this subscriber fell more than {sub.capacity} result elements behind and is "
                            f"disconnected; reconnect (with snapshot=true for relations) to resume"
                        },
                    ),
                )
                break
            if sub.ended:
                await self._send(send, self.format.control("end", {"detail": sub.ended}))
                break
            sub.event.clear()
            sub.waiting = True
            if sub.pending() or sub.lagged or sub.ended:
                sub.waiting = False
                continue
            idle = await self._wait(sub)
            sub.waiting = False
            if idle:
                await self._send(send, self.format.keepalive())
        await self._send(send, self.format.footer())
