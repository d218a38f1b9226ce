"""The speech endpoint against the real model, through Starlette's TestClient (lifespan included).

Errors, auth, admission and metrics are tested fast on a fake engine: tests/app/http/test_routes.py.
"""

from __future__ import annotations

import concurrent.futures
import io
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from starlette.testclient import TestClient

from app.http.server import create_app
from app.settings import Settings
from tests.conftest import SPEECH_BACKEND

SHORT = "Hello there."
TWO_CHUNKS = "Hello there. See you again soon."
"""Two model chunks (the rest after the first sentence is over 10 tokens): the format tests stream both through each
encoder."""
FAST = 2.0
"""The speed of the tests whose subject is not the audio's pace (formats, lengths compared with each other, voices,
determinism): half the audio to make, the same code paths (the model takes the speed as an input; pauses at joins are
scaled by it)."""


@pytest.fixture(scope="module")
def client(cache_dir: Path) -> Iterator[TestClient]:
    settings = Settings(cache_dir=cache_dir, max_input_chars=600, quiet_window_s=0, backend=SPEECH_BACKEND,
                        max_requests=4)  # two side by side whatever this CPU plays in real time
    with TestClient(create_app(settings)) as c:
        yield c


def speak(client: TestClient, text: str, **extra: object) -> np.ndarray:
    body = {"model": "kokoro", "input": text, "voice": "af_heart", "response_format": "pcm", **extra}
    response = client.post("/v1/audio/speech", json=body)
    assert response.status_code == 200, response.text
    return np.frombuffer(response.content, dtype="<i2").astype(np.float32) / 32767


def test_audio_is_24khz_finite_and_not_silent(client: TestClient) -> None:
    response = client.post("/v1/audio/speech", json={"input": SHORT, "voice": "af_heart", "response_format": "wav"})
    assert response.status_code == 200
    assert response.headers["content-type"] == "audio/wav"
    import soundfile as sf

    samples, rate = sf.read(io.BytesIO(response.content), dtype="float32")
    assert rate == 24000
    assert np.isfinite(samples).all()
    assert np.sqrt(np.mean(samples**2)) > 0.01
    assert 0.3 < len(samples) / rate < 5


@pytest.fixture(scope="module")
def two_chunk_samples(client: TestClient) -> int:
    """The exact length of TWO_CHUNKS's audio at `FAST`, synthesized once for every format and the length test (the
    same request is bit-identical each time: test_same_request_same_audio_twice_and_under_concurrency)."""
    return len(speak(client, TWO_CHUNKS, stream=False, speed=FAST))


def test_length_grows_with_text(client: TestClient, two_chunk_samples: int) -> None:
    assert two_chunk_samples > 2 * len(speak(client, SHORT, speed=FAST))  # measured 2.66 x


def test_same_request_same_audio_twice_and_under_concurrency(client: TestClient) -> None:
    # The short sentence: one chunk either way.
    reference = speak(client, SHORT, speed=FAST)
    assert np.array_equal(reference, speak(client, SHORT, speed=FAST))
    before = client.get("/v1/info").json()["pool"]["granted"]
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        results = list(pool.map(lambda _: speak(client, SHORT, speed=FAST), range(2)))
    for audio in results:
        assert np.array_equal(reference, audio)
    after = client.get("/v1/info").json()["pool"]["granted"]
    assert after["first"] - before["first"] == 2, (before, after)


def test_speed_shortens_audio(client: TestClient) -> None:
    assert len(speak(client, SHORT, speed=2.0)) < 0.7 * len(speak(client, SHORT))  # measured 0.46


def test_blended_voice_speaks(client: TestClient) -> None:
    blend = speak(client, SHORT, voice="af_heart(2)+am_michael(1)", speed=FAST)
    assert not np.array_equal(blend, speak(client, SHORT, speed=FAST))
    assert np.sqrt(np.mean(blend**2)) > 0.01


def test_numbers_currency_and_times_are_read_out(client: TestClient) -> None:
    plain = speak(client, "It costs money.", speed=FAST)
    spelled = speak(client, "It costs $1,234.56 at 3:30 pm.", speed=FAST)
    assert len(spelled) > 2 * len(plain)  # the digits became words, not silence (measured 4.2 x)


def test_raw_phonemes_are_accepted(client: TestClient) -> None:
    audio = speak(client, "həlˈO wˈɜɹld.", input_format="phonemes", speed=FAST)
    assert np.sqrt(np.mean(audio**2)) > 0.01


def test_british_lang_code(client: TestClient) -> None:
    assert not np.array_equal(speak(client, "Tomato and water.", lang_code="b", speed=FAST),
                              speak(client, "Tomato and water.", speed=FAST))


@pytest.mark.parametrize("fmt", ["wav", "pcm", "flac", "mp3", "opus", "aac"])
@pytest.mark.parametrize("stream", [True, False])
def test_every_format_opens_in_libsndfile_and_ffmpeg_with_its_length(client: TestClient, two_chunk_samples: int,
                                                                      fmt: str, stream: bool) -> None:
    from tests.app.test_audio import EXACT, decode_with_ffmpeg, decode_with_soundfile

    exact = two_chunk_samples
    response = client.post("/v1/audio/speech", json={"input": TWO_CHUNKS, "voice": "af_heart", "response_format": fmt,
                                                     "stream": stream, "speed": FAST})
    assert response.status_code == 200
    assert response.headers["content-type"].startswith(("audio/", "application/"))
    tolerance = 0 if fmt in EXACT else 2048
    samples = decode_with_ffmpeg(response.content, fmt)
    assert abs(len(samples) - exact) <= tolerance and np.isfinite(samples).all()
    if fmt != "aac":  # libsndfile has no AAC decoder
        samples, declared = decode_with_soundfile(fmt, response.content)
        assert declared == len(samples) and abs(len(samples) - exact) <= tolerance
    if fmt == "flac":  # held to the end so that its header can carry the exact length
        assert int(response.headers["content-length"]) == len(response.content)


def test_long_input_is_chunked_and_nothing_is_dropped(client: TestClient) -> None:
    sentence = "None may be lost. "
    one = len(speak(client, sentence, speed=FAST))
    many = len(speak(client, sentence * 4, speed=FAST))  # three chunks, the second of two sentences
    # Joins are trimmed to a short pause, so each sentence after the first adds less than a lone one (measured at
    # `FAST`: 3.55 x for four, 2.83 x for three): losing one sentence of four would leave about 2.8 x.
    assert many > 3.1 * one


def test_info_reports_what_the_runtime_resolved(client: TestClient) -> None:
    """Routing and errors are tested on a fake engine (tests/app/http/test_routes.py); this is the real one."""
    before = client.get("/v1/info").json()["inferences_by_backend"].get(SPEECH_BACKEND, 0)
    speak(client, SHORT, speed=FAST)
    info = client.get("/v1/info").json()
    assert info["resolved"]["backend"] == SPEECH_BACKEND and info["resolved"]["precision"] == "f32"
    assert info["resolved"]["streams"] == info["pool"]["streams"] >= 1
    # This module's client: its request (one chunk) counted, whatever the tests before it made.
    assert info["active_backend"] == SPEECH_BACKEND and info["inferences_by_backend"][SPEECH_BACKEND] - before == 1
