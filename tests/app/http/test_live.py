"""A real uvicorn on a free port with real HTTP clients: streaming, disconnects, overload, SIGTERM."""

from __future__ import annotations

import concurrent.futures
import re
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest

from tests.conftest import SPEECH_BACKEND, LiveServer, live_server

LONG = "Hi there. The second sentence is a good deal longer. A third one follows."
"""Three chunks, the first a fraction of the whole (the chunker's first bound is small)."""


@pytest.fixture(scope="module")
def one_stream(cache_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    """One stream (on both threads of a 2-CPU machine), at most two requests admitted (TTS_MAX_REQUESTS): easy to
    overload. Its drain at SIGTERM may take 30 s (a loaded CI machine)."""
    with live_server(cache_dir, tmp_path_factory.mktemp("logs"), streams="1", threads_per_stream="2",
                     max_requests="2", quiet_window_s="0", shutdown_grace_s="30", backend=SPEECH_BACKEND) as s:
        yield s


def body(text: str, fmt: str = "pcm") -> dict[str, object]:
    return {"model": "kokoro", "input": text, "voice": "af_heart", "response_format": fmt, "stream": True}


def in_flight(server: LiveServer) -> int:
    return int(httpx.get(f"{server.url}/v1/lifecycle", timeout=10).json()["in_flight"])


def aborted(server: LiveServer) -> float:
    """``tts_requests_total{outcome="aborted"}`` from ``/metrics`` (0 before the first)."""
    found = re.search(r'^tts_requests_total\{outcome="aborted"\} (\S+)$', httpx.get(f"{server.url}/metrics").text,
                      re.MULTILINE)
    return float(found.group(1)) if found else 0.0


def solo_length(server: LiveServer, text: str) -> int:
    response = httpx.post(f"{server.url}/v1/audio/speech", json=body(text), timeout=120)
    assert response.status_code == 200
    return len(response.content)


def test_first_chunk_arrives_before_the_last_is_synthesized(one_stream: LiveServer) -> None:
    with httpx.stream("POST", f"{one_stream.url}/v1/audio/speech", json=body(LONG), timeout=120) as response:
        assert response.status_code == 200
        assert response.headers.get("transfer-encoding") == "chunked"
        chunks = response.iter_raw()
        first = next(chunks)
        assert len(first) > 0
        # The request is still being synthesized while we already hold audio.
        assert in_flight(one_stream) == 1
        rest = b"".join(chunks)
    total = len(first) + len(rest)
    assert total % 2 == 0 and total > 3 * len(first)


def test_client_disconnect_frees_its_slot(one_stream: LiveServer) -> None:
    before = aborted(one_stream)
    with httpx.stream("POST", f"{one_stream.url}/v1/audio/speech", json=body(LONG * 3), timeout=120) as response:
        next(response.iter_raw())
    deadline = time.monotonic() + 60
    while in_flight(one_stream) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert in_flight(one_stream) == 0  # stopped after at most the chunk being synthesized
    assert aborted(one_stream) == before + 1  # this module's server: counted since this test began
    assert httpx.post(f"{one_stream.url}/v1/audio/speech", json=body("Still here."), timeout=60).status_code == 200


def test_overload_gets_429_while_admitted_requests_finish(one_stream: LiveServer) -> None:
    text = "Overload test sentence."
    expected = solo_length(one_stream, text)

    def call(_: int) -> tuple[int, int, str | None, float]:
        start = time.monotonic()
        response = httpx.post(f"{one_stream.url}/v1/audio/speech", json=body(text), timeout=120)
        return response.status_code, len(response.content), response.headers.get("retry-after"), \
            time.monotonic() - start

    with concurrent.futures.ThreadPoolExecutor(6) as pool:
        results = list(pool.map(call, range(6)))
    refused = [r for r in results if r[0] == 429]
    admitted = [r for r in results if r[0] == 200]
    assert refused and admitted and len(refused) + len(admitted) == 6
    assert all(r[2] is not None and int(r[2]) >= 1 for r in refused)
    assert all(r[3] < 5 for r in refused)  # refused at once, not after waiting
    assert all(r[1] == expected for r in admitted)  # full audio, same as a solo run


def test_official_openai_client_works_unchanged(one_stream: LiveServer, tmp_path: Path) -> None:
    from openai import OpenAI

    client = OpenAI(base_url=f"{one_stream.url}/v1", api_key="not-needed")
    speech = client.audio.speech.create(model="tts-1", voice="af_heart", input="Hello from the OpenAI client.",
                                        response_format="wav")
    assert speech.content[:4] == b"RIFF" and len(speech.content) > 24000
    target = tmp_path / "out.mp3"
    with client.audio.speech.with_streaming_response.create(model="tts-1", voice="af_heart",
                                                            input="Streaming to a file.") as response:
        response.stream_to_file(target)
    from tests.app.test_audio import decode_with_ffmpeg

    assert len(decode_with_ffmpeg(target.read_bytes())) > 12000


def test_audio_is_identical_across_formats_of_the_same_request(one_stream: LiveServer) -> None:
    pcm = httpx.post(f"{one_stream.url}/v1/audio/speech", json=body("Same audio."), timeout=60).content
    wav = httpx.post(f"{one_stream.url}/v1/audio/speech", json=body("Same audio.", "wav"), timeout=60).content
    assert wav[44:] == pcm
    assert np.frombuffer(pcm, dtype="<i2").std() > 100


def test_sigterm_drains_in_flight_streams_then_exits_zero(one_stream: LiveServer) -> None:
    """Last in the module: it stops the module's server."""
    server = one_stream
    text = "Draining must let this stream finish. Every sentence arrives."  # three chunks
    expected = solo_length(server, text)
    with httpx.stream("POST", f"{server.url}/v1/audio/speech", json=body(text), timeout=120) as response:
        chunks = response.iter_raw()
        received = len(next(chunks))
        server.process.send_signal(signal.SIGTERM)
        time.sleep(0.3)
        with pytest.raises(httpx.HTTPError):  # no longer accepting
            httpx.get(f"{server.url}/healthz", timeout=2)
        received += sum(len(c) for c in chunks)
    assert received == expected
    assert server.process.wait(30) == 0
