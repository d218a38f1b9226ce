"""One retry on every path (`app.retry`), on the fake engine (fast): speech whose inference process is lost before it
has sent a byte is asked again and served whole, the same bytes; a model that fails on the input is not retried.
The real process killed under real requests is tests/reliability/test_disposable.py."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest
from starlette.testclient import TestClient

from app.http.server import create_app
from app.runtime.backends.base import Inference
from app.runtime.protocol import StateLost
from app.settings import Settings
from tests.app.http.fake import FakeRuntime, fake_engine

TEXT = "Hello there, and welcome back. " * 6
"""Several chunks: the first is small (the chunker's first bound)."""


class Losing(FakeRuntime):
    """Its inference number ``at`` (counted from 1) raises ``fault`` once."""

    def __init__(self, slots: int) -> None:
        super().__init__(slots)
        self.at = 0
        self.fault: Exception = StateLost("the inference process ended")
        self.count = 0

    def infer_timed(self, slot: int, tokens: npt.NDArray[np.int64], style: npt.NDArray[np.float32],
                    speed: float) -> Inference:
        self.count += 1
        if self.count == self.at:
            raise self.fault
        return super().infer_timed(slot, tokens, style, speed)


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[TestClient, Losing]]:
    settings = Settings(cache_dir=tmp_path, quiet_window_s=0, streams=1)
    engine = fake_engine(settings)
    engine.runtime = runtime = Losing(1)
    runtime.load()
    with TestClient(create_app(settings, engine=engine)) as client:
        yield client, runtime


def speak(client: TestClient, stream: bool) -> tuple[int, bytes]:
    response = client.post("/v1/audio/speech", json={"input": TEXT, "voice": "af_heart", "response_format": "wav",
                                                     "stream": stream})
    return response.status_code, response.content


@pytest.mark.parametrize("stream", [False, True])
def test_speech_that_lost_its_process_before_a_byte_is_served_again_whole(served: tuple[TestClient, Losing],
                                                                          stream: bool) -> None:
    client, runtime = served
    status, reference = speak(client, stream)
    assert status == 200
    # Whole: lost at its second chunk (nothing leaves before the last); streamed: at its first (nothing left yet).
    runtime.count, runtime.at = 0, 1 if stream else 2
    assert speak(client, stream) == (200, reference)
    assert runtime.count > runtime.at  # it was lost, and asked again


def test_a_model_that_fails_on_the_input_is_not_asked_again(served: tuple[TestClient, Losing]) -> None:
    client, runtime = served
    runtime.count, runtime.at, runtime.fault = 0, 2, RuntimeError("the model failed")
    status, _ = speak(client, False)
    assert status == 500 and runtime.count == 2
