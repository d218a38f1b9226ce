"""Streamed text spoken through the same engine, pool and lifecycle as a request: what the voice-agent protocols share.

A voice agent's socket (`app.http.elevenlabs`, `app.agents.wyoming`) cuts the text it receives into segments
(`app.agents.stream.TextStream`) and queues them; `speak` says them in order. It holds nothing while the queue is
empty, so an idle socket neither takes an admission place nor keeps the instance warm (the lifecycle's quiet window
counts speech in flight, not open sockets). When a segment comes it is admitted like a request (`Overloaded` at once
past capacity, never a silent wait), holds the state warm (restoring it if it was released) and keeps one playback
clock for as long as segments follow each other within `GAP_S`, so a listener's later segments are scheduled by when
it would run out of audio, like the later chunks of one request.

Each segment is planned on its own (`app.engine.Engine.plan`); the first of an utterance starts with the usual small
first chunk, later ones with the next bounds of the chunker's doubling rule: their text came while earlier audio
played, and a larger chunk costs less per audio-second. The bounds depend on the segment's place in the utterance
only, so the same text gives the same audio.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass

import anyio.to_thread

from app import retry
from app.audio import SAMPLE_RATE
from app.engine import Plan, Spoken
from app.errors import InferenceFailed, InvalidInput, Unavailable
from app.pool import Playback
from app.services import Services
from app.text import chunker
from lifecycle.manager import NotReady

log = logging.getLogger(__name__)

GAP_S = 2.0
"""How long a context that has spoken waits for its next segment before it lets go of its admission place, the warm
hold and its playback clock. A reply's text comes at the writer's pace: its next sentence is usually there within a
second, and a new clock would make that sentence a new listener's first (held for real-time capacity where the pool
is busy: the listener would stall mid-reply)."""


@dataclass(frozen=True)
class Segment:
    text: str
    index: int
    """Its place in the utterance (`app.agents.stream.TextStream.index` before it): 0 is the first."""


Emit = Callable[[Segment, Spoken, int], Awaitable[None]]
"""Receives each chunk of a segment's audio with the samples of that segment sent before it; it returns once the
audio has been handed to the transport (the next chunk's deadline counts from then)."""


def first_max(index: int) -> int:
    """The first-chunk bound of an utterance's segment ``index``: the chunker's doubling rule across segments."""
    bound = 0
    for _ in range(index):
        bound = chunker.next_bound(bound, chunker.FIRST_CHUNK_TOKENS, chunker.SECOND_CHUNK_TOKENS,
                                   chunker.MAX_CHUNK_TOKENS)
    return bound or chunker.FIRST_CHUNK_TOKENS


async def speak(svc: Services, queue: asyncio.Queue[Segment | None], voice: str, speed: float, emit: Emit,
                *, lang: str | None = None) -> None:
    """Speak the segments of ``queue`` in order until it yields None. Raises `Overloaded` (admission is full),
    `Unavailable` (shutting down, or the state cannot load), `InvalidInput` and `InferenceFailed`; the caller tells
    its client and decides what follows. Cancelling the task stops a queued inference at once and a running one
    once its chunk is done (the pool's contract); nothing after that is emitted."""
    while (segment := await queue.get()) is not None:
        if svc.draining:
            raise Unavailable("the server is shutting down")
        with svc.pool.admit():
            async with _warm(svc):
                with svc.pool.playback() as clock:
                    while segment is not None:
                        await _say(svc, segment, voice, speed, lang, clock, emit)
                        try:
                            segment = await asyncio.wait_for(queue.get(), GAP_S)
                        except TimeoutError:
                            break  # a pause: admission and the warm hold are let go until the next segment
                        if segment is None:
                            return


@asynccontextmanager
async def _warm(svc: Services) -> AsyncIterator[None]:
    """`LifecycleManager.in_use`, its NotReady (the model could not be loaded) told as `Unavailable`."""
    try:
        async with svc.lifecycle.in_use():
            yield
    except NotReady as exc:
        raise Unavailable(f"the model could not be loaded: {exc}") from exc


async def _say(svc: Services, segment: Segment, voice: str, speed: float, lang: str | None, clock: Playback,
               emit: Emit) -> None:
    plan = functools.partial(svc.engine.plan, segment.text, voice, speed, lang=lang, first_max=first_max(segment.index))
    try:
        planned: Plan = await anyio.to_thread.run_sync(plan)
    except InvalidInput as exc:
        if exc.code == "empty_input":
            return  # punctuation alone ("…"): nothing to say
        raise
    offset = 0
    async with AsyncExitStack() as stack:
        try:
            first, chunks = await retry.first_chunk(svc, planned, stack, clock)
            await emit(segment, first, offset)
            offset += len(first.audio)
            async for spoken in chunks:
                await emit(segment, spoken, offset)
                offset += len(spoken.audio)
        except InferenceFailed:
            if offset:
                svc.metrics.requests.labels("cut").inc()  # its client is told (the caller's error message)
            raise
        finally:
            svc.metrics.audio_seconds.inc(offset / SAMPLE_RATE)
