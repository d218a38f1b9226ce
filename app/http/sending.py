"""The streaming response of speech: its body iterator is closed in every case, and a client that takes no bytes is
cut (`ClosingStreamingResponse`)."""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import anyio
from starlette.responses import StreamingResponse
from starlette.types import Message, Receive, Scope, Send

from app.http.progress import Progress

log = logging.getLogger(__name__)

PROGRESS_POLL_S = 0.5
"""How often the client's byte count is read while a response streams."""


class ClosingStreamingResponse(StreamingResponse):
    """Closes the body iterator in every case, so its ``finally`` frees the slot at once.

    While the body streams, a watcher reads the client's byte count (`app.http.progress`) every `PROGRESS_POLL_S`:
    once the client has acknowledged nothing for ``send_timeout_s`` while bytes wait for it in the kernel (or, where
    the count cannot be read, once one send has waited that long), the response is aborted: the iterator is closed,
    so synthesis stops and the admission place is freed, ``on_send_timeout`` is called, and the connection is reset
    rather than left holding its unsent bytes until the client reads.

    Why watch the count and not only the sends: on loopback the kernel takes megabytes of a connection nobody reads
    before a send waits at all, and a server slower than its listener (a slow CPU) takes minutes to write that much,
    holding its place all the while. A client that reads, however slowly, acknowledges bytes; one whose bytes have all
    been acknowledged is waiting for the server, not stalled."""

    def __init__(self, content: AsyncIterator[bytes], *, send_timeout_s: float = 0.0,
                 on_send_timeout: Callable[[], None] | None = None, **kwargs: Any) -> None:
        super().__init__(content, **kwargs)
        self.send_timeout_s = send_timeout_s
        self.on_send_timeout = on_send_timeout
        self._progress: Progress | None = None
        self._waiting: list[float] = []
        """When the send that waits now began (one at most: the response sends one message at a time)."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        stalled = False
        try:
            if self.send_timeout_s <= 0:
                await super().__call__(scope, receive, send)
                return
            async with anyio.create_task_group() as group:
                async def watch() -> None:
                    nonlocal stalled
                    stalled = await self._stall(scope)
                    group.cancel_scope.cancel()

                group.start_soon(watch)
                await super().__call__(scope, receive, self._tracked(send))
                group.cancel_scope.cancel()
            if stalled:
                log.warning("aborted a response to %s: the client took no bytes for %.0f s (TTS_SEND_TIMEOUT_S)",
                            _client(scope), self.send_timeout_s)
                if self._progress is not None:
                    self._progress.drop()
                if self.on_send_timeout is not None:
                    self.on_send_timeout()
        finally:
            if self._progress is not None:
                self._progress.close()
            close = getattr(self.body_iterator, "aclose", None)
            if close is not None:
                await close()

    def _tracked(self, send: Send) -> Send:
        async def tracked(message: Message) -> None:
            self._waiting.append(time.monotonic())
            try:
                await send(message)
            finally:
                self._waiting.pop()

        return tracked

    async def _stall(self, scope: Scope) -> bool:
        """Returns (True) once the client has stalled (the class docstring); runs until cancelled otherwise."""
        await anyio.sleep(PROGRESS_POLL_S)
        self._progress = Progress.find(scope.get("server"), scope.get("client"))
        progress = self._progress
        last = progress.acked() if progress is not None else 0
        since = time.monotonic()
        while True:
            await anyio.sleep(PROGRESS_POLL_S)
            now = time.monotonic()
            if progress is not None:
                acked = progress.acked()
                if acked != last or progress.unacked() == 0:
                    since = now  # it took bytes, or has all it was sent: the server is the one behind
                last = acked
            else:
                since = self._waiting[0] if self._waiting else now
            if now - since >= self.send_timeout_s:
                return True


def _client(scope: Scope) -> str:
    client = scope.get("client")
    return f"{client[0]}:{client[1]}" if client else "a client"
