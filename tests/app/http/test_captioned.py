"""Word timestamps over HTTP on the fake engine (fast, exact): ``POST /dev/captioned_speech`` whole and as
NDJSON, the SSE word events, 501 for a model without durations, bad input. The fake's phonemes are the
letters of the text and its model gives every token one 25 ms frame, so each word's time is known exactly.
On the real model: tests/app/http/test_captioned_live.py."""

from __future__ import annotations

import base64
import io
import json
from collections.abc import Iterator

import pytest
import soundfile as sf
from starlette.testclient import TestClient

from app.http.server import create_app
from app.settings import Settings
from tests.app.http.fake import SAMPLES_PER_TOKEN, fake_engine
from tests.app.http.test_openai_request import events

# Three sentences: the first chunk (at most 30 characters) is the first sentence, the rest come in later chunks.
TEXT = "Hello there, friend. The second sentence is here. And a third one ends it, after a clause or two more."
FRAME_S = SAMPLES_PER_TOKEN / 24000


def make(tmp_path_factory: pytest.TempPathFactory, *, timed: bool) -> Iterator[TestClient]:
    settings = Settings(cache_dir=tmp_path_factory.mktemp("cache"), quiet_window_s=0, streams=1)
    with TestClient(create_app(settings, engine=fake_engine(settings, timed=timed))) as c:
        yield c


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    yield from make(tmp_path_factory, timed=True)


@pytest.fixture(scope="module")
def untimed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    yield from make(tmp_path_factory, timed=False)


def expected(client: TestClient) -> list[dict[str, object]]:
    """Each word's time from the chunks the engine planned: a chunk's model tokens are its characters that are
    in the vocabulary (not ``H``, for one), played one after another; the space where two chunks join is in
    neither."""
    engine = client.app_state["services"].engine  # type: ignore[attr-defined]
    plan = engine.plan(TEXT, "af_heart", 1.0)
    assert len(plan.chunks) >= 3
    known = engine.vocab.known
    spoken = "".join(c for chunk in plan.chunks for c in chunk if known(c))
    out, at = [], 0
    for word in TEXT.split():
        tokens = "".join(c for c in word if known(c))
        at = spoken.index(tokens, at)
        out.append({"word": word, "start_time": round(at * FRAME_S, 3),
                    "end_time": round((at + len(tokens)) * FRAME_S, 3)})
        at += len(tokens)
    return out


def test_whole_json_has_the_audio_and_every_word_at_its_time(client: TestClient) -> None:
    response = client.post("/dev/captioned_speech", json={"input": TEXT, "voice": "af_heart",
                                                         "response_format": "wav", "stream": False})
    assert response.status_code == 200 and response.headers["content-type"] == "application/json"
    body = response.json()
    assert set(body) == {"audio", "audio_format", "timestamps"} and body["audio_format"] == "audio/wav"
    samples, rate = sf.read(io.BytesIO(base64.b64decode(body["audio"])))
    assert rate == 24000
    assert body["timestamps"] == expected(client)
    assert body["timestamps"][-1]["end_time"] == pytest.approx(len(samples) / rate, abs=0.001)


def test_the_ndjson_stream_has_one_line_per_chunk_with_its_words_in_whole_response_time(client: TestClient) -> None:
    whole = client.post("/dev/captioned_speech", json={"input": TEXT, "voice": "af_heart",
                                                      "response_format": "pcm", "stream": False}).json()
    response = client.post("/dev/captioned_speech", json={"input": TEXT, "voice": "af_heart",
                                                         "response_format": "pcm"})
    assert response.status_code == 200 and response.headers["content-type"].startswith("application/x-ndjson")
    lines = [json.loads(line) for line in response.text.splitlines()]
    assert len(lines) >= 3 and all(set(line) == {"audio", "audio_format", "timestamps"} for line in lines)
    before = 0.0
    for line in lines:  # every word of a line is heard within that line's audio
        length = len(base64.b64decode(line["audio"])) / 2 / 24000
        assert line["timestamps"], line
        assert all(before - 0.001 <= w["start_time"] <= w["end_time"] <= before + length + 0.001
                   for w in line["timestamps"])
        before += length
    assert [w for line in lines for w in line["timestamps"]] == whole["timestamps"] == expected(client)
    assert b"".join(base64.b64decode(line["audio"]) for line in lines) == base64.b64decode(whole["audio"])


def test_return_timestamps_false_sends_none(client: TestClient) -> None:
    body = client.post("/dev/captioned_speech", json={"input": TEXT, "response_format": "mp3", "stream": False,
                                                     "return_timestamps": False}).json()
    assert body["timestamps"] == [] and body["audio_format"] == "audio/mpeg" and body["audio"]


def test_sse_sends_each_chunks_words_after_its_audio(client: TestClient) -> None:
    response = client.post("/v1/audio/speech", json={"input": TEXT, "voice": "af_heart", "response_format": "pcm",
                                                     "stream_format": "sse"})
    sent = events(response.content)
    kinds = [e["type"] for e in sent]
    assert kinds[-1] == "speech.audio.done"
    # delta, words, delta, words, ...: each chunk's words follow its audio.
    assert kinds[:-1] == ["speech.audio.delta", "speech.audio.timestamps"] * ((len(kinds) - 1) // 2)
    words = [w for e in sent if e["type"] == "speech.audio.timestamps" for w in e["timestamps"]]  # type: ignore[union-attr]
    assert words == expected(client)
    assert all(set(e) == {"type", "timestamps"} for e in sent if e["type"] == "speech.audio.timestamps")


def test_a_model_without_durations_answers_501_and_still_speaks(untimed: TestClient) -> None:
    response = untimed.post("/dev/captioned_speech", json={"input": TEXT})
    assert response.status_code == 501
    error = response.json()["error"]
    assert error["code"] == "timestamps_unavailable" and "duration" in error["message"]
    assert set(error) == {"message", "type", "param", "code"}
    speech = untimed.post("/v1/audio/speech", json={"input": TEXT, "response_format": "pcm"})
    assert speech.status_code == 200 and len(speech.content) > 0
    sse = events(untimed.post("/v1/audio/speech", json={"input": TEXT, "response_format": "pcm",
                                                         "stream_format": "sse"}).content)
    assert {e["type"] for e in sse} == {"speech.audio.delta", "speech.audio.done"}
    # Without timestamps asked for, the captioned endpoint speaks there too.
    plain = untimed.post("/dev/captioned_speech", json={"input": TEXT, "stream": False, "return_timestamps": False})
    assert plain.status_code == 200 and plain.json()["timestamps"] == []


@pytest.mark.parametrize("body, status, param", [
    ({"input": ""}, 400, "input"),
    ({"input": TEXT, "voice": "nobody"}, 400, "voice"),
    ({"input": TEXT, "stream_format": "sse"}, 400, "stream_format"),
    ({"input": TEXT, "response_format": "ogg"}, 400, "response_format"),
    ({"input": TEXT, "return_timestamps": "yes"}, 400, "return_timestamps"),
    ({"input": TEXT, "speed": 9}, 400, "speed"),
])
def test_bad_input_is_a_clean_error(client: TestClient, body: dict[str, object], status: int, param: str) -> None:
    response = client.post("/dev/captioned_speech", json=body)
    assert response.status_code == status, response.text
    assert response.json()["error"]["param"] == param


def test_a_body_that_is_not_json_is_a_400(client: TestClient) -> None:
    response = client.post("/dev/captioned_speech", content=b"{nope", headers={"content-type": "application/json"})
    assert response.status_code == 400 and response.json()["error"]["code"] == "invalid_json"
