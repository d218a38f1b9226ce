"""The Japanese and Mandarin readers' process (`app.text.readers`) is disposable: a dead one costs no request, and
every way it can fail is a clear 4xx or 503, never a 500. Real readers, real processes."""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from app.engine import Engine
from app.errors import Unavailable
from app.http.server import create_app
from app.pool import StreamPool
from app.settings import Settings
from app.text.frontend import Frontend
from app.text.readers import ReaderProcess
from app.text.vocab import Vocab
from app.voices import VoiceBank
from tests.app.http.fake import FakeRuntime

HELLO = "こんにちは"
SPOKEN = "koɲɲiʨiβa"


@pytest.fixture()
def reader() -> Iterator[ReaderProcess]:
    process = ReaderProcess()
    try:
        yield process
    finally:
        process.close()


def test_a_killed_reader_is_started_again_and_the_call_served(reader: ReaderProcess) -> None:
    assert reader.phonemize("ja", HELLO) == SPOKEN
    for _ in range(2):
        pid = reader.pid
        assert pid is not None
        # Killed as the kernel's out-of-memory killer would, and asked at once: the call finds it dead or its pipe
        # broken (the BrokenPipeError a request once got as a 500) and asks a fresh process.
        os.kill(pid, signal.SIGKILL)
        assert reader.phonemize("ja", HELLO) == SPOKEN
        assert reader.pid not in (None, pid)
    assert reader.loaded == {"ja"}


def test_a_reader_that_dies_in_the_middle_of_a_call_is_asked_again(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    marker = tmp_path / "die"
    marker.touch()
    monkeypatch.setenv("DYING_READER_MARKER", str(marker))
    dying = ReaderProcess("tests.app.text.dying_reader")
    try:
        assert dying.phonemize("ja", HELLO) == SPOKEN
        assert dying.retries == 1 and not marker.exists()
        assert dying.phonemize("ja", HELLO) == SPOKEN and dying.retries == 1
    finally:
        dying.close()


def test_a_reader_that_never_answers_is_a_503_within_its_timeout() -> None:
    mute = ReaderProcess("tests.app.text.mute_reader", answer_timeout_s=0.5)
    try:
        with pytest.raises(Unavailable, match="did not answer within"):
            mute.phonemize("ja", HELLO)
        assert mute.pid is None  # ended, not left hanging
    finally:
        mute.close()


@pytest.fixture()
def broken_ja(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """pyopenjtalk installed but failing to import (a wheel built for another Python, a missing shared library): a
    package of that name first on the path of every process started from here, the reader's included."""
    shadow = tmp_path / "shadow" / "pyopenjtalk"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text('raise ImportError("libopenjtalk.so: cannot open shared object file")\n')
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(shadow.parent), *sys.path]))


def test_a_broken_extra_is_the_400_a_missing_one_gets_with_the_pip_command(tmp_path: Path, broken_ja: None) -> None:
    settings = Settings(cache_dir=tmp_path, quiet_window_s=0)
    engine = Engine(FakeRuntime(1), StreamPool(1), Frontend(), VoiceBank.load(None),  # type: ignore[arg-type]
                    Vocab.embedded(), default_lang=settings.lang)
    with TestClient(create_app(settings, engine=engine)) as client:
        for _ in range(2):  # and again: a fresh process tries the import again, and fails the same way
            response = client.post("/v1/audio/speech", json={"input": HELLO, "voice": "jf_alpha"})
            assert response.status_code == 400, response.text
            error = response.json()["error"]
            assert error["code"] == "language_unavailable" and error["param"] == "voice"
            assert "pip install 'kokoro-cpu-tts[ja]'" in error["message"] and "ImportError" in error["message"]
        assert client.post("/v1/audio/speech", json={"input": "Hi.", "voice": "af_heart"}).status_code == 200
