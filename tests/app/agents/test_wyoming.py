"""The Wyoming server (``TTS_WYOMING_PORT``) against the ``wyoming`` client library, as Home Assistant's integration
speaks it: describe, synthesize, streaming synthesize per sentence, unknown events tolerated, errors as events."""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from wyoming.audio import AudioChunk, AudioStart, AudioStop
from wyoming.client import AsyncTcpClient
from wyoming.error import Error
from wyoming.event import Event
from wyoming.info import Describe, Info
from wyoming.tts import Synthesize, SynthesizeChunk, SynthesizeStart, SynthesizeStop, SynthesizeStopped, SynthesizeVoice

from bench.server import free_port
from tests.conftest import SPEECH_BACKEND, LiveServer, live_server


@pytest.fixture(scope="module")
def wyoming(cache_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LiveServer, int]]:
    port = free_port()
    with live_server(cache_dir, tmp_path_factory.mktemp("logs"), backend=SPEECH_BACKEND, quiet_window_s="0",
                     wyoming_port=str(port)) as server:
        yield server, port


async def exchange(port: int, events: list[Event], until: str, timeout: float = 60) -> list[Event]:
    async with AsyncTcpClient("127.0.0.1", port) as client:
        for event in events:
            await client.write_event(event)
        found: list[Event] = []
        while True:
            event = await asyncio.wait_for(client.read_event(), timeout)
            assert event is not None, f"the server hung up after {[e.type for e in found]}"
            found.append(event)
            if event.type == until:
                return found


def pcm(events: list[Event]) -> np.ndarray:
    return np.frombuffer(b"".join(AudioChunk.from_event(e).audio for e in events if AudioChunk.is_type(e.type)),
                         dtype="<i2")


def test_describe_lists_every_voice_with_its_language(wyoming: tuple[LiveServer, int]) -> None:
    found = asyncio.run(exchange(wyoming[1], [Describe().event()], "info"))
    program = Info.from_event(found[-1]).tts[0]
    assert program.supports_synthesize_streaming and program.installed
    voices = {v.name: v.languages for v in program.voices}
    assert voices["af_heart"] == ["en_US"] and voices["bf_emma"] == ["en_GB"] and len(voices) > 20


def test_synthesize_gives_one_audio_stream(wyoming: tuple[LiveServer, int]) -> None:
    found = asyncio.run(exchange(wyoming[1], [Synthesize("Hello from Wyoming.", SynthesizeVoice("af_heart")).event()],
                                 "audio-stop"))
    start = AudioStart.from_event(found[0])
    assert (start.rate, start.width, start.channels) == (24000, 2, 1)
    assert pcm(found).std() > 100 and len(pcm(found)) > 24000 * 0.5


def test_streaming_synthesis_sends_audio_per_sentence_and_tolerates_the_rest(wyoming: tuple[LiveServer, int]) -> None:
    voice = SynthesizeVoice("am_adam")
    text = "It is sunny today. Tomorrow it rains."
    events = [Event("ping-from-the-future", {"x": 1}), SynthesizeStart(voice).event(),
              *[SynthesizeChunk(piece).event() for piece in ("It is sun", "ny today. Tomor", "row it rains.")],
              Synthesize(text, voice).event(),  # Home Assistant's copy for servers that do not stream: ignored
              SynthesizeStop().event()]
    found = asyncio.run(exchange(wyoming[1], events, "synthesize-stopped"))
    kinds = [e.type for e in found if not AudioChunk.is_type(e.type)]
    assert kinds == ["audio-start", "audio-stop", "audio-start", "audio-stop", "synthesize-stopped"]
    assert SynthesizeStopped.is_type(found[-1].type) and AudioStop.is_type(found[-2].type)
    whole = asyncio.run(exchange(wyoming[1], [Synthesize(text, voice).event()], "audio-stop"))
    assert abs(len(pcm(found)) - len(pcm(whole))) < 24000 * 0.6  # the same words, cut differently


def test_an_unknown_voice_is_an_error_event(wyoming: tuple[LiveServer, int]) -> None:
    found = asyncio.run(exchange(wyoming[1], [Synthesize("Hi.", SynthesizeVoice("nobody")).event()], "error"))
    assert "nobody" in Error.from_event(found[-1]).text


def test_shutdown_closes_sockets_and_wyoming_clients_cleanly(wyoming: tuple[LiveServer, int]) -> None:
    """SIGTERM with an ElevenLabs socket and a Wyoming client open: both are closed by the server, which exits 0.
    Last in the module: it stops the module's server."""
    from websockets.exceptions import ConnectionClosed
    from websockets.sync.client import connect

    server, port = wyoming

    async def wyoming_ends() -> bool:
        async with AsyncTcpClient("127.0.0.1", port) as client:
            await client.write_event(Describe().event())
            assert (await client.read_event()) is not None
            server.process.send_signal(signal.SIGTERM)
            while (await asyncio.wait_for(client.read_event(), 30)) is not None:
                pass
            return True

    with connect(server.url.replace("http://", "ws://") + "/v1/text-to-speech/af_heart/stream-input") as ws:
        ws.send('{"text": " "}')
        assert asyncio.run(wyoming_ends())
        with pytest.raises(ConnectionClosed):
            ws.recv(timeout=30)
        assert ws.close_code in (1001, 1012)
    assert server.process.wait(30) == 0
