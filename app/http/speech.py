"""``POST /v1/audio/speech``: OpenAI's speech endpoint, streamed in chunks.

Order matters for what a client sees: the body is read with a size cap, checked (voice, speed and
language too, so a bad request gets its 400 before it costs anything), admitted (or 429 at once), the
state restored if it was released, the text planned and the *first chunk synthesized* before the
response starts. Every error up to there is a clean 4xx/5xx; after
that the audio streams, and the slot, admission and lifecycle hold are let go in the body
iterator's ``finally``, which runs on completion, error, or client disconnect.
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import time
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from dataclasses import dataclass
from typing import Any

import anyio
import anyio.to_thread
import numpy as np
import numpy.typing as npt
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from app import audio, retry
from app.engine import Plan, Spoken
from app.errors import InferenceFailed, InputTooLarge, InvalidInput, NoTimestamps, Unavailable
from app.http.common import require_bearer, services
from app.http.request import SpeechRequest
from app.http.sending import ClosingStreamingResponse
from app.served import default_voice
from app.services import Services
from app.timestamps import WordTime

log = logging.getLogger(__name__)

BODY_OVERHEAD = 64 * 1024
"""Bytes allowed in a body beyond four per input character (JSON escapes, other fields)."""


async def _read_body(request: Request, limit: int) -> bytes:
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise InputTooLarge(f"request body is {declared} bytes; the limit is {limit}")
    body = bytearray()
    async for part in request.stream():
        body.extend(part)
        if len(body) > limit:
            raise InputTooLarge(f"request body is over the limit of {limit} bytes")
    return bytes(body)


@dataclass
class Started:
    """A request admitted, planned and with its first chunk synthesized: what a response is made of.

    ``stack`` holds the admission place, the lifecycle hold and the rest of the synthesis; whoever sends the
    response closes it (`pieces` does, at the end of the body)."""

    svc: Services
    speech: SpeechRequest
    plan: Plan
    first: Spoken
    rest: AsyncIterator[Spoken]
    stack: AsyncExitStack
    arrived: float


async def start(request: Request, *, captioned: bool = False) -> Started:
    """Read and check the body, admit it, restore if released, plan and synthesize the first chunk; every
    error up to here is a clean 4xx/5xx. ``captioned``: the request is for word timestamps
    (`app.http.captioned`): 501 where the model gives none."""
    arrived = time.perf_counter()
    svc = services(request)
    settings = svc.settings
    if settings.api_key:
        require_bearer(request, settings.api_key, "this endpoint")
    if svc.draining:
        raise Unavailable("the server is shutting down")
    raw = await _read_body(request, settings.max_input_chars * 4 + BODY_OVERHEAD)
    speech = SpeechRequest.from_body(raw, max_input_chars=settings.max_input_chars,
                                     default_voice=default_voice(settings, svc.engine.voices))
    if captioned and speech.stream_format != "audio":
        raise InvalidInput("captioned speech streams NDJSON (with 'stream'); 'stream_format' does not apply here",
                           param="stream_format")
    if captioned and speech.return_timestamps and not svc.engine.timestamps:
        raise NoTimestamps("word timestamps need a model that outputs its per-token durations; the model this "
                           "server runs (TTS_MODEL_PATH) has no duration tensor this server knows, so it can speak "
                           "(POST /v1/audio/speech) but not time its words")
    # Refused before it is admitted or wakes a released instance: a bad voice, speed or language costs nothing.
    try:
        svc.engine.check(speech.voice, speech.speed, speech.lang)
    except InvalidInput:
        svc.metrics.requests.labels("refused").inc()
        raise

    def plan() -> Plan:
        return svc.engine.plan(speech.input, speech.voice, speech.speed, lang=speech.lang, phonemes=speech.phonemes,
                               normalization=speech.normalization)

    stack = AsyncExitStack()
    try:
        stack.enter_context(svc.pool.admit())
        # Planned beside a restore where the front end stays loaded while released: after a release its pages come
        # back from disk, a small but real part of a restore (a warm plan is near instant; docs/experiments.md).
        planning = asyncio.ensure_future(anyio.to_thread.run_sync(plan)) if svc.engine.plans_while_released else None
        try:
            await stack.enter_async_context(svc.lifecycle.in_use())
        except BaseException:
            if planning is not None:
                planning.add_done_callback(_retrieved)
                planning.cancel()
            raise
        planned = await planning if planning is not None else await anyio.to_thread.run_sync(plan)
        first, chunks = await retry.first_chunk(svc, planned, stack)
    except BaseException:
        svc.metrics.requests.labels("refused").inc()
        await stack.aclose()
        raise
    return Started(svc, speech, planned, first, chunks, stack, arrived)


def _retrieved(task: asyncio.Future[Plan]) -> None:
    """Mark a plan nobody will read as seen (its error, if any, belongs to a request already refused)."""
    if not task.cancelled():
        task.exception()


async def create_speech(request: Request) -> Response:
    started = await start(request)
    svc, speech, first, chunks, stack, arrived = (started.svc, started.speech, started.first, started.rest,
                                                  started.stack, started.arrived)
    whole = not speech.stream or speech.response_format not in audio.PROGRESSIVE
    if speech.stream_format == "audio" and whole:
        # FLAC is not progressive: sent whole with exact headers and a Content-Length (see app.audio).
        # In SSE, whatever `stream` says, events stream (a non-progressive format in one delta).
        try:
            spoken = [c.audio for c in await retry.whole(svc, started.plan, stack, first, chunks)]
        finally:
            await stack.aclose()
        observe(svc, arrived, spoken, first_audio_s=time.perf_counter() - arrived)
        body = audio.whole(speech.response_format, spoken)
        return Response(body, media_type=audio.FORMATS[speech.response_format])
    encoder = audio.Encoder(speech.response_format, streaming=True)
    produced: list[int] = []
    encoded = pieces(started, encoder, produced)
    headers = {"X-Accel-Buffering": "no", "Cache-Control": "no-store"}
    if speech.stream_format == "sse":
        tokens = sum(len(svc.engine.vocab.ids(c)) for c in started.plan.chunks)
        stream, media_type = _events(encoded, tokens, produced), "text/event-stream"
    else:
        stream, media_type = _bytes(encoded), encoder.media_type
    return streaming_response(svc, stream, media_type, headers)


def streaming_response(svc: Services, stream: AsyncIterator[bytes], media_type: str,
                       headers: dict[str, str]) -> Response:
    return ClosingStreamingResponse(stream, media_type=media_type, headers=headers,
                                     send_timeout_s=svc.settings.send_timeout_s,
                                     on_send_timeout=svc.metrics.send_timeouts.inc)


Piece = tuple[bytes, tuple[WordTime, ...] | None]
"""A chunk's encoded bytes (possibly none yet: the codec may hold them) and its words' times."""


async def pieces(started: Started, encoder: audio.Encoder, produced: list[int]) -> AsyncIterator[Piece]:
    """The encoded audio, chunk by chunk, then what the encoder held back (with no words); frees the
    request's hold at the end.

    ``produced`` receives each chunk's number of samples as it is encoded.
    """
    svc, first, chunks, stack, arrived = started.svc, started.first, started.rest, started.stack, started.arrived
    produced.append(len(first.audio))
    outcome = "aborted"
    try:
        yield encoder.encode(first.audio), first.words
        svc.metrics.first_audio.observe(time.perf_counter() - arrived)
        async for spoken in chunks:
            produced.append(len(spoken.audio))
            yield encoder.encode(spoken.audio), spoken.words
        tail = encoder.finish()
        if tail:
            yield tail, None
        outcome = "ok"
    except InferenceFailed:
        outcome = "cut"  # a later chunk failed (its inference process died, say): the stream ends visibly
        raise
    finally:
        await stack.aclose()
        svc.metrics.requests.labels(outcome).inc()
        complete = outcome == "ok"
        svc.metrics.audio_seconds.inc(sum(produced) / audio.SAMPLE_RATE)
        if complete:
            svc.metrics.request_seconds.observe(time.perf_counter() - arrived)


async def _bytes(encoded: AsyncIterator[Piece]) -> AsyncIterator[bytes]:
    """The audio alone, never an empty piece."""
    try:
        async for data, _ in encoded:
            if data:
                yield data
    finally:
        await close(encoded)


async def close(iterator: AsyncIterator[Any]) -> None:
    close = getattr(iterator, "aclose", None)
    if close is not None:
        await close()


FRAME_SAMPLES = 600
"""Kokoro's duration unit (25 ms): what ``usage.output_tokens`` counts."""

