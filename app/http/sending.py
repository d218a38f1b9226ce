"""The streaming response of speech: its body iterator is closed in every case, and a send to a client that takes no
bytes is timed out (`ClosingStreamingResponse`)."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable
from typing import Any

import anyio
from starlette.responses import StreamingResponse
from starlette.types import Message, Receive, Scope, Send

from app.http.progress import Progress

log = logging.getLogger(__name__)

PROGRESS_POLL_S = 0.5
"""How often a waiting send reads the client's byte count (most sends never wait this long)."""


class _SendTimeout(Exception):
    """The client took no bytes for the send timeout."""


class ClosingStreamingResponse(StreamingResponse):
    """Closes the body iterator in every case, so its ``finally`` frees the slot at once.

    A send of the body waits while the client reads nothing (uvicorn's flow control). While it waits,
    the client's byte count (`app.http.progress`) is read every `PROGRESS_POLL_S`; once it has not
    moved for ``send_timeout_s`` (or, where the count cannot be read, once one send has waited that
    long) the response is aborted: the iterator is closed, so synthesis stops and the admission place
    is freed, ``on_send_timeout`` is called, and the connection is reset rather than left holding its
    unsent bytes until the client reads."""

    def __init__(self, content: AsyncIterator[bytes], *, send_timeout_s: float = 0.0,
                 on_send_timeout: Callable[[], None] | None = None, **kwargs: Any) -> None:
        super().__init__(content, **kwargs)
        self.send_timeout_s = send_timeout_s
        self.on_send_timeout = on_send_timeout
        self._progress: Progress | None = None
        self._looked_up = False

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, self._timed(scope, send) if self.send_timeout_s > 0 else send)
        except _SendTimeout:
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

    def _timed(self, scope: Scope, send: Send) -> Send:
        async def timed_send(message: Message) -> None:
            stalled = False
            async with anyio.create_task_group() as group:
                async def watch() -> None:
                    nonlocal stalled
                    stalled = await self._stall(scope)
                    group.cancel_scope.cancel()

                group.start_soon(watch)
                await send(message)
                group.cancel_scope.cancel()
            if stalled:
                raise _SendTimeout

        return timed_send

    async def _stall(self, scope: Scope) -> bool:
        """Returns (True) once the client has taken no bytes for the timeout while one send waits."""
        waited = 0.0
        await anyio.sleep(PROGRESS_POLL_S)
        if not self._looked_up:
            self._looked_up = True
            self._progress = Progress.find(scope.get("server"), scope.get("client"))
        last = self._progress.acked() if self._progress is not None else 0
        while True:
            await anyio.sleep(PROGRESS_POLL_S)
            now = self._progress.acked() if self._progress is not None else 0
            waited = 0.0 if now != last else waited + PROGRESS_POLL_S
            last = now
            if waited >= self.send_timeout_s:
                return True


def _client(scope: Scope) -> str:
    client = scope.get("client")
    return f"{client[0]}:{client[1]}" if client else "a client"
