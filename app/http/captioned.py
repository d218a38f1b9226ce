"""``POST /dev/captioned_speech``: speech with word timestamps, in Kokoro-FastAPI's shape.

The body is the speech endpoint's (`app.http.request.SpeechRequest`), plus Kokoro-FastAPI's
``return_timestamps`` (default true). The answer is JSON, ``{"audio": <base64 of the file in
response_format>, "audio_format": <its media type>, "timestamps": [{"word", "start_time", "end_time"}]}``
with times in seconds from the start of the audio; with ``stream`` (the default, as there) it is
NDJSON instead, one such object per model chunk as it is synthesized (the audio of that chunk, the
words it holds, times still from the start of the whole response), and a last line with what the
encoder held back, if anything. FLAC is not progressive (`app.audio`): its lines carry the words and
the last one all the audio.

A model without the durations (a user's own export, `app.forms.timed`) answers 501 here, and still
speaks at ``/v1/audio/speech``.
"""

from __future__ import annotations

import base64
import json
import time
from collections.abc import AsyncIterator

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from app import audio
from app.http import speech
from app.timestamps import WordTime

MEDIA_TYPE = "application/x-ndjson"


async def create_captioned_speech(request: Request) -> Response:
    started = await speech.start(request, captioned=True)
    fmt, wanted = started.speech.response_format, started.speech.return_timestamps
    if not started.speech.stream:
        clips = [started.first.audio]
        heard = list(started.first.words or ())
        try:
            async for spoken in started.rest:
                clips.append(spoken.audio)
                heard.extend(spoken.words or ())
        finally:
            await started.stack.aclose()
        speech.observe(started.svc, started.arrived, clips, first_audio_s=time.perf_counter() - started.arrived)
        return JSONResponse(_line(audio.whole(fmt, clips), audio.FORMATS[fmt], heard if wanted else []))
    encoder = audio.Encoder(fmt, streaming=True)
    encoded = speech.pieces(started, encoder, [])
    return speech.streaming_response(started.svc, _lines(encoded, encoder.media_type, wanted), MEDIA_TYPE,
                                     {"X-Accel-Buffering": "no", "Cache-Control": "no-store"})


async def _lines(encoded: AsyncIterator[speech.Piece], media_type: str, wanted: bool) -> AsyncIterator[bytes]:
    """One JSON object per chunk (its audio, possibly none yet, and its words), then one with the encoder's tail."""
    try:
        async for data, words in encoded:
            yield json.dumps(_line(data, media_type, list(words or ()) if wanted else []),
                             separators=(",", ":")).encode() + b"\n"
    finally:
        await speech.close(encoded)


def _line(data: bytes, media_type: str, words: list[WordTime]) -> dict[str, object]:
    return {"audio": base64.b64encode(data).decode("ascii"), "audio_format": media_type,
            "timestamps": [w.public() for w in words]}


routes = [Route("/dev/captioned_speech", create_captioned_speech, methods=["POST"])]
