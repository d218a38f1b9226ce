"""ElevenLabs' input-streaming WebSockets: ``/v1/text-to-speech/{voice_id}/stream-input`` and ``multi-stream-input``.

What the agent frameworks send (their clients take our URL): the ``elevenlabs`` SDK's realtime call, Pipecat's
``ElevenLabsTTSService`` and LiveKit's ElevenLabs plugin. Query: ``output_format`` (`app.output`),
``inactivity_timeout`` (seconds, default 20, at most 180), ``auto_mode`` (true: each text message is a whole sentence
or phrase, spoken as it comes, as Pipecat sends them; else text is cut at natural boundaries, `app.text.stream`);
``model_id``, ``sync_alignment`` and any other field are accepted and ignored. The key: ``xi-api-key`` or a bearer.

Client messages (JSON text): ``{"text": " ", "voice_settings": {"speed"}}`` opens; ``{"text": "piece "}`` adds text
(``"flush": true`` speaks what is buffered now); ``{"text": ""}`` ends the input (single stream) or keeps a context
alive (multi). Multi adds ``context_id`` on each message, ``{"context_id", "close_context": true}`` and
``{"close_socket": true}``. Server messages: ``{"audio": base64, "alignment", "normalizedAlignment"}`` per chunk,
then ``{"isFinal": true}``; ``contextId`` on each in multi; errors as ``{"message", "error", "code"}``.

``close_context`` right after a ``flush`` of the same context (what Pipecat sends when a reply is complete) lets the
flushed text finish, then sends ``isFinal``; any other ``close_context`` is a barge-in: the context's queued
inference is dropped, its running chunk's audio discarded, and no audio of it is sent after the message is read.
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
from typing import Any

from starlette.responses import JSONResponse
from starlette.routing import WebSocketRoute
from starlette.websockets import WebSocket, WebSocketDisconnect, WebSocketState

from app import alignment
from app.engine import Spoken
from app.errors import InputTooLarge, InvalidInput, ServiceError
from app.http.auth import bearer_matches
from app.output import DEFAULT, Output, OutputFormat
from app.services import Services
from app.text.stream import TextStream
from app.utterance import Segment, speak

log = logging.getLogger(__name__)

MAX_CONTEXTS = 5
"""Contexts open at once on one socket (ElevenLabs' limit); a sixth is refused with an error."""
INACTIVITY_S = 20.0
MAX_INACTIVITY_S = 180.0
POLL_S = 0.25
"""How often the reader looks up from the socket to check the inactivity timer."""
MESSAGE_OVERHEAD = 4096
"""Bytes a message may hold beyond four per character of the input limit."""


class _Refused(Exception):
    """Ends the socket with an error message and a close code."""

    def __init__(self, message: str, error: str, code: int = 1008) -> None:
        super().__init__(message)
        self.error = error
        self.code = code


class _Session:
    """One socket: its contexts and the one writer. Everything runs on the event loop."""

    def __init__(self, ws: WebSocket, svc: Services, voice: str, fmt: OutputFormat, multi: bool) -> None:
        self.ws, self.svc, self.voice, self.format, self.multi = ws, svc, voice, fmt, multi
        self.contexts: dict[str, _Context] = {}
        self.last_activity = asyncio.get_running_loop().time()
        self.finished = asyncio.Event()
        """Set when the socket is to close: a single stream's input ended and was spoken, or it failed."""
        self.close_code = 1000
        self.inactivity_s = INACTIVITY_S
        self.auto_mode = False
        """Each text message is a whole sentence or phrase, spoken as it comes (ElevenLabs' ``auto_mode``)."""
        self._lock = asyncio.Lock()

    async def send(self, payload: dict[str, Any], context: _Context | None = None) -> None:
        async with self._lock:
            if context is not None and context.cancelled:
                return  # barge-in: nothing of a closed context leaves after its close was read
            if context is not None and self.multi:
                payload["contextId"] = context.id
            if self.ws.application_state is WebSocketState.CONNECTED:
                await self.ws.send_text(json.dumps(payload, separators=(",", ":")))
            self.last_activity = asyncio.get_running_loop().time()

    async def error(self, message: str, error: str, context: _Context | None = None, code: int = 1008) -> None:
        await self.send({"message": message, "error": error, "code": code}, context)

    def context(self, cid: str, message: dict[str, Any]) -> _Context | None:
        found = self.contexts.get(cid)
        if found is None:
            if len(self.contexts) >= MAX_CONTEXTS:
                return None
            found = self.contexts[cid] = _Context(self, cid, _speed(message))
        return found

    async def stop_all(self) -> None:
        """Cancel every context and wait for each (a running inference ends its chunk first: the pool's contract)."""
        contexts, self.contexts = list(self.contexts.values()), {}
        for context in contexts:
            context.cancel()
        if contexts:
            await asyncio.wait([c.task for c in contexts], timeout=30)


class _Context:
    """One stream of text and its audio: a `TextStream`, the queue of its segments and the task that speaks them."""

    def __init__(self, session: _Session, cid: str, speed: float) -> None:
        self.session, self.id, self.speed = session, cid, speed
        self.stream = TextStream(session.svc.settings.max_input_chars)
        self.queue: asyncio.Queue[Segment | None] = asyncio.Queue()
        self.output = Output(session.format)
        self.cancelled = False
        self.ending = False
        self.flushed = False
        """The last message for this context was a flush (a close now lets the flushed text finish)."""
        self.cursor = 0
        """Where the next chunk's words are looked for in its segment's text (`app.alignment.characters`)."""
        self.task = asyncio.create_task(self._run(), name=f"elevenlabs-context-{cid}")

    def add(self, text: str, flush: bool) -> None:
        start = self.stream.index
        segments = self.stream.feed(text)
        if self.session.auto_mode and text.strip():
            segments += self.stream.cut()
        if flush:
            segments += self.stream.flush()
        for k, piece in enumerate(segments):
            self.queue.put_nowait(Segment(piece, start + k))
        self.flushed = flush

    def end(self) -> None:
        """The input is complete: speak the rest, then send isFinal."""
        if not self.ending:
            self.add("", flush=True)
            self.ending = True
            self.queue.put_nowait(None)

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
        except WebSocketDisconnect:
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


def _speed(message: dict[str, Any]) -> float:
    settings = message.get("voice_settings")
    speed = settings.get("speed") if isinstance(settings, dict) else None
    return float(speed) if isinstance(speed, int | float) and not isinstance(speed, bool) else 1.0


async def stream_input(ws: WebSocket) -> None:
    await _serve(ws, multi=False)


async def multi_stream_input(ws: WebSocket) -> None:
    await _serve(ws, multi=True)


async def _serve(ws: WebSocket, *, multi: bool) -> None:
    svc: Services = ws.state.services
    key = svc.settings.api_key
    given = ws.headers.get("xi-api-key")
    if key and not bearer_matches(f"Bearer {given}" if given else ws.headers.get("authorization", ""), key):
        body = {"error": {"message": "this endpoint needs the key in 'xi-api-key' or 'Authorization: Bearer'",
                          "type": "authentication_error", "param": None, "code": "unauthorized"}}
        if "websocket.http.response" in ws.scope.get("extensions", {}):
            await ws.send_denial_response(JSONResponse(body, status_code=401))
        else:
            await ws.close(1008, "unauthorized")
        return
    await ws.accept()
    try:
        session = _open(ws, svc, multi)
    except _Refused as exc:
        await _refuse(ws, exc)
        return
    try:
        await _read(session)
    except _Refused as exc:
        await session.stop_all()
        await _refuse(ws, exc)
    finally:
        await session.stop_all()
        if ws.application_state is WebSocketState.CONNECTED:
            await ws.close(session.close_code)


def _open(ws: WebSocket, svc: Services, multi: bool) -> _Session:
    voice = ws.path_params["voice_id"]
    query = ws.query_params
    if svc.draining:
        raise _Refused("the server is shutting down", "unavailable", 1013)
    try:
        svc.engine.check(voice, 1.0)
    except InvalidInput as exc:
        raise _Refused(str(exc), exc.code) from exc
    try:
        fmt = OutputFormat.parse(query.get("output_format", DEFAULT))
    except ValueError as exc:
        raise _Refused(str(exc), "invalid_output_format") from exc
    try:
        inactivity = float(query.get("inactivity_timeout", INACTIVITY_S))
    except ValueError as exc:
        raise _Refused("inactivity_timeout must be a number of seconds", "invalid_value") from exc
    if not 0 < inactivity <= MAX_INACTIVITY_S:
        raise _Refused(f"inactivity_timeout must be above 0 and at most {MAX_INACTIVITY_S:g}", "invalid_value")
    session = _Session(ws, svc, voice, fmt, multi)
    session.inactivity_s = inactivity
    session.auto_mode = query.get("auto_mode", "").strip().lower() == "true"
    return session


async def _refuse(ws: WebSocket, exc: _Refused) -> None:
    if ws.application_state is WebSocketState.CONNECTED:
        try:
            await ws.send_text(json.dumps({"message": str(exc), "error": exc.error, "code": exc.code}))
            await ws.close(exc.code, str(exc)[:120])
        except (WebSocketDisconnect, RuntimeError):
            pass


async def _read(session: _Session) -> None:
    ws, loop = session.ws, asyncio.get_running_loop()
    limit = session.svc.settings.max_input_chars * 4 + MESSAGE_OVERHEAD
    inactivity = session.inactivity_s
    receiving: asyncio.Task[Any] | None = None
    try:
        while not session.finished.is_set():
            if receiving is None:
                receiving = asyncio.ensure_future(ws.receive())
            finished = asyncio.ensure_future(session.finished.wait())
            done, _ = await asyncio.wait({receiving, finished}, timeout=POLL_S, return_when=asyncio.FIRST_COMPLETED)
            finished.cancel()
            if receiving not in done:
                if loop.time() - session.last_activity >= inactivity and not any(
                        not c.queue.empty() for c in session.contexts.values()):
                    raise _Refused(f"no text for {inactivity:g} s (inactivity_timeout); closing",
                                   "input_timeout_exceeded")
                continue
            message, receiving = receiving.result(), None
            if message["type"] == "websocket.disconnect":
                return
            session.last_activity = loop.time()
            if message.get("bytes") is not None:
                raise _Refused("binary frames are not part of this protocol: send JSON text", "invalid_message", 1003)
            text = message.get("text") or ""
            if len(text) > limit:
                raise _Refused(f"a message is over the limit of {limit} bytes", "message_too_large", 1009)
            try:
                parsed = json.loads(text)
            except ValueError as exc:
                raise _Refused(f"a message is not valid JSON: {exc}", "invalid_message") from exc
            if not isinstance(parsed, dict):
                raise _Refused("a message must be a JSON object", "invalid_message")
            if await _handle(session, parsed):
                return
    finally:
        if receiving is not None:
            receiving.cancel()


async def _handle(session: _Session, message: dict[str, Any]) -> bool:
    """Act on one client message; True when the socket is to close."""
    if message.get("close_socket") is True:
        return True
    cid = str(message.get("context_id") or "") if session.multi else ""
    cid = cid or ("default" if session.multi else "")
    text = message.get("text")
    if text is not None and not isinstance(text, str):
        raise _Refused("'text' must be a string", "invalid_message")
    if session.multi and message.get("close_context") is True:
        context = session.contexts.pop(cid, None)
        if context is not None:
            if context.flushed and not context.cancelled:
                context.end()  # a reply complete: the flushed text finishes, then isFinal
                session.contexts[cid] = context
            else:
                context.cancel()
                await session.send({"isFinal": True, "contextId": cid})
        return False
    if text == "" and session.multi and not message.get("flush"):
        return False  # keep-alive
    if cid not in session.contexts and not text and not message.get("flush"):
        return False
    context = session.context(cid, message)
    if context is None:
        await session.send({"message": f"at most {MAX_CONTEXTS} contexts may be open on one socket; close one first",
                            "error": "max_active_conversations", "code": 1008, "contextId": cid})
        return False
    if context.ending:
        return False
    if text == "":
        context.end()
        return False
    if text is not None or message.get("flush"):
        try:
            context.add(text or "", bool(message.get("flush")))
        except InputTooLarge as exc:
            if not session.multi:
                raise _Refused(str(exc), exc.code) from exc
            await session.error(str(exc), exc.code, context)
            session.contexts.pop(cid, None)
            context.cancel()
            await session.send({"isFinal": True, "contextId": cid})
    return False


routes = [WebSocketRoute("/v1/text-to-speech/{voice_id}/stream-input", stream_input),
          WebSocketRoute("/v1/text-to-speech/{voice_id}/multi-stream-input", multi_stream_input)]
