"""Every helper process is disposable, on a real server and the real model: killed alone or all at once, before,
during or between requests, the inference process and the Japanese/Mandarin reader cost no request that had not
sent a byte (it is asked once more of a fresh process), a stream cut mid-way ends visibly and is counted, and the
next request is served."""

from __future__ import annotations

import asyncio
import re
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from wyoming.tts import Synthesize, SynthesizeVoice

from bench import faults
from bench.server import free_port
from tests.app.agents.test_wyoming import exchange, pcm
from tests.app.http.test_elevenlabs_live import sdk_audio
from tests.conftest import SPEECH_BACKEND, LiveServer, live_server

ENGLISH = "Nothing lost to a process that died."
JAPANESE = "こんにちは、お元気ですか。"
SLOW = "One chunk, spoken slowly."
"""Under the first chunk's bound (one inference), and at a quarter speed (`SLOWLY`) its inference makes four times
the audio: long enough to be killed in the middle of it."""
SLOWLY = 0.25
LONG = " ".join(f"Sentence number {i} keeps this stream going for a while." for i in range(12))
MEDIUM = LONG[:LONG.index("Sentence number 8")]
"""Eight sentences, in chunks that grow to the chunker's largest: sent whole, it is still running when the streams
that follow it have sent their first chunk and the late request is admitted (with three, and once on a Zen 4 with
five, it finished first under the suite's load, and the test then waited for four requests in flight that never
were), and costs twice its length where it is killed and asked again."""


@pytest.fixture(scope="module")
def wyoming_port() -> int:
    return free_port()


@pytest.fixture(scope="module")
def server(cache_dir: Path, tmp_path_factory: pytest.TempPathFactory, wyoming_port: int) -> Iterator[LiveServer]:
    # ONNX Runtime: a restore loads the same form again, so audio after a kill is the audio before it, byte for byte.
    with live_server(cache_dir, tmp_path_factory.mktemp("logs"), quiet_window_s="0", backend=SPEECH_BACKEND,
                     max_requests="8", wyoming_port=str(wyoming_port)) as s:
        yield s


def speak(server: LiveServer, text: str, voice: str = "af_heart", speed: float = 1.0,
          stream: bool = True) -> httpx.Response:
    return httpx.post(f"{server.url}/v1/audio/speech", timeout=120,
                      json={"input": text, "voice": voice, "response_format": "pcm", "speed": speed, "stream": stream})


def kill(server: LiveServer, *modules: str) -> None:
    """SIGKILL the server's helpers running ``modules``: at least one was running."""
    assert faults.kill(server.process.pid, modules)


def metric(server: LiveServer, name: str) -> float:
    found = re.search(rf"^{re.escape(name)} (\S+)$", httpx.get(f"{server.url}/metrics", timeout=10).text, re.M)
    return float(found.group(1)) if found else 0.0


def in_flight(server: LiveServer) -> int:
    return int(httpx.get(f"{server.url}/v1/lifecycle", timeout=10).json()["in_flight"])


def test_every_child_killed_at_once_between_requests_costs_no_request(server: LiveServer) -> None:
    english, japanese = speak(server, ENGLISH), speak(server, JAPANESE, "jf_alpha")
    assert english.status_code == japanese.status_code == 200
    # As an out-of-memory kill of the container's biggest processes would: both at once, and asked at once. (The
    # tests below kill the processes this one's restore started.)
    kill(server, faults.INFERENCE, faults.READER)
    again = speak(server, JAPANESE, "jf_alpha")
    assert again.status_code == 200, again.text
    assert again.content == japanese.content
    assert speak(server, ENGLISH).content == english.content


def test_the_reader_killed_alone_costs_no_request(server: LiveServer) -> None:
    japanese = speak(server, JAPANESE, "jf_alpha")
    kill(server, faults.READER)
    again = speak(server, JAPANESE, "jf_alpha")
    assert again.status_code == 200 and again.content == japanese.content, again.text


