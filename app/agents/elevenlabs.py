"""ElevenLabs' input-streaming protocol: a socket's contexts and what each client message does to them.

Transport-free: `Session` sends through the function it is given (`app.http.elevenlabs` carries it over a Starlette
WebSocket and reads the frames), so the protocol reads as one table. Client messages (JSON text):
``{"text": " ", "voice_settings": {"speed"}}`` opens; ``{"text": "piece "}`` adds text (``"flush": true`` speaks what
is buffered now); ``{"text": ""}`` ends the input (single stream) or keeps a context alive (multi). Multi adds
``context_id`` on each message, ``{"context_id", "close_context": true}`` and ``{"close_socket": true}``. Server
messages: ``{"audio": base64, "alignment", "normalizedAlignment"}`` per chunk, then ``{"isFinal": true}``;
``contextId`` on each in multi; errors as ``{"message", "error", "code"}``.

Each context is in one `State`; each message is one `Kind`; `TRANSITIONS` says what a kind does in each state.
``close_context`` right after a ``flush`` of the same context (what Pipecat sends when a reply is complete) lets the
flushed text finish, then sends ``isFinal``; any other ``close_context`` is a barge-in: the context's queued
inference is dropped, its running chunk's audio discarded, and no audio of it is sent after the message is read.
"""

from __future__ import annotations

import asyncio
import base64
import enum
import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from app.agents import alignment
from app.agents.output import OutputFormat
from app.agents.stream import TextStream
from app.agents.utterance import Segment, speak
from app.engine import Spoken
from app.errors import InputTooLarge, ServiceError
from app.services import Services

log = logging.getLogger(__name__)

MAX_CONTEXTS = 5
"""Contexts open at once on one socket (ElevenLabs' limit); a sixth is refused with an error."""


class Refused(Exception):
    """Ends the socket with an error message and a close code."""

    def __init__(self, message: str, error: str, code: int = 1008) -> None:
        super().__init__(message)
        self.error = error
        self.code = code


class State(enum.Enum):
    OPEN = "open"
    """Taking text; its segments are spoken as they complete."""
    FLUSHED = "flushed"
    """Taking text, and its last message was a flush: a close now lets the flushed text finish."""
    ENDING = "ending"
    """Its input is complete: the rest is spoken, then ``isFinal``; later text is dropped."""


class Kind(enum.Enum):
    TEXT = "text"
    """Text to add, or a flush."""
    END = "end"
    """``{"text": ""}``: the input is complete (single stream, or multi with a flush); a keep-alive (multi)."""
    CLOSE = "close"
    """``close_context`` (multi)."""


class Session:
    """One socket: its contexts and the one writer. Everything runs on the event loop.

    ``send_text`` writes one message; ``connected`` says whether the socket still takes one."""

    def __init__(self, svc: Services, voice: str, fmt: OutputFormat, *, multi: bool, auto_mode: bool,
                 send_text: Callable[[str], Awaitable[None]], connected: Callable[[], bool]) -> None:
        self.svc, self.voice, self.format, self.multi, self.auto_mode = svc, voice, fmt, multi, auto_mode
        """``auto_mode``: each text message is a whole sentence or phrase, spoken as it comes (ElevenLabs')."""
        self._send_text, self._connected = send_text, connected
        self.contexts: dict[str, Context] = {}
        self.last_activity = asyncio.get_running_loop().time()
        self.finished = asyncio.Event()
        """Set when the socket is to close: a single stream's input ended and was spoken, or it failed."""
        self.close_code = 1000
        self._lock = asyncio.Lock()

    async def send(self, payload: dict[str, Any], context: Context | None = None) -> None:
        async with self._lock:
            if context is not None and context.cancelled:
                return  # barge-in: nothing of a closed context leaves after its close was read
            if context is not None and self.multi:
                payload["contextId"] = context.id
            if self._connected():
                await self._send_text(json.dumps(payload, separators=(",", ":")))
            self.last_activity = asyncio.get_running_loop().time()

    async def error(self, message: str, error: str, context: Context | None = None, code: int = 1008) -> None:
        await self.send({"message": message, "error": error, "code": code}, context)

    def speaking(self) -> bool:
        """Whether a context has segments waiting (the inactivity timer does not run then)."""
        return any(not c.queue.empty() for c in self.contexts.values())

    async def stop_all(self) -> None:
        """Cancel every context and wait for each (a running inference ends its chunk first: the pool's contract)."""
        contexts, self.contexts = list(self.contexts.values()), {}
        for context in contexts:
            context.cancel()
        if contexts:
            await asyncio.wait([c.task for c in contexts], timeout=30)

    async def handle(self, message: dict[str, Any]) -> bool:
        """Act on one client message; True when the socket is to close."""
        if message.get("close_socket") is True:
            return True
        text = message.get("text")
        if text is not None and not isinstance(text, str):
            raise Refused("'text' must be a string", "invalid_message")
        cid = (str(message.get("context_id") or "") or "default") if self.multi else ""
        flush = bool(message.get("flush"))
        kind = (Kind.CLOSE if self.multi and message.get("close_context") is True
                else Kind.END if text == "" else Kind.TEXT)
        if kind is Kind.TEXT and text is None and not flush:
            return False  # neither text nor a flush: nothing to do
        context = self.contexts.get(cid)
        if context is None:
            if kind is Kind.CLOSE or not (text or flush):
                return False  # nothing to close, and a keep-alive keeps nothing
            if len(self.contexts) >= MAX_CONTEXTS:
                await self.send({"message": f"at most {MAX_CONTEXTS} contexts may be open on one socket; close one "
                                 "first", "error": "max_active_conversations", "code": 1008, "contextId": cid})
                return False
            context = self.contexts[cid] = Context(self, cid, _speed(message))
        await TRANSITIONS[context.state, kind](context, text or "", flush)
        return False


