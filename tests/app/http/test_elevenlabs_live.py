"""ElevenLabs' input-streaming sockets against a real uvicorn on the real model: the official ``elevenlabs`` SDK's
realtime call unchanged (but for where it connects), a plain ``websockets`` client for what the SDK does not show
(first audio before the input ends, the formats, barge-in, hostile frames)."""

from __future__ import annotations

import asyncio
import base64
import io
import json
import time
from typing import Any

import numpy as np
import pytest
import soundfile as sf
from elevenlabs.client import ElevenLabs
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import ClientConnection, connect

from tests.conftest import LiveServer

PIECES = ["Hel", "lo there, ", "how are", " you to", "day?"]


def ws_url(server: LiveServer, path: str = "stream-input", voice: str = "af_heart", **query: str) -> str:
    base = server.url.replace("http://", "ws://")
    params = "&".join(f"{k}={v}" for k, v in {"model_id": "eleven_flash_v2_5", **query}.items())
    return f"{base}/v1/text-to-speech/{voice}/{path}?{params}"


def sdk_audio(server: LiveServer, pieces: list[str], output_format: str = "pcm_24000") -> bytes:
    client = ElevenLabs(api_key="not-needed", base_url=server.url)
    # The SDK's realtime call always turns the base URL into wss:// (a TLS front in production); the test server
    # speaks plain ws://, so it is pointed there. Everything else is the SDK's own code.
    client.text_to_speech._ws_base_url = server.url
    return b"".join(client.text_to_speech.convert_realtime(voice_id="af_heart", text=iter(pieces),
                                                           model_id="eleven_flash_v2_5", output_format=output_format))


def messages(ws: ClientConnection, until_final: bool = True, timeout: float = 60) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            out.append(json.loads(ws.recv(timeout=deadline - time.monotonic())))
            if until_final and out[-1].get("isFinal"):
                break
    except ConnectionClosed:
        pass
    return out


def audio_of(found: list[dict[str, Any]]) -> bytes:
    return b"".join(base64.b64decode(m["audio"]) for m in found if m.get("audio"))


def test_sdk_realtime_speaks_pieces_and_the_same_text_gives_the_same_audio(server: LiveServer) -> None:
    first = sdk_audio(server, PIECES)
    again = sdk_audio(server, ["Hello there, ", "how are you today?"])
    samples = np.frombuffer(first, dtype="<i2")
    assert len(samples) > 24000 * 1.5 and samples.std() > 100  # measured 2.2 s
    assert first == again


def test_first_clause_is_spoken_before_the_input_ends_with_character_alignment(server: LiveServer) -> None:
    with connect(ws_url(server, output_format="pcm_24000")) as ws:
        ws.send(json.dumps({"text": " ", "voice_settings": {"speed": 1.0}}))
        ws.send(json.dumps({"text": "Good morning, "}))
        first = json.loads(ws.recv(timeout=60))
        assert first["audio"] and first["alignment"]["chars"]
        timed = first["alignment"]
        assert "".join(timed["chars"]) == "Good morning, "  # the text as written, punctuation and all
        span = timed["charStartTimesMs"][-1] + timed["charDurationsMs"][-1]
        assert abs(span - len(base64.b64decode(first["audio"])) / 48) <= 2  # ms of 24 kHz 16-bit samples
        ws.send(json.dumps({"text": "everyone."}))
        ws.send(json.dumps({"text": ""}))
        rest = messages(ws)
        assert rest[-1] == {"isFinal": True} and audio_of(rest)
        with pytest.raises(ConnectionClosed):
            ws.recv(timeout=10)
        assert ws.close_code == 1000


def test_telephony_formats_have_their_rate(server: LiveServer) -> None:
    reference = sdk_audio(server, ["Hi, there."])
    for fmt, bytes_per_s in [("pcm_16000", 32000), ("ulaw_8000", 8000)]:
        got = sdk_audio(server, ["Hi, there."], output_format=fmt)
        assert abs(len(got) / bytes_per_s - len(reference) / 48000) < 0.01, fmt


def test_mp3_44100_decodes(server: LiveServer) -> None:
    data = sdk_audio(server, ["Hi, there."], output_format="mp3_44100_128")
    samples, rate = sf.read(io.BytesIO(data))
    assert rate == 44100 and len(samples) > 44100 * 0.3 and np.abs(samples).max() > 0.05


