"""Speech is a function of the request: on a real server with the real model the same request gives the same bytes as
the first request after its start, alone, under load, streamed or whole, and after a release and restore, on ONNX
Runtime (what ``TTS_BACKEND=auto`` serves on every CPU class on record). Under OpenVINO (``TTS_BACKEND=openvino``, or
where a local tuning picks it) the check that depends on the engine runs too: the same bytes under load, where its
streams interleave. The others check the pool's and the chunker's code, the same whatever runs the model, and run
once (`ABOVE_THE_RUNTIME`); OpenVINO's restore is checked in tests/lifecycle. One engine serves an instance from its
first request to its last: nothing in front of it while it loads.

The server runs the shipped defaults but for the backend: nothing is turned off to make the answer stable. Chunk
boundaries depend on the text alone (tests/app/test_chunks.py tests that fast, on a fake runtime); this is the real
thing end to end.
"""

from __future__ import annotations

import concurrent.futures
from collections.abc import Iterator
from pathlib import Path

import httpx
import psutil
import pytest

from tests.conftest import SPEECH_BACKEND, LiveServer, live_server

ADMIN = {"Authorization": "Bearer admin-secret"}
TEXT = "Hello there, and welcome back. It costs $12.50 and arrives at 3:30 pm; the rest follows in order."
"""Three or more chunks (the first a clause, then bounds of 40 and more tokens), each a separate inference, and no
longer: every check here runs the real model, several times over."""
OTHERS = ("A different request, to keep the streams busy.",
          "Another one, with chunks of its own to schedule between the others.")


@pytest.fixture(scope="module", params=[SPEECH_BACKEND, "openvino"])
def server(cache_dir: Path, tmp_path_factory: pytest.TempPathFactory,
           request: pytest.FixtureRequest) -> Iterator[LiveServer]:
    """One server per backend, shared by the module's tests (pytest runs them all on one before it starts the
    next)."""
    # Eight admitted at once whatever this CPU plays in real time (one listener on the AVX2 EPYC): the rest wait for a
    # place, so requests still run side by side with chunks of others.
    with live_server(cache_dir, tmp_path_factory.mktemp("logs"), backend=request.param, quiet_window_s="0",
                     admin_token="admin-secret", max_requests="8") as s:
        assert info(s)["active_backend"] == request.param
        yield s


def speak(server: LiveServer, text: str = TEXT, *, stream: bool = True, **extra: object) -> bytes:
    """At twice the pace (``speed`` 2): the chunks are cut from the text alone, and half the audio costs the model
    about half the work, which this module asks of it many times over."""
    response = httpx.post(f"{server.url}/v1/audio/speech", timeout=180,
                          json={"input": text, "voice": "af_heart", "response_format": "pcm", "stream": stream,
                                "speed": 2.0, **extra})
    assert response.status_code == 200, response.text
    return response.content


def info(server: LiveServer) -> dict[str, object]:
    found: dict[str, object] = httpx.get(f"{server.url}/v1/info", timeout=10).json()
    return found


def inference_processes(server: LiveServer) -> set[int]:
    """The pids of the server's live children: its inference process (`app.runtime.proxy`)."""
    found = set()
    for child in psutil.Process(server.process.pid).children():
        try:
            if child.status() != psutil.STATUS_ZOMBIE:
                found.add(child.pid)
        except psutil.NoSuchProcess:
            continue
    return found


@pytest.fixture(scope="module")
def alone(server: LiveServer) -> bytes:
    """The first request after the server's start, alone on an idle pool, streamed: the reference."""
    audio = speak(server)
    assert len(audio) > 2 * 24000 * 2  # seconds of speech even at twice the pace: several chunks
    return audio


ABOVE_THE_RUNTIME = pytest.mark.parametrize("server", [SPEECH_BACKEND], indirect=True)
"""What the test checks is the pool's and the chunker's, the same code whatever runs the model: run on ONNX Runtime's
server alone, which keeps the suite's time for what each runtime must give the same bytes in."""


@ABOVE_THE_RUNTIME
def test_the_request_is_cut_into_several_chunks_and_whole_gives_the_streamed_bytes(server: LiveServer,
                                                                                   alone: bytes) -> None:
    """Sent whole (one response, after its last chunk), the request is cut into the same chunks as streamed, and its
    bytes are the streamed reference's."""
    before = info(server)["pool"]["granted"]  # type: ignore[index]
    assert speak(server, stream=False) == alone
    after = info(server)["pool"]["granted"]  # type: ignore[index]
    assert after["later"] - before["later"] >= 2  # type: ignore[index]


def test_under_load_the_same_request_gives_the_same_bytes(server: LiveServer, alone: bytes) -> None:
    """Copies of the request beside other requests, more than the pool's streams: they wait, run on other streams,
    their chunks interleave with others'; each gets the bytes it gets alone."""
    pool = info(server)["pool"]
    # One more at once than the pool has streams (at least four), none refused: some wait for a stream.
    admits = max(4, pool["streams"] + 1)  # type: ignore[index,operator]
    assert admits <= pool["capacity"]  # type: ignore[index]
    texts = ([TEXT, OTHERS[0], TEXT, OTHERS[1]] * admits)[:admits]
    with concurrent.futures.ThreadPoolExecutor(len(texts)) as pool:
        answers = list(pool.map(lambda text: speak(server, text), texts))
    for text, audio in zip(texts, answers, strict=True):
        if text == TEXT:
            assert audio == alone


@ABOVE_THE_RUNTIME
def test_admission_counts_the_listeners_the_pace_plays_in_real_time(server: LiveServer, alone: bytes) -> None:
    """The pace (`app.tune.speed`) from the served form's tuning figures, or the slowest class on record's; with
    ``TTS_MAX_REQUESTS`` the admitted count is that, the listeners the same."""
    found = info(server)
    pool, pace = found["pool"], found["pace"]
    assert pace is not None and pace["listeners"] >= 1 and pace["source"]  # type: ignore[index]
    assert pool["listeners"] == pace["listeners"]  # type: ignore[index]
    assert pool["capacity"] == pool["max_requests"] == 8  # type: ignore[index]
    assert pool["realtime_capacity"] is not None  # measured from real inferences (a figure for /metrics)


@ABOVE_THE_RUNTIME  # OpenVINO's restore gives the same bytes in tests/lifecycle/test_release_live.py and
# tests/lifecycle/test_inference_process.py (two OpenVINO restores here would be this module's slowest test)
def test_after_a_release_and_restore_the_same_request_gives_the_same_bytes(server: LiveServer, alone: bytes) -> None:
    warm = inference_processes(server)
    assert warm
    assert httpx.post(f"{server.url}/v1/lifecycle/release", headers=ADMIN, timeout=60).json()["released"] is True
    assert httpx.get(f"{server.url}/v1/lifecycle", timeout=10).json()["state"] == "released"
    assert speak(server) == alone  # the restore's first request: the same form, from a fresh inference process
    restored = inference_processes(server)
    assert restored and not restored & warm
    found = info(server)
    assert set(found["inferences_by_backend"]) == {found["active_backend"]}  # type: ignore[arg-type]  # only ever one
    # Released again, then a burst into the restore (two requests waiting for the one restore): the same bytes.
    assert httpx.post(f"{server.url}/v1/lifecycle/release", headers=ADMIN, timeout=60).json()["released"] is True
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        answers = list(pool.map(lambda _: speak(server), range(2)))
    assert answers == [alone] * 2