class Context:
    """One stream of text and its audio: a `TextStream`, the queue of its segments and the task that speaks them."""

    def __init__(self, session: Session, cid: str, speed: float) -> None:
        self.session, self.id, self.speed = session, cid, speed
        self.state = State.OPEN
        self.stream = TextStream(session.svc.settings.max_input_chars)
        self.queue: asyncio.Queue[Segment | None] = asyncio.Queue()
        self.output = session.format.encoder()
        self.cancelled = False
        self.cursor = 0
        """Where the next chunk's words are looked for in its segment's text (`app.agents.alignment.characters`)."""
        self.task = asyncio.create_task(self._run(), name=f"elevenlabs-context-{cid}")

    # --- the transitions (`TRANSITIONS`) -------------------------------------------------------------------------

    async def add(self, text: str, flush: bool) -> None:
        """OPEN/FLUSHED + TEXT: the segments the text completes are queued; past the stream's limit, a single stream
        is refused, a multi context alone ends."""
        try:
            start = self.stream.index
            segments = self.stream.feed(text)
        except InputTooLarge as exc:
            if not self.session.multi:
                raise Refused(str(exc), exc.code) from exc
            await self.session.error(str(exc), exc.code, self)
            await self.barge_in()
            return
        if self.session.auto_mode and text.strip():
            segments += self.stream.cut()
        if flush:
            segments += self.stream.flush()
        for k, piece in enumerate(segments):
            self.queue.put_nowait(Segment(piece, start + k))
        self.state = State.FLUSHED if flush else State.OPEN

    async def end(self, text: str = "", flush: bool = True) -> None:
        """The input is complete: the rest is spoken, then isFinal (FLUSHED + CLOSE: a reply complete)."""
        start = self.stream.index
        for k, piece in enumerate(self.stream.flush()):
            self.queue.put_nowait(Segment(piece, start + k))
        self.queue.put_nowait(None)
        self.state = State.ENDING

    async def end_or_keep(self, text: str, flush: bool) -> None:
        """OPEN/FLUSHED + END (``{"text": ""}``): a single stream's input ends, and a multi context's with a flush;
        without one, a multi context's is a keep-alive."""
        if not self.session.multi or flush:
            await self.end()

    async def barge_in(self, text: str = "", flush: bool = False) -> None:
        """OPEN + CLOSE: its speech stops now, and ``isFinal`` says so."""
        if self.session.contexts.get(self.id) is self:
            del self.session.contexts[self.id]
        self.cancel()
        await self.session.send({"isFinal": True, "contextId": self.id})

    async def ignore(self, text: str, flush: bool) -> None:
        """ENDING + anything: it is speaking its rest and takes no more."""

    # --- the speech -------------------------------------------------------------------------------------------------

    def cancel(self) -> None:
        self.cancelled = True
        self.task.cancel()

    async def _emit(self, segment: Segment, spoken: Spoken, offset: int) -> None:
        data = self.output.encode(spoken.audio)
        if offset == 0:
            self.cursor = 0  # a new segment: its words are looked for in its own text
        timed, self.cursor = alignment.characters(spoken.words, offset=offset, samples=len(spoken.audio),
                                                  source=segment.text, cursor=self.cursor)
        await self.session.send({"audio": base64.b64encode(data).decode("ascii") if data else None,
                                 "alignment": timed, "normalizedAlignment": timed}, self)

    async def _run(self) -> None:
        session = self.session
        try:
            await speak(session.svc, self.queue, session.voice, self.speed, self._emit)
            tail = self.output.finish()
            if tail:
                await session.send({"audio": base64.b64encode(tail).decode("ascii"), "alignment": None,
                                    "normalizedAlignment": None}, self)
            await session.send({"isFinal": True}, self)
        except ConnectionError:
            pass
        except Exception as exc:  # told to this context alone, never a silent stall; the socket's others go on
            code = exc.code if isinstance(exc, ServiceError) else "internal_error"
            log.log(logging.INFO if code != "internal_error" else logging.ERROR, "context %r ended: %r", self.id, exc)
            await session.error(str(exc) if code != "internal_error" else "internal error", code, self)
            await session.send({"isFinal": True}, self)
            if not session.multi:
                session.close_code = 1013 if code in ("overloaded", "unavailable") else 1011
        finally:
            if session.contexts.get(self.id) is self:
                del session.contexts[self.id]
            if not session.multi:
                session.finished.set()


Transition = Callable[[Context, str, bool], Awaitable[None]]

TRANSITIONS: dict[tuple[State, Kind], Transition] = {
    (State.OPEN, Kind.TEXT): Context.add,
    (State.OPEN, Kind.END): Context.end_or_keep,
    (State.OPEN, Kind.CLOSE): Context.barge_in,
    (State.FLUSHED, Kind.TEXT): Context.add,
    (State.FLUSHED, Kind.END): Context.end_or_keep,
    (State.FLUSHED, Kind.CLOSE): Context.end,  # a reply complete: the flushed text finishes, then isFinal
    (State.ENDING, Kind.TEXT): Context.ignore,
    (State.ENDING, Kind.END): Context.ignore,
    (State.ENDING, Kind.CLOSE): Context.ignore,
}
"""What each message does to a context in each state; every pair is listed."""


def _speed(message: dict[str, Any]) -> float:
    settings = message.get("voice_settings")
    speed = settings.get("speed") if isinstance(settings, dict) else None
    return float(speed) if isinstance(speed, int | float) and not isinstance(speed, bool) else 1.0
