"""Word timestamps on the real model through a real uvicorn: ``/dev/captioned_speech`` whole and as NDJSON
on the session's server, and a user's model without the duration tensor (501 for timestamps, speech still
served). The exact arithmetic is tested on the fake engine (test_captioned.py); here the times must fit
the real audio: in order, inside each chunk's audio, covering the utterance, and shorter when faster."""

from __future__ import annotations

import base64
import io
import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import soundfile as sf

from app.forms import modelfile, timed
from tests.conftest import SPEECH_BACKEND, LiveServer, live_server

TEXT = "Hi there. The second one has a clause, and it is longer."
"""Three chunks (the chunker's first two bounds are small: the first sentence, then the second cut at its clause), in
as little audio as three take."""
WORDS = [w.strip(".,") for w in TEXT.split()]


def captioned(server: LiveServer, **body: object) -> httpx.Response:
    return httpx.post(f"{server.url}/dev/captioned_speech", timeout=120,
                      json={"input": TEXT, "voice": "af_heart", "response_format": "pcm", **body})


def check_times(words: list[dict[str, object]], audio_s: float) -> None:
    assert [w["word"] for w in words] == WORDS
    starts = [float(w["start_time"]) for w in words]  # type: ignore[arg-type]
    ends = [float(w["end_time"]) for w in words]  # type: ignore[arg-type]
    assert all(s < e for s, e in zip(starts, ends, strict=True)), words  # every word takes time
    assert all(e <= s for e, s in zip(ends[:-1], starts[1:], strict=True)), words  # in order, none overlapping the next
    # It covers the utterance: the first word after the short lead-in, the last one before the model's tail.
    assert starts[0] < 0.5 and audio_s - 1.2 < ends[-1] <= audio_s + 0.001


@pytest.fixture(scope="module")
def whole(server: LiveServer) -> dict[str, object]:
    """The captions of `TEXT` at speed 1, as one WAV (shared by the tests below: each request takes seconds)."""
    response = captioned(server, stream=False, response_format="wav")
    assert response.status_code == 200, response.text
    body: dict[str, object] = response.json()
    return body


def test_whole_and_streamed_captions_fit_the_real_audio(server: LiveServer, whole: dict[str, object]) -> None:
    body = whole
    assert body["audio_format"] == "audio/wav"
    pcm = base64.b64decode(str(body["audio"]))[44:]  # the samples after the WAV header
    check_times(body["timestamps"], len(pcm) / 2 / 24000)  # type: ignore[arg-type]

    streamed = captioned(server)
    assert streamed.status_code == 200 and streamed.headers["content-type"].startswith("application/x-ndjson")
    lines = [json.loads(line) for line in streamed.text.splitlines()]
    assert len(lines) >= 3  # the first chunk is small: several chunks, each its own line
    before = 0.0
    for line in lines:  # each chunk's words are heard within that chunk's audio, offset by the chunks before
        length = len(base64.b64decode(line["audio"])) / 2 / 24000
        assert all(before - 0.001 <= w["start_time"] < w["end_time"] <= before + length + 0.001
                   for w in line["timestamps"]), (before, length, line["timestamps"])
        before += length
    assert b"".join(base64.b64decode(line["audio"]) for line in lines) == pcm  # the same audio as whole
    assert [w for line in lines for w in line["timestamps"]] == body["timestamps"]


def test_faster_speech_has_proportionally_earlier_words(server: LiveServer, whole: dict[str, object]) -> None:
    fast = captioned(server, stream=False, response_format="wav", speed=1.5).json()
    samples, _ = sf.read(io.BytesIO(base64.b64decode(fast["audio"])))
    check_times(fast["timestamps"], len(samples) / 24000)
    ratio = fast["timestamps"][-1]["end_time"] / whole["timestamps"][-1]["end_time"]  # type: ignore[index]
    assert 1 / 1.5 * 0.85 < ratio < 1 / 1.5 * 1.15  # the speed is in the model's durations


def test_under_load_every_word_is_heard_with_the_same_audio_and_times_as_alone(cache_dir: Path,
                                                                              tmp_path: Path) -> None:
    """Chunks depend on the text alone: requests side by side (two, one more than the one stream they queue behind)
    get the audio and the word times a request alone gets, every word once, in order, with times that fit their
    audio."""
    import concurrent.futures

    # Both admitted at once whatever this machine's speed: admission in real time takes in what one stream plays at
    # 1x plus what waits under 10 s, and on a loaded CI machine that was 2 of 3 sent side by side.
    # One stream, on both threads of a 2-CPU machine (one thread would take twice as long for the same queueing).
    with live_server(cache_dir, tmp_path, backend=SPEECH_BACKEND, quiet_window_s="0", streams="1",
                     threads_per_stream="2", max_requests="2") as server:
        # At speed 2: the subject is the queue, not the pace; half the audio to make.
        alone = captioned(server, stream=False, response_format="wav", speed=2.0)
        with concurrent.futures.ThreadPoolExecutor(2) as pool:
            side_by_side = list(pool.map(lambda _: captioned(server, stream=False, response_format="wav", speed=2.0),
                                         range(2)))
        info = httpx.get(f"{server.url}/v1/info", timeout=10).json()
    assert alone.status_code == 200, alone.text
    body = alone.json()
    audio, rate = sf.read(io.BytesIO(base64.b64decode(body["audio"])))
    check_times(body["timestamps"], len(audio) / rate)
    for response in side_by_side:
        assert response.status_code == 200, response.text
        assert response.json() == body
    assert info["pool"]["granted"]["later"] >= 3


@pytest.fixture(scope="module")
def untimed_server(cache_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    """A server on a user's export without the known duration tensor: the shipped graph with that tensor
    renamed (same length, so the protobuf stays valid), served by ONNX Runtime (opens in a second)."""
    folder = tmp_path_factory.mktemp("untimed")
    source = modelfile.resolve(None, [cache_dir / "models"])
    name = timed.DURATION_TENSORS[0].encode()
    model = folder / "own-export.onnx"
    model.write_bytes(source.read_bytes().replace(name, name[:-1] + b"Z"))
    assert timed.duration_tensor(model) is None
    with live_server(folder / "cache", folder, model_path=str(model), backend="onnxruntime",
                     quiet_window_s="0") as s:
        yield s


def test_a_model_without_durations_answers_501_for_timestamps_and_still_speaks(untimed_server: LiveServer) -> None:
    refused = captioned(untimed_server)
    assert refused.status_code == 501
    error = refused.json()["error"]
    assert error["code"] == "timestamps_unavailable" and "TTS_MODEL_PATH" in error["message"]
    speech = httpx.post(f"{untimed_server.url}/v1/audio/speech", timeout=120,
                        json={"input": "It still speaks.", "response_format": "pcm", "stream_format": "sse"})
    kinds = [json.loads(line[6:])["type"] for line in speech.text.splitlines() if line.startswith("data: ")]
    assert speech.status_code == 200 and kinds[-1] == "speech.audio.done"
    assert set(kinds) == {"speech.audio.delta", "speech.audio.done"}  # no word events without durations