WORDS_EVENT = "speech.audio.timestamps"
"""Our event (not OpenAI's): the words of the audio sent so far, when they are heard."""


async def _events(encoded: AsyncIterator[Piece], input_tokens: int, produced: list[int]) -> AsyncIterator[bytes]:
    """OpenAI's speech events: ``speech.audio.delta`` per piece of audio, then ``speech.audio.done``; after
    each chunk's delta, where the model gives word timings, a `WORDS_EVENT` with that chunk's words (a
    client that does not know the type skips it, as OpenAI's own clients do).

    ``usage`` counts phoneme tokens in and 25 ms audio frames out (Kokoro's own units; OpenAI's
    are its model's tokens, which Kokoro has none of).
    """
    try:
        async for data, words in encoded:
            if data:
                yield _event({"type": "speech.audio.delta", "audio": base64.b64encode(data).decode("ascii")})
            if words:
                yield _event({"type": WORDS_EVENT, "timestamps": [w.public() for w in words]})
    except InferenceFailed as exc:
        # A cut the client can read: an ``error`` event (OpenAI's streams end in one) and no ``done``.
        yield _event({"type": "error", "error": {"message": str(exc), "type": "server_error", "param": None,
                                                 "code": exc.code}})
        return
    finally:
        await close(encoded)
    output_tokens = -(-sum(produced) // FRAME_SAMPLES)
    yield _event({"type": "speech.audio.done", "usage": {"input_tokens": input_tokens, "output_tokens": output_tokens,
                                                         "total_tokens": input_tokens + output_tokens}})


def _event(payload: dict[str, object]) -> bytes:
    return b"data: " + json.dumps(payload, separators=(",", ":")).encode() + b"\n\n"


def observe(svc: Services, arrived: float, chunks: list[npt.NDArray[np.float32]], first_audio_s: float) -> None:
    svc.metrics.requests.labels("ok").inc()
    svc.metrics.audio_seconds.inc(sum(len(c) for c in chunks) / audio.SAMPLE_RATE)
    svc.metrics.first_audio.observe(first_audio_s)
    svc.metrics.request_seconds.observe(time.perf_counter() - arrived)


routes = [Route("/v1/audio/speech", create_speech, methods=["POST"])]
