"""One more try on a fresh inference process for speech that has not sent a byte: every path's, HTTP's (streamed
and whole) and the voice agents'.

The inference process can die under a request (killed for memory, say). Its death reaches the speech as an
`InferenceFailed` caused by the runtime's `StateLost` (the `Runtime` protocol's word for "the process that ran this is
gone"); the lifecycle restores a fresh process for the next hold, and the speech is asked of it once. A second death,
or the model failing on this input, is the caller's error to tell.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncGenerator, AsyncIterator
from contextlib import AsyncExitStack

from app.engine import Plan, Spoken
from app.errors import InferenceFailed, Unavailable
from app.pool import Playback
from app.runtime.protocol import StateLost
from app.services import Services

log = logging.getLogger(__name__)


async def first_chunk(svc: Services, plan: Plan, stack: AsyncExitStack,
                      playback: Playback | None = None) -> tuple[Spoken, AsyncGenerator[Spoken, None]]:
    """The first chunk of ``plan`` and the generator of the rest (`Engine.stream_timed`), asked again of a fresh
    inference process (`again`) if the one it ran on died. ``stack`` closes the generator and, after a retry, the warm
    hold taken for it: the caller closes it when it is done with the rest."""
    chunks = svc.engine.stream_timed(plan, playback)
    stack.push_async_callback(chunks.aclose)
    try:
        return await chunks.__anext__(), chunks
    except InferenceFailed as exc:
        if not process_lost(svc, exc):
            raise
    return await again(svc, plan, stack, playback)


async def again(svc: Services, plan: Plan, stack: AsyncExitStack,
                playback: Playback | None = None) -> tuple[Spoken, AsyncGenerator[Spoken, None]]:
    """``plan`` from its start on a fresh inference process, for speech that has sent nothing and whose process died.
    The lifecycle's hold (`LifecycleManager.in_use`, kept on ``stack``) restores the process; if that one dies too
    before the first chunk, the speech is `Unavailable` (a 503: the instance is in trouble, another may serve it)."""
    log.warning("the inference process ended under speech that had sent nothing; asking a fresh one once")
    svc.metrics.inference_retries += 1
    await stack.enter_async_context(svc.lifecycle.in_use())
    chunks = svc.engine.stream_timed(plan, playback)
    stack.push_async_callback(chunks.aclose)
    try:
        return await chunks.__anext__(), chunks
    except InferenceFailed as exc:
        if process_lost(svc, exc):
            raise Unavailable("the inference process ended twice under this request; retry it") from exc
        raise


async def whole(svc: Services, plan: Plan, stack: AsyncExitStack, first: Spoken,
                chunks: AsyncIterator[Spoken]) -> list[Spoken]:
    """Every chunk of ``plan``, ``first`` and the rest of ``chunks``, for speech that sends nothing before its last
    (a whole response): where the process dies midway nothing has left yet, so the whole of it is asked again
    (`again`)."""
    try:
        return [first, *[spoken async for spoken in chunks]]
    except InferenceFailed as exc:
        if not process_lost(svc, exc):
            raise
    first, chunks = await again(svc, plan, stack)
    return [first, *[spoken async for spoken in chunks]]


def process_lost(svc: Services, exc: InferenceFailed) -> bool:
    """Whether ``exc`` came of the inference process ending (not of the model failing on this input)."""
    return isinstance(exc.__cause__, StateLost) or not svc.engine.runtime.intact()
