"""Wyoming's streams on the fake engine (fast): streamed text bounded as the sockets' is, and a new
``synthesize-start`` ending the stream before it. The real model and client library are in test_wyoming.py."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator

import numpy as np
import pytest
from starlette.testclient import TestClient
from wyoming.audio import AudioChunk
from wyoming.client import AsyncTcpClient
from wyoming.error import Error
from wyoming.event import Event
from wyoming.tts import Synthesize, SynthesizeChunk, SynthesizeStart, SynthesizeStop, SynthesizeVoice

from app.agents.stream import TEXT_PER_STREAM
from app.http.server import create_app
from app.settings import Settings
from bench.server import free_port
from tests.app.http.fake import FakeRuntime, fake_engine

MAX_INPUT_CHARS = 40
VOICE = SynthesizeVoice("af_heart")


@pytest.fixture
def wyoming(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[int, FakeRuntime]]:
    port = free_port()
    settings = Settings(cache_dir=tmp_path_factory.mktemp("cache"), quiet_window_s=0, streams=1, max_requests=1,
                        max_input_chars=MAX_INPUT_CHARS, wyoming_port=port)
    engine = fake_engine(settings)
    with TestClient(create_app(settings, engine=engine)):
        yield port, engine.runtime  # type: ignore[misc]


async def _exchange(port: int, events: list[Event], until: str, timeout: float) -> list[Event]:
    async with AsyncTcpClient("127.0.0.1", port) as client:
        for event in events:
            await client.write_event(event)
        found: list[Event] = []
        while not found or found[-1].type != until:
            event = await asyncio.wait_for(client.read_event(), timeout)
            assert event is not None, f"the server hung up after {[e.type for e in found]}"
            found.append(event)
        return found


def exchange(port: int, events: list[Event], until: str, timeout: float = 10) -> list[Event]:
    return asyncio.run(_exchange(port, events, until, timeout))


def samples(events: list[Event]) -> int:
    return sum(len(AudioChunk.from_event(e).audio) // 2 for e in events if AudioChunk.is_type(e.type))


def test_streamed_text_past_the_limit_is_an_error_and_the_stream_still_stops(wyoming: tuple[int, FakeRuntime]) -> None:
    port, _ = wyoming
    piece = "word " * (MAX_INPUT_CHARS // 5)
    chunks = [SynthesizeChunk(piece).event() for _ in range(TEXT_PER_STREAM + 1)]  # one piece over the limit
    found = exchange(port, [SynthesizeStart(VOICE).event(), *chunks, SynthesizeStop().event()], "synthesize-stopped")
    errors = [Error.from_event(e) for e in found if Error.is_type(e.type)]
    assert [e.code for e in errors] == ["input_too_large"]
    assert [e.type for e in found].count("synthesize-stopped") == 1
    within = exchange(port, [SynthesizeStart(VOICE).event(), *chunks[:-1], SynthesizeStop().event()],
                      "synthesize-stopped")
    assert not any(Error.is_type(e.type) for e in within) and samples(within) > 0  # the limit itself is taken


def test_a_new_stream_ends_the_one_before_it(wyoming: tuple[int, FakeRuntime]) -> None:
    port, runtime = wyoming
    runtime.gate = threading.Event()
    runtime.started.clear()  # set by the warm-up: from here, by the first stream's inference alone
    try:
        async def barge_in() -> list[Event]:
            async with AsyncTcpClient("127.0.0.1", port) as client:
                await client.write_event(SynthesizeStart(VOICE).event())
                await client.write_event(SynthesizeChunk("A first reply that is long. ").event())
                assert await asyncio.to_thread(runtime.started.wait, 10)  # its inference is running
                for event in (SynthesizeStart(VOICE).event(), SynthesizeChunk("Bye now.").event(),
                              SynthesizeStop().event()):
                    await client.write_event(event)
                # The first stream's inference is held until the server has read the new start (sent already, read
                # in microseconds): released before, it could speak before the start was read, as it may.
                await asyncio.sleep(0.5)
                runtime.gate.set()  # type: ignore[union-attr]
                found: list[Event] = []
                while not found or found[-1].type != "synthesize-stopped":
                    event = await asyncio.wait_for(client.read_event(), 10)
                    assert event is not None, f"the server hung up after {[e.type for e in found]}"
                    found.append(event)
                return found

        found = asyncio.run(barge_in())
    finally:
        runtime.gate.set()
        runtime.gate = None
    alone = exchange(port, [Synthesize("Bye now.", VOICE).event()], "audio-stop")
    assert samples(found) == samples(alone) > 0  # the second stream's audio, none of the first's
    kinds = [e.type for e in found if not AudioChunk.is_type(e.type)]
    assert kinds == ["audio-start", "audio-stop", "synthesize-stopped"]
    assert np.all(np.array([e.type for e in found]) != "error")
