"""A Wyoming server (Home Assistant's voice protocol) on ``TTS_WYOMING_PORT``, beside HTTP, on the same engine.

Events: ``describe`` -> ``info`` (one TTS program, every voice with its language); ``synthesize {text, voice}`` ->
``audio-start``, ``audio-chunk``s (16-bit mono PCM at 24 kHz), ``audio-stop``; streaming (Wyoming 1.7 on):
``synthesize-start {voice}``, ``synthesize-chunk {text}`` (pieces may break mid-word), ``synthesize-stop`` ->
``audio-start`` / ``audio-chunk`` / ``audio-stop`` for each segment as it is ready (`app.agents.stream`), then
``synthesize-stopped``. Streamed text is bounded as the sockets' is (`app.agents.stream.TEXT_PER_STREAM`): past it the
stream's speech stops, an ``error`` is sent, and its later chunks are dropped until its ``synthesize-stop``. A new
``synthesize-start`` ends the stream before it as a barge-in: its unspoken text is dropped, an open audio stream is
stopped, and no more of its audio is sent. Home Assistant sends a plain ``synthesize`` with the whole text too,
inside a stream, for servers that do not stream: it is ignored there, as wyoming-piper does. Any other event is
answered as handled (a bridge that refused unknown events broke on Home Assistant 2025.8). Errors go back as Wyoming
``error`` events.

Speech goes through `app.agents.utterance.speak`: the same admission, warm hold and schedule as HTTP and the sockets.
"""

from __future__ import annotations

import asyncio
import logging
from functools import partial

from wyoming.audio import AudioChunk, AudioStart, AudioStop
from wyoming.error import Error
from wyoming.event import Event
from wyoming.info import Attribution, Describe, Info, TtsProgram, TtsVoice
from wyoming.server import AsyncEventHandler, AsyncTcpServer
from wyoming.tts import Synthesize, SynthesizeChunk, SynthesizeStart, SynthesizeStop, SynthesizeStopped, SynthesizeVoice

from app.agents.stream import TextStream
from app.agents.utterance import Segment, speak
from app.audio import SAMPLE_RATE, to_int16
from app.engine import Spoken
from app.errors import InputTooLarge, ServiceError
from app.served import default_voice
from app.services import Services
from app.text import languages

log = logging.getLogger(__name__)

ATTRIBUTION = Attribution(name="hexgrad", url="https://huggingface.co/hexgrad/Kokoro-82M")
_AUDIO = {"rate": SAMPLE_RATE, "width": 2, "channels": 1}


def language_tag(code: str) -> str:
    """Kokoro's language as Home Assistant's Wyoming voices name theirs (``en_US``, ``es``)."""
    lang, _, region = languages.LANGUAGES[code].key.partition("-")
    return f"{lang}_{region.upper()}" if region else lang


def info(svc: Services) -> Info:
    voices = []
    for name in svc.engine.voices.names:
        found = languages.of_voice(name)
        voices.append(TtsVoice(name=name, description=f"{found.name if found else 'Kokoro'} voice {name}",
                               attribution=ATTRIBUTION, installed=True, version=None,
                               languages=[language_tag(found.code)] if found else []))
    program = TtsProgram(name="kokoro", description="Kokoro-82M on CPUs", attribution=ATTRIBUTION, installed=True,
                         version="1.0", voices=voices, supports_synthesize_streaming=True)
    return Info(tts=[program])