def test_barge_in_stops_a_context_and_another_goes_on(server: LiveServer) -> None:
    long = "This reply goes on and on, sentence after sentence. " * 6
    with connect(ws_url(server, "multi-stream-input", output_format="pcm_24000")) as ws:
        ws.send(json.dumps({"text": " ", "context_id": "a"}))
        ws.send(json.dumps({"text": long, "context_id": "a", "flush": False}))
        while not json.loads(ws.recv(timeout=60)).get("audio"):
            pass
        ws.send(json.dumps({"context_id": "a", "close_context": True}))
        closed = time.monotonic()
        ws.send(json.dumps({"text": "A new turn. ", "context_id": "b"}))
        ws.send(json.dumps({"context_id": "b", "flush": True}))
        ws.send(json.dumps({"context_id": "b", "close_context": True}))
        found = []
        while not any(m.get("isFinal") and m.get("contextId") == "b" for m, _ in found):
            found.append((json.loads(ws.recv(timeout=60)), time.monotonic()))
        late = [at - closed for m, at in found if m.get("contextId") == "a" and m.get("audio")]
        assert all(t < 0.1 for t in late), late
        assert any(m.get("isFinal") and m.get("contextId") == "a" for m, _ in found)
        assert audio_of([m for m, _ in found if m.get("contextId") == "b"])
        ws.send(json.dumps({"close_socket": True}))
        with pytest.raises(ConnectionClosed):
            ws.recv(timeout=10)


@pytest.mark.parametrize(("frame", "error", "code"), [
    (b"\x00\x01binary", "invalid_message", 1003),
    ("{not json", "invalid_message", 1008),
    ("x" * 200_000, "message_too_large", 1009),
])
def test_hostile_frames_get_an_error_and_a_close_and_hurt_no_one(server: LiveServer, frame: str | bytes,
                                                                 error: str, code: int) -> None:
    with connect(ws_url(server, output_format="pcm_24000")) as good, connect(ws_url(server)) as bad:
        good.send(json.dumps({"text": " "}))
        good.send(json.dumps({"text": "Still here, "}))
        bad.send(frame)
        found = messages(bad, until_final=False, timeout=10)
        assert found and found[0]["error"] == error and found[0]["message"]
        assert bad.close_code == code
        good.send(json.dumps({"text": "and well."}))
        good.send(json.dumps({"text": ""}))
        assert audio_of(messages(good))


def test_an_unknown_voice_or_format_is_refused_with_a_message(server: LiveServer) -> None:
    for url in (ws_url(server, voice="no_such_voice"), ws_url(server, output_format="pcm_12345")):
        with connect(url) as ws:
            found = messages(ws, until_final=False, timeout=10)
            assert found[0]["message"] and ws.close_code == 1008


def test_a_flood_of_contexts_is_refused_past_five(server: LiveServer) -> None:
    with connect(ws_url(server, "multi-stream-input")) as ws:
        for k in range(6):
            ws.send(json.dumps({"text": " ", "context_id": f"c{k}"}))
            ws.send(json.dumps({"text": "Wait", "context_id": f"c{k}"}))
        refused = json.loads(ws.recv(timeout=10))
        assert refused["error"] == "max_active_conversations" and refused["contextId"] == "c5"


def test_pipecat_speaks_a_reply_through_its_elevenlabs_service(server: LiveServer) -> None:
    """Pipecat's ``ElevenLabsTTSService`` (multi-stream-input, auto_mode, whole sentences, flush then close_context at
    the end of the reply) in a short pipeline fed an LLM's reply word by word."""
    from pipecat.frames.frames import (
        EndFrame,
        ErrorFrame,
        LLMFullResponseEndFrame,
        LLMFullResponseStartFrame,
        LLMTextFrame,
        TTSAudioRawFrame,
        TTSTextFrame,
    )
    from pipecat.pipeline.pipeline import Pipeline
    from pipecat.pipeline.runner import PipelineRunner
    from pipecat.pipeline.task import PipelineParams, PipelineTask
    from pipecat.processors.frame_processor import FrameDirection, FrameProcessor
    from pipecat.services.elevenlabs.tts import ElevenLabsTTSService

    reply = "Hello there, this is a test. It has two sentences."
    got: list[Any] = []

    class Collect(FrameProcessor):
        async def process_frame(self, frame: Any, direction: FrameDirection) -> None:
            await super().process_frame(frame, direction)
            if isinstance(frame, TTSAudioRawFrame | TTSTextFrame | ErrorFrame):
                got.append(frame)
            await self.push_frame(frame, direction)

    async def run() -> None:
        # Pipecat ends a context after 3 s without audio; a loaded 2-vCPU CI machine can take longer for a chunk.
        tts = ElevenLabsTTSService(api_key="not-needed", url=server.url.replace("http://", "ws://"),
                                   stop_frame_timeout_s=30,
                                   settings=ElevenLabsTTSService.Settings(voice="af_heart", model="eleven_flash_v2_5"))
        task = PipelineTask(Pipeline([tts, Collect()]), params=PipelineParams(audio_out_sample_rate=24000))
        await task.queue_frames([LLMFullResponseStartFrame(), *[LLMTextFrame(w + " ") for w in reply.split(" ")],
                                 LLMFullResponseEndFrame(), EndFrame()])
        await asyncio.wait_for(PipelineRunner(handle_sigint=False).run(task), 120)

    asyncio.run(run())
    assert not [f for f in got if isinstance(f, ErrorFrame)]
    audio = b"".join(f.audio for f in got if isinstance(f, TTSAudioRawFrame))
    assert len(audio) / 48000 > 2.5 and np.frombuffer(audio, dtype="<i2").std() > 100
    assert " ".join(f.text for f in got if isinstance(f, TTSTextFrame)) == reply
