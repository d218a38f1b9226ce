"""The official ``openai`` client, unchanged, against a real uvicorn on the real model: OpenAI's voice
names, the default streamed response, and SSE (``stream_format="sse"``)."""

from __future__ import annotations

import base64
import io
import json

import numpy as np
from openai import OpenAI

from tests.app.test_audio import decode_with_ffmpeg, decode_with_soundfile
from tests.conftest import LiveServer

TEXT = "The client asks, and the server answers."  # two chunks, 2.5 s


def client(server: LiveServer) -> OpenAI:
    return OpenAI(base_url=f"{server.url}/v1", api_key="not-needed")


def test_default_streamed_mp3_with_an_openai_voice_opens_everywhere(server: LiveServer) -> None:
    with client(server).audio.speech.with_streaming_response.create(
            model="gpt-4o-mini-tts", voice="coral", input=TEXT, instructions="Cheerful.") as response:
        assert response.headers["content-type"] == "audio/mpeg"
        data = b"".join(response.iter_bytes())
    samples, declared = decode_with_soundfile("mp3", data)
    assert declared == len(samples) and np.sqrt(np.mean(samples**2)) > 0.01
    assert abs(len(decode_with_ffmpeg(data, "mp3")) - len(samples)) <= 1152


def test_sse_events_carry_the_same_audio_as_the_stream(server: LiveServer) -> None:
    openai = client(server)
    plain = openai.audio.speech.create(model="gpt-4o-mini-tts", voice={"id": "onyx"}, input=TEXT,
                                       response_format="pcm").content
    events = []
    with openai.audio.speech.with_streaming_response.create(
            model="gpt-4o-mini-tts", voice={"id": "onyx"}, input=TEXT, response_format="pcm",
            stream_format="sse") as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        for line in response.iter_lines():
            if line.startswith("data: "):
                events.append(json.loads(line[6:]))
    # OpenAI's deltas, each chunk's followed by our word timings (which OpenAI's clients skip), then done.
    assert {e["type"] for e in events[:-1]} == {"speech.audio.delta", "speech.audio.timestamps"}
    assert events[0]["type"] == "speech.audio.delta" and events[-2]["type"] == "speech.audio.timestamps"
    assert events[-1]["type"] == "speech.audio.done" and events[-1]["usage"]["output_tokens"] > 0
    audio = b"".join(base64.b64decode(e["audio"]) for e in events[:-1] if e["type"] == "speech.audio.delta")
    assert audio == plain and np.frombuffer(audio, dtype="<i2").std() > 100


def test_sse_in_wav_decodes(server: LiveServer) -> None:
    with client(server).audio.speech.with_streaming_response.create(
            model="gpt-4o-mini-tts", voice="nova", input=TEXT, response_format="wav", stream_format="sse") as response:
        raw = b"".join(response.iter_bytes())
    deltas = [json.loads(b[6:]) for b in raw.split(b"\n\n") if b.startswith(b"data: ")]
    wav = b"".join(base64.b64decode(e["audio"]) for e in deltas if e["type"] == "speech.audio.delta")
    import soundfile as sf

    samples, rate = sf.read(io.BytesIO(wav))
    assert rate == 24000 and len(samples) > 24000


def test_sse_deltas_arrive_while_the_rest_is_synthesized(server: LiveServer) -> None:
    import httpx

    long_text = "Hi there. The second one has a clause, and it is longer."  # three chunks
    with client(server).audio.speech.with_streaming_response.create(
            model="gpt-4o-mini-tts", voice="alloy", input=long_text, response_format="pcm",
            stream_format="sse") as response:
        lines = response.iter_lines()
        first = next(line for line in lines if line.startswith("data: "))
        assert json.loads(first[6:])["type"] == "speech.audio.delta"
        assert httpx.get(f"{server.url}/v1/lifecycle", timeout=10).json()["in_flight"] == 1
        rest = [json.loads(line[6:]) for line in lines if line.startswith("data: ")]
    assert rest[-1]["type"] == "speech.audio.done" and len(rest) >= 2