def test_a_kill_during_requests_cuts_the_streams_visibly_and_serves_the_one_not_started(server: LiveServer) -> None:
    reference = speak(server, SLOW, speed=SLOWLY)
    whole_reference = speak(server, MEDIUM, stream=False)
    assert reference.status_code == whole_reference.status_code == 200
    retries = metric(server, 'tts_retries_total{process="inference"}')
    cut = metric(server, 'tts_requests_total{outcome="cut"}')
    outcome: dict[str, Any] = {}

    def streamed(name: str, **fields: object) -> None:
        body = {"input": LONG, "voice": "af_heart", "response_format": "pcm", **fields}
        try:
            with httpx.stream("POST", f"{server.url}/v1/audio/speech", timeout=120, json=body) as response:
                outcome[f"{name}_status"] = response.status_code
                outcome[f"{name}_body"] = b"".join(response.iter_raw())
        except httpx.RemoteProtocolError as exc:
            outcome[f"{name}_error"] = exc

    waiting: dict[str, httpx.Response] = {}
    # Sent whole, asked before the streams: its first chunk runs before theirs, so by the kill it is done (and has not
    # left: nothing of a whole response does before its last chunk).
    whole = threading.Thread(target=lambda: waiting.update(whole=speak(server, MEDIUM, stream=False)))
    whole.start()
    audio = threading.Thread(target=streamed, args=("audio",))
    sse = threading.Thread(target=streamed, args=("sse",), kwargs={"stream_format": "sse"})
    audio.start()
    sse.start()
    # Each wait has a generous bound of its own: a guard against a hang, not a claim about speed.
    deadline = time.monotonic() + 120
    while "audio_status" not in outcome or "sse_status" not in outcome:  # both streaming
        assert time.monotonic() < deadline, outcome
        time.sleep(0.02)
    late = threading.Thread(target=lambda: waiting.update(response=speak(server, SLOW, speed=SLOWLY)))
    late.start()
    deadline = time.monotonic() + 120
    while in_flight(server) < 4:  # admitted, and its one chunk not back: its response has not started
        assert time.monotonic() < deadline, outcome
        time.sleep(0.01)
    assert "response" not in waiting and "whole" not in waiting
    kill(server, faults.INFERENCE)
    for thread in (audio, sse, late, whole):
        thread.join(120)
        assert not thread.is_alive()

    # The one that had not started is served, whole and the same.
    assert waiting["response"].status_code == 200, waiting["response"].text
    assert waiting["response"].content == reference.content
    # So is the one sent whole, though its first chunks were done.
    assert waiting["whole"].status_code == 200, waiting["whole"].text
    assert waiting["whole"].content == whole_reference.content
    # The streams cut mid-way end visibly: the raw body without its last chunk, and SSE's error event with no done.
    assert "audio_error" in outcome, outcome.keys()
    events = outcome["sse_body"].decode()
    assert '"type":"error"' in events and "speech.audio.done" not in events
    assert metric(server, 'tts_requests_total{outcome="cut"}') - cut == 2
    assert metric(server, 'tts_retries_total{process="inference"}') - retries >= 2
    assert speak(server, ENGLISH).status_code == 200


def test_a_kill_under_the_sockets_first_audio_asks_a_fresh_process(server: LiveServer, wyoming_port: int) -> None:
    """ElevenLabs' socket (its SDK) and Wyoming (its client), each with a segment queued behind two whole responses
    when the inference process dies: neither had sent a byte of it, so each is served, the same as before."""

    def wyoming() -> bytes:
        asked = [Synthesize(SLOW, SynthesizeVoice("af_heart")).event()]
        found = asyncio.run(exchange(wyoming_port, asked, "audio-stop"))
        return pcm(found).tobytes()

    reference = {"elevenlabs": sdk_audio(server, [SLOW]), "wyoming": wyoming()}
    retries = metric(server, 'tts_retries_total{process="inference"}')
    got: dict[str, bytes] = {}

    # Sent whole: not paced to a listener, their chunks run back to back and keep both streams busy.
    whole: list[int] = []
    vehicles = [threading.Thread(target=lambda: whole.append(speak(server, MEDIUM, stream=False).status_code))
                for _ in range(2)]
    for thread in vehicles:
        thread.start()
    deadline = time.monotonic() + 120  # each wait its own hang guard, as above
    while in_flight(server) < 2:  # both streams busy: the sockets' segments queue behind them
        assert time.monotonic() < deadline
        time.sleep(0.01)
    def ask(name: str, speak: Callable[[], bytes]) -> None:
        try:
            got[name] = speak()
        except Exception as exc:  # told below, in the assertion, not in another test's thread warning
            got[name] = repr(exc).encode()

    sockets = [threading.Thread(target=ask, args=("elevenlabs", lambda: sdk_audio(server, [SLOW]))),
               threading.Thread(target=ask, args=("wyoming", wyoming))]
    for thread in sockets:
        thread.start()
    deadline = time.monotonic() + 120
    while in_flight(server) < 4:
        assert time.monotonic() < deadline
        time.sleep(0.01)
    assert not got
    kill(server, faults.INFERENCE)
    for thread in sockets + vehicles:
        thread.join(120)
        assert not thread.is_alive()
    assert got == reference
    assert whole == [200, 200]  # asked again too: nothing of them had left
    assert metric(server, 'tts_retries_total{process="inference"}') - retries >= 2