class Handler(AsyncEventHandler):
    """One client connection; its events are read in order on the event loop."""

    def __init__(self, svc: Services, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        super().__init__(reader, writer)
        self.svc = svc
        self._stream: TextStream | None = None
        self._queue: asyncio.Queue[Segment | None] = asyncio.Queue()
        self._speaking: asyncio.Task[None] | None = None
        self._segment: Segment | None = None
        self._refused = False
        """The stream went past its limit: its chunks are dropped until its stop."""

    async def handle_event(self, event: Event) -> bool:
        if Describe.is_type(event.type):
            await self.write_event(info(self.svc).event())
        elif SynthesizeStart.is_type(event.type):
            await self._stop_speaking()  # a barge-in: the stream before, if any, ends here
            voice = self._voice(SynthesizeStart.from_event(event).voice)
            self._stream = TextStream(self.svc.settings.max_input_chars)
            self._queue, self._segment, self._refused = asyncio.Queue(), None, False
            self._speaking = asyncio.create_task(self._speak(voice))
        elif SynthesizeChunk.is_type(event.type) and self._stream is not None and not self._refused:
            try:
                self._put(self._stream, SynthesizeChunk.from_event(event).text)
            except InputTooLarge as exc:
                self._refused = True
                await self._stop_speaking()
                await self._error(exc)
        elif SynthesizeStop.is_type(event.type) and self._stream is not None:
            if not self._refused:
                self._put(self._stream, "", flush=True)
                self._queue.put_nowait(None)
            self._stream = None
            if self._speaking is not None:
                await self._speaking
            await self.write_event(SynthesizeStopped().event())
        elif Synthesize.is_type(event.type) and self._stream is None:
            await self._synthesize(Synthesize.from_event(event))
        return True  # every other event, and a plain synthesize inside a stream, is tolerated

    async def disconnect(self) -> None:
        if self._speaking is not None:
            self._speaking.cancel()

    async def _stop_speaking(self) -> None:
        """Cancel the speech under way, if any, and wait until it has ended (a running inference finishes its chunk
        first, the pool's contract; `_speak` closes an open audio stream), so that nothing of it follows."""
        task, self._speaking = self._speaking, None
        if task is not None and not task.done():
            task.cancel()
            await asyncio.wait([task])

    def _put(self, stream: TextStream, text: str, *, flush: bool = False) -> None:
        start = stream.index
        texts = stream.flush() if flush else stream.feed(text)
        for k, piece in enumerate(texts):
            self._queue.put_nowait(Segment(piece, start + k))

    def _voice(self, wanted: SynthesizeVoice | None) -> str:
        """The voice a request names, else the first of the language it names, else the default."""
        voices = self.svc.engine.voices
        if wanted is not None and wanted.name:
            return wanted.name
        if wanted is not None and wanted.language:
            tag = wanted.language.lower().replace("_", "-")
            for name in voices.names:
                found = languages.of_voice(name)
                if found is not None and (found.key == tag or found.key.split("-")[0] == tag):
                    return name
        return default_voice(self.svc.settings, voices)

    async def _synthesize(self, request: Synthesize) -> None:
        voice = self._voice(request.voice)
        if len(request.text) > self.svc.settings.max_input_chars:
            await self._error(InputTooLarge(f"text is over the limit of {self.svc.settings.max_input_chars}"))
            return
        self._queue, self._segment = asyncio.Queue(), None
        self._queue.put_nowait(Segment(request.text, 0))
        self._queue.put_nowait(None)
        self._speaking = asyncio.create_task(self._speak(voice))
        await self._speaking

    async def _speak(self, voice: str) -> None:
        try:
            self.svc.engine.check(voice, 1.0)
            await speak(self.svc, self._queue, voice, 1.0, self._emit)
        except ServiceError as exc:
            await self._error(exc)
        except Exception:
            log.exception("wyoming synthesis failed")
            await self.write_event(Error(text="internal error", code="internal_error").event())
        finally:
            if self._segment is not None:
                self._segment = None
                await self.write_event(AudioStop().event())

    async def _emit(self, segment: Segment, spoken: Spoken, offset: int) -> None:
        if asyncio.current_task() is not self._speaking:
            return  # a stream ended by a new one: its running chunk may finish before the cancel lands; none of it goes
        if segment is not self._segment:
            if self._segment is not None:
                await self.write_event(AudioStop().event())
            self._segment = segment
            await self.write_event(AudioStart(**_AUDIO).event())
        await self.write_event(AudioChunk(audio=to_int16(spoken.audio), **_AUDIO).event())

    async def _error(self, exc: ServiceError) -> None:
        log.info("wyoming request refused: %s", exc)
        await self.write_event(Error(text=str(exc), code=exc.code).event())


async def serve(svc: Services) -> AsyncTcpServer:
    """Start listening on ``TTS_HOST``:``TTS_WYOMING_PORT``; `stop` the server returned at shutdown."""
    server = AsyncTcpServer(svc.settings.host, svc.settings.wyoming_port)
    await server.start(partial(Handler, svc))
    log.info("Wyoming server on %s:%d", svc.settings.host, svc.settings.wyoming_port)
    return server

