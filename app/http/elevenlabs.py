"""ElevenLabs' input-streaming WebSockets: ``/v1/text-to-speech/{voice_id}/stream-input`` and ``multi-stream-input``.

What the agent frameworks send (their clients take our URL): the ``elevenlabs`` SDK's realtime call, Pipecat's
``ElevenLabsTTSService`` and LiveKit's ElevenLabs plugin. Query: ``output_format`` (`app.agents.output`),
``inactivity_timeout`` (seconds, default 20, at most 180), ``auto_mode`` (true: each text message is a whole sentence
or phrase, spoken as it comes, as Pipecat sends them; else text is cut at natural boundaries, `app.agents.stream`);
``model_id``, ``sync_alignment`` and any other field are accepted and ignored. The key: ``xi-api-key`` or a bearer.

This module is the socket: the key at the door, the query, reading frames (size, JSON, inactivity) and the close.
What the messages mean is `app.agents.elevenlabs`.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from starlette.responses import JSONResponse
from starlette.routing import WebSocketRoute
from starlette.websockets import WebSocket, WebSocketDisconnect, WebSocketState

from app.agents.elevenlabs import Refused, Session
from app.agents.output import DEFAULT, OutputFormat
from app.errors import InvalidInput
from app.http.auth import bearer_matches
from app.services import Services

INACTIVITY_S = 20.0
MAX_INACTIVITY_S = 180.0
POLL_S = 0.25
"""How often the reader looks up from the socket to check the inactivity timer."""
MESSAGE_OVERHEAD = 4096
"""Bytes a message may hold beyond four per character of the input limit."""


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
        session, inactivity = _open(ws, svc, multi)
    except Refused as exc:
        await _refuse(ws, exc)
        return
    try:
        await _read(ws, session, inactivity)
    except Refused as exc:
        await session.stop_all()
        await _refuse(ws, exc)
    finally:
        await session.stop_all()
        if ws.application_state is WebSocketState.CONNECTED:
            await ws.close(session.close_code)


def _open(ws: WebSocket, svc: Services, multi: bool) -> tuple[Session, float]:
    voice = ws.path_params["voice_id"]
    query = ws.query_params
    if svc.draining:
        raise Refused("the server is shutting down", "unavailable", 1013)
    try:
        svc.engine.check(voice, 1.0)
    except InvalidInput as exc:
        raise Refused(str(exc), exc.code) from exc
    try:
        fmt = OutputFormat.parse(query.get("output_format", DEFAULT))
    except ValueError as exc:
        raise Refused(str(exc), "invalid_output_format") from exc
    try:
        inactivity = float(query.get("inactivity_timeout", INACTIVITY_S))
    except ValueError as exc:
        raise Refused("inactivity_timeout must be a number of seconds", "invalid_value") from exc
    if not 0 < inactivity <= MAX_INACTIVITY_S:
        raise Refused(f"inactivity_timeout must be above 0 and at most {MAX_INACTIVITY_S:g}", "invalid_value")

    async def send_text(text: str) -> None:
        try:
            await ws.send_text(text)
        except WebSocketDisconnect as exc:
            raise ConnectionError("the client hung up") from exc

    session = Session(svc, voice, fmt, multi=multi, auto_mode=query.get("auto_mode", "").strip().lower() == "true",
                      send_text=send_text, connected=lambda: ws.application_state is WebSocketState.CONNECTED)
    return session, inactivity


async def _refuse(ws: WebSocket, exc: Refused) -> None:
    if ws.application_state is WebSocketState.CONNECTED:
        try:
            await ws.send_text(json.dumps({"message": str(exc), "error": exc.error, "code": exc.code}))
            await ws.close(exc.code, str(exc)[:120])
        except (WebSocketDisconnect, RuntimeError):
            pass


async def _read(ws: WebSocket, session: Session, inactivity: float) -> None:
    loop = asyncio.get_running_loop()
    limit = session.svc.settings.max_input_chars * 4 + MESSAGE_OVERHEAD
    receiving: asyncio.Task[Any] | None = None
    try:
        while not session.finished.is_set():
            if receiving is None:
                receiving = asyncio.ensure_future(ws.receive())
            finished = asyncio.ensure_future(session.finished.wait())
            done, _ = await asyncio.wait({receiving, finished}, timeout=POLL_S, return_when=asyncio.FIRST_COMPLETED)
            finished.cancel()
            if receiving not in done:
                if loop.time() - session.last_activity >= inactivity and not session.speaking():
                    raise Refused(f"no text for {inactivity:g} s (inactivity_timeout); closing",
                                   "input_timeout_exceeded")
                continue
            message, receiving = receiving.result(), None
            if message["type"] == "websocket.disconnect":
                return
            session.last_activity = loop.time()
            if message.get("bytes") is not None:
                raise Refused("binary frames are not part of this protocol: send JSON text", "invalid_message", 1003)
            text = message.get("text") or ""
            if len(text) > limit:
                raise Refused(f"a message is over the limit of {limit} bytes", "message_too_large", 1009)
            try:
                parsed = json.loads(text)
            except ValueError as exc:
                raise Refused(f"a message is not valid JSON: {exc}", "invalid_message") from exc
            if not isinstance(parsed, dict):
                raise Refused("a message must be a JSON object", "invalid_message")
            if await session.handle(parsed):
                return
    finally:
        if receiving is not None:
            receiving.cancel()


routes = [WebSocketRoute("/v1/text-to-speech/{voice_id}/stream-input", stream_input),
          WebSocketRoute("/v1/text-to-speech/{voice_id}/multi-stream-input", multi_stream_input)]
