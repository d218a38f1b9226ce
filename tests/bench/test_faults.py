"""`bench.faults`' hostile burst against the fake engine on a real uvicorn (fast): every probe answered fairly, the
dropped stream let go (which the probe checks, so it can fail); and a probe that sees no let-go says so."""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import httpx
import pytest

from bench import faults, soak
from bench.soakrecord import SoakResult
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





def test_kills_are_a_whole_period_apart_even_after_a_burst_held_the_injector(tmp_path: Path,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """`bench.soak`'s fault injector runs its bursts on its own thread, for seconds: the kills that fell due
    meanwhile must not fire back to back after it (the second would kill the process the first one's retry started)."""
    def slow_burst(*_: object) -> list[faults.Answer]:
        time.sleep(2.6)  # past two kill periods
        return []

    monkeypatch.setattr(faults, "burst", slow_burst)
    monkeypatch.setattr(faults, "kill", lambda pid, modules: list(modules))
    options = soak.SoakOptions(out=tmp_path, cache_dir=tmp_path, kill_every_s=1.0, hostile_every_s=1.5)
    result = SoakResult(shape_cache=0)
    stop = threading.Event()
    injector = threading.Thread(target=soak.inject_faults, args=(options, SimpleNamespace(pid=0, url=""), result,
                                                                 time.perf_counter(), stop))
    injector.start()
    time.sleep(8)
    stop.set()
    injector.join(10)
    times = [kill["at_s"] for kill in result.kills]
    assert len(times) >= 3, result.kills
    assert min(b - a for a, b in itertools.pairwise(times)) >= 0.9, times  # at_s is rounded to 0.1 s
