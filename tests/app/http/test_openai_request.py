"""OpenAI's speech request as its current client sends it, on a fake engine (fast): voice names and
objects, ``instructions``, ``stream_format`` and the SSE event shapes. The official client against a
real server is in test_openai_client.py."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator

import numpy as np
import pytest
from starlette.testclient import TestClient

from app.http.server import create_app
from app.settings import Settings
from app.voices import ALIASES, OPENAI_VOICES
from tests.app.http.fake import SAMPLES_PER_TOKEN, fake_engine

TEXT = "hello there"


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    settings = Settings(cache_dir=tmp_path_factory.mktemp("cache"), quiet_window_s=0, streams=1)
    with TestClient(create_app(settings, engine=fake_engine(settings))) as c:
        yield c


def pcm(client: TestClient, **body: object) -> bytes:
    response = client.post("/v1/audio/speech", json={"model": "gpt-4o-mini-tts", "input": TEXT,
                                                     "response_format": "pcm", **body})
    assert response.status_code == 200, response.text
    return response.content


def events(raw: bytes) -> list[dict[str, object]]:
    """Server-sent events as a client parses them: ``data:`` lines, one JSON object each, blank-line separated."""
    blocks = raw.decode().split("\n\n")
    assert blocks[-1] == ""
    out = []
    for block in blocks[:-1]:
        lines = block.split("\n")
        assert all(line.startswith("data: ") for line in lines), block
        out.append(json.loads("".join(line[6:] for line in lines)))
    return out


@pytest.mark.parametrize("name", OPENAI_VOICES)
def test_every_openai_voice_speaks_an_installed_voice(client: TestClient, name: str) -> None:
    assert len(pcm(client, voice=name)) == 2 * len(TEXT) * SAMPLES_PER_TOKEN


def test_the_openai_names_are_a_spread_of_english_voices() -> None:
    table = ALIASES["official"]
    assert set(table) == set(OPENAI_VOICES) and len(set(table.values())) == len(table)
    assert all(v[0] in "ab" and v[2] == "_" for v in table.values())


def test_voice_object_is_the_same_as_its_id(client: TestClient) -> None:
    assert pcm(client, voice={"id": "am_michael"}) == pcm(client, voice="am_michael")
    assert pcm(client, voice={"id": "onyx"}) == pcm(client, voice="onyx")


def test_instructions_are_accepted_and_change_nothing(client: TestClient) -> None:
    assert pcm(client, voice="coral", instructions="Speak like a pirate.") == pcm(client, voice="coral")


def test_stream_format_audio_is_the_plain_stream(client: TestClient) -> None:
    assert pcm(client, voice="alloy", stream_format="audio") == pcm(client, voice="alloy")


@pytest.mark.parametrize("fmt", ["pcm", "wav", "mp3", "flac", "aac", "opus"])
def test_sse_sends_openai_deltas_then_done_with_usage(client: TestClient, fmt: str) -> None:
    response = client.post("/v1/audio/speech", json={"model": "gpt-4o-mini-tts", "input": TEXT, "voice": "alloy",
                                                     "response_format": fmt, "stream_format": "sse"})
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/event-stream")
    sent = events(response.content)
    deltas, done = [e for e in sent[:-1] if e["type"] == "speech.audio.delta"], sent[-1]
    assert deltas and all(set(e) == {"type", "audio"} for e in deltas)
    # Besides OpenAI's two event types, only our word timings (after the deltas, tested in test_captioned.py).
    assert {e["type"] for e in sent[:-1]} <= {"speech.audio.delta", "speech.audio.timestamps"}
    assert set(done) == {"type", "usage"} and done["type"] == "speech.audio.done"
    usage = done["usage"]
    assert isinstance(usage, dict) and set(usage) == {"input_tokens", "output_tokens", "total_tokens"}
    assert usage["input_tokens"] == len(TEXT)  # the fake's phonemes are the letters
    assert usage["output_tokens"] == len(TEXT)  # one 600-sample frame per token
    assert usage["total_tokens"] == usage["input_tokens"] + usage["output_tokens"]
    audio = b"".join(base64.b64decode(str(e["audio"])) for e in deltas)
    plain = client.post("/v1/audio/speech", json={"input": TEXT, "voice": "alloy", "response_format": fmt}).content
    if fmt in ("pcm", "wav", "flac"):
        assert audio == plain  # the same bytes as the audio stream, in the requested format
    from tests.app.test_audio import decode_with_ffmpeg

    assert abs(len(decode_with_ffmpeg(audio, fmt)) - len(TEXT) * SAMPLES_PER_TOKEN) <= (
        0 if fmt in ("pcm", "wav", "flac") else 2048)


def test_sse_streams_even_when_stream_is_false(client: TestClient) -> None:
    response = client.post("/v1/audio/speech", json={"input": TEXT, "voice": "alloy", "response_format": "pcm",
                                                     "stream_format": "sse", "stream": False})
    sent = events(response.content)
    assert sent[-1]["type"] == "speech.audio.done"
    assert np.frombuffer(base64.b64decode(str(sent[0]["audio"])), dtype="<i2").size > 0


ERRORS = [
    ({"stream_format": "websocket"}, 400, "stream_format"),
    ({"stream_format": 1}, 400, "stream_format"),
    ({"voice": {"name": "alloy"}}, 400, "voice"),
    ({"voice": {"id": ""}}, 400, "voice"),
    ({"voice": {"id": 3}}, 400, "voice"),
    ({"voice": {"id": "voice_1234"}}, 400, "voice"),
    ({"voice": "nobody"}, 400, "voice"),
    ({"instructions": ["louder"]}, 400, "instructions"),
    ({"instructions": "x" * 5000}, 413, "instructions"),
]


@pytest.mark.parametrize("extra, status, param", ERRORS)
def test_bad_openai_fields_get_an_openai_shaped_error(client: TestClient, extra: dict[str, object], status: int,
                                                      param: str) -> None:
    response = client.post("/v1/audio/speech", json={"input": TEXT, "voice": "alloy", **extra})
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert error["param"] == param and error["message"] and error["type"] == "invalid_request_error"


def test_an_unknown_voice_lists_the_aliases(client: TestClient) -> None:
    message = client.post("/v1/audio/speech", json={"input": TEXT, "voice": "nobody"}).json()["error"]["message"]
    assert "af_heart" in message and "alloy" in message
