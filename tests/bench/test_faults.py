"""`bench.faults`' hostile burst against the fake engine on a real uvicorn (fast): every probe answered fairly, the
dropped stream let go (which the probe checks, so it can fail); and a probe that sees no let-go says so."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from bench import faults
from tests.bench.fake_server import fake_server


@pytest.fixture(scope="module")
def url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with fake_server(tmp_path_factory.mktemp("cache"), max_requests=2) as found:
        yield found


def test_every_hostile_request_is_answered_fairly_and_the_dropped_stream_let_go(url: str) -> None:
    answers = faults.burst(url, 4096, 2)
    unfair = [a for a in answers if not a.fair]
    assert not unfair, unfair
    assert [a.status for a in answers if a.name == "dropped stream"] == [499]


def test_a_dropped_stream_the_server_holds_is_counted_against_it(url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(faults, "LET_GO_S", 0.0)  # no time to let go: as a server that never does
    with httpx.Client(timeout=60) as http:
        answer = faults.Answer("dropped stream", faults.dropped(http, f"{url}/v1/audio/speech",
                                                                {"input": "Hi.", "voice": "af_heart"}))
    assert answer.status == "held" and not answer.fair


