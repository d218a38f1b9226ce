"""Faults: each leaves the server serving, or makes it exit cleanly, and the log or the response says why.

Inference errors are injected by ``tests/reliability/faulty_app.py`` (chosen by the request's speed).
Read-only and full file systems are real: the server runs in a mount namespace of its own
(``unshare -rm``) where the cache directory is a read-only bind mount or a small tmpfs.
"""

from __future__ import annotations

import concurrent.futures
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest

from app.forms import modelfile
from app.tune import outputcheck
from tests.conftest import ROOT, SPEECH_BACKEND, LiveServer, live_server, require

TEXT = "A fault elsewhere must not touch this sentence."
TWO_CHUNKS = "Short one. This second sentence is long enough to go well over forty phoneme tokens, surely."


def post(server: LiveServer, text: str = TEXT, speed: float = 1.0) -> httpx.Response:
    return httpx.post(f"{server.url}/v1/audio/speech", timeout=120,
                      json={"input": text, "voice": "af_heart", "response_format": "pcm", "speed": speed})


def speak(server: LiveServer, text: str = TEXT) -> bytes:
    response = post(server, text)
    assert response.status_code == 200, response.text
    return response.content


def assert_same_speech(audio: bytes, reference: bytes) -> None:
    """The same speech within `app.tune.outputcheck`'s tolerance, where another runtime or form made ``audio`` than
    made ``reference`` (so the bytes differ): OpenVINO's audio from a damaged or constrained cache against the
    session server's (ONNX Runtime, the reference of the output checks)."""
    def floats(pcm: bytes) -> np.ndarray:
        return np.frombuffer(pcm, dtype="<i2").astype(np.float32) / 32767

    check = outputcheck.check_chunk("fault", floats(reference), floats(audio))
    assert check.passed, check


def can_unshare() -> bool:
    return shutil.which("unshare") is not None and subprocess.run(
        ["unshare", "-rm", "true"], capture_output=True).returncode == 0


@pytest.fixture(scope="session")
def namespaces() -> None:
    """Unprivileged user and mount namespaces (``unshare -rm``); a failure rather than a skip in CI."""
    require(can_unshare(), "needs unprivileged user and mount namespaces (unshare -rm)")


needs_unshare = pytest.mark.usefixtures("namespaces")


def in_namespace(setup: str) -> tuple[str, ...]:
    """A command prefix: run ``setup`` as root of a new user and mount namespace, then exec the server."""
    return ("unshare", "-rm", "sh", "-c", f'{setup} && exec "$@"', "sh")


@pytest.fixture(scope="module")
def faulty(cache_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    # Its injected inference errors answer 500 (what the tests below check), so its log may hold them.
    with live_server(cache_dir, tmp_path_factory.mktemp("logs"), module="tests.reliability.faulty_app", streams="1",
                     max_requests="3", quiet_window_s="0", backend=SPEECH_BACKEND, answers_500=True) as s:
        yield s


@pytest.fixture(scope="module")
def expected(faulty: LiveServer) -> bytes:
    """TEXT as the faulty server speaks it with no fault: what each test below expects of it after (or beside) one."""
    return speak(faulty)


def test_an_inference_error_fails_only_that_request_and_the_slot_serves_again(faulty: LiveServer,
                                                                            expected: bytes) -> None:
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        failing = pool.submit(post, faulty, TEXT, 1.5)
        healthy = pool.submit(post, faulty, TEXT)
        failed, served = failing.result(), healthy.result()
    assert failed.status_code == 500
    assert failed.json()["error"]["type"] == "server_error"
    assert "inference failed" in failed.json()["error"]["message"]
    assert served.status_code == 200 and served.content == expected
    assert speak(faulty) == expected  # the one stream that failed serves again
    assert "injected fault on slot 0" in faulty.log()


def test_an_inference_error_mid_stream_cuts_only_that_stream_visibly(faulty: LiveServer, expected: bytes) -> None:
    with httpx.stream("POST", f"{faulty.url}/v1/audio/speech", timeout=120, json={
            "input": TWO_CHUNKS, "voice": "af_heart", "response_format": "pcm", "speed": 1.25}) as response:
        assert response.status_code == 200  # the first chunk was fine, so the response had started
        received = 0
        # No silent truncation: the chunked body never gets its last chunk, and the client can tell.
        with pytest.raises(httpx.RemoteProtocolError):
            for chunk in response.iter_raw():
                received += len(chunk)
    assert received > 0
    assert speak(faulty) == expected
    assert httpx.get(f"{faulty.url}/v1/lifecycle", timeout=10).json()["in_flight"] == 0


def test_a_slow_reader_gets_all_its_audio_and_holds_up_nobody(faulty: LiveServer, expected: bytes) -> None:
    long_text = " ".join(f"Sentence {i} is read by a very slow client." for i in range(2))  # three chunks
    expected_long = len(speak(faulty, long_text))
    received = 0
    with httpx.stream("POST", f"{faulty.url}/v1/audio/speech", timeout=120, json={
            "input": long_text, "voice": "af_heart", "response_format": "pcm"}) as response:
        chunks = response.iter_raw(4096)
        received += len(next(chunks))
        started = time.monotonic()
        assert speak(faulty) == expected  # served while the slow reader sits on its stream
        assert time.monotonic() - started < 60
        for chunk in chunks:
            received += len(chunk)
            time.sleep(0.002)
    assert received == expected_long


def test_sigterm_during_a_restore_finishes_the_request_then_exits_zero(cache_dir: Path, tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    # ONNX Runtime's restore takes some milliseconds (the session held while released): the faulty app makes this one
    # last 5 s (`FAULT_LOAD_SLOW_FILE`), long enough to be caught in the middle.
    marker = tmp_path / "slow-next-load"
    monkeypatch.setenv("FAULT_LOAD_SLOW_FILE", str(marker))  # inherited by the server and its inference process
    with live_server(cache_dir, tmp_path, module="tests.reliability.faulty_app", quiet_window_s="0", admin_token="t",
                     shutdown_grace_s="60", backend=SPEECH_BACKEND) as server:
        expected = speak(server)
        assert httpx.post(f"{server.url}/v1/lifecycle/release", headers={"Authorization": "Bearer t"},
                          timeout=60).status_code == 200
        marker.touch()
        result: dict[str, httpx.Response] = {}
        request = threading.Thread(target=lambda: result.update(r=post(server)))
        request.start()
        deadline = time.monotonic() + 30
        while httpx.get(f"{server.url}/v1/lifecycle", timeout=10).json()["state"] != "restoring":
            assert time.monotonic() < deadline, "the restore never started"
            time.sleep(0.02)
        server.process.send_signal(signal.SIGTERM)
        request.join(120)
        assert not marker.exists()  # the restore it caught was the slowed one
        assert result["r"].status_code == 200 and result["r"].content == expected
        assert server.process.wait(60) == 0


@pytest.mark.parametrize("grace", ["0", "0.5"])
def test_a_grace_of_zero_or_a_fraction_cuts_the_streams_in_flight_that_soon(cache_dir: Path, tmp_path: Path,
                                                                           grace: str) -> None:
    """``TTS_SHUTDOWN_GRACE_S`` 0 is no grace and 0.5 half a second (both were an unbounded drain once): a stream
    whose every chunk takes 3 s (speed 1.75) is cut, and the server exits, long before it would have finished."""
    text = " ".join(f"Sentence number {i} of a stream that the shutdown must cut short." for i in range(4))
    with live_server(cache_dir, tmp_path, module="tests.reliability.faulty_app", quiet_window_s="0",
                     shutdown_grace_s=grace, backend=SPEECH_BACKEND) as server:
        settings = httpx.get(f"{server.url}/v1/info", timeout=10).json()["settings"]
        assert settings["shutdown_grace_s"] == float(grace)  # uvicorn gets it as it is: tests/app/test_settings.py
        with httpx.stream("POST", f"{server.url}/v1/audio/speech", timeout=120,
                          json={"input": text, "voice": "af_heart", "response_format": "pcm", "speed": 1.75,
                                "stream": True}) as response:
            chunks = response.iter_raw()
            received = len(next(chunks))  # the first chunk: 3 s; at least three more to come, 3 s each
            server.process.send_signal(signal.SIGTERM)
            signalled = time.monotonic()
            with pytest.raises(httpx.HTTPError):  # cut: the chunked body never ends
                for chunk in chunks:
                    received += len(chunk)
        assert server.process.wait(30) == 0
        assert time.monotonic() - signalled < 6, "the stream was drained, not cut"


def test_a_missing_model_file_stops_the_start_naming_the_file(tmp_path: Path) -> None:
    missing = tmp_path / "gone" / "model.onnx"
    out = start_and_fail(tmp_path, TTS_MODEL_PATH=str(missing))
    assert str(missing) in out and "does not exist" in out


def test_a_model_with_the_wrong_checksum_stops_the_start_naming_the_file(tmp_path: Path, cache_dir: Path) -> None:
    model = tmp_path / "model.onnx"
    shutil.copyfile(modelfile.resolve(None, [cache_dir / "models"]), model)
    out = start_and_fail(tmp_path, TTS_MODEL_PATH=str(model), TTS_MODEL_SHA256="ab" * 32)
    assert str(model) in out and "expected " + "ab" * 32 in out


def start_and_fail(tmp_path: Path, **env: str) -> str:
    """Run ``python -m app``: it must exit non-zero in good time; returns what it printed."""
    import os

    full = {k: v for k, v in os.environ.items() if not k.startswith("TTS_")}
    full.update({"TTS_CACHE_DIR": str(tmp_path / "cache"), "TTS_PORT": "0", **env})
    done = subprocess.run([sys.executable, "-m", "app"], cwd=ROOT, env=full, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode != 0
    return done.stdout + done.stderr


def blob(cache: Path) -> Path:
    return max((cache / "openvino").rglob("*.blob"), key=lambda p: p.stat().st_size)


def populated_copy(cache_dir: Path, target: Path) -> tuple[Path, str]:
    """A copy of the shared compile cache, and the model path to start with so that it matches.

    OpenVINO's blob names hash the model's path: the server must load the very file the blobs were
    compiled from (``TTS_MODEL_PATH``), not a copy of it."""
    model = cache_dir / "models" / modelfile.EMBEDDED_NAME
    assert model.is_file()
    shutil.copytree(cache_dir / "openvino", target / "openvino", copy_function=shutil.copy2)
    return target, str(model)


def test_a_damaged_compile_cache_is_rebuilt_and_the_server_serves(cache_dir: Path, tmp_path: Path,
                                                                   server: LiveServer) -> None:
    """A blob that cannot be opened as a file, whoever the server runs as. A blob of garbage (a truncated one)
    is rebuilt and rewritten in tests/app/runtime/test_compile_cache.py, in process: each case here costs a
    fresh compile (12-20 s on 2 vCPUs), and both go through the same path."""
    cache, model = populated_copy(cache_dir, tmp_path / "cache")
    victim = blob(cache)
    victim.unlink()
    victim.mkdir()
    with live_server(cache, tmp_path, quiet_window_s="0", model_path=model, backend="openvino") as damaged:
        assert_same_speech(speak(damaged), speak(server))
        info = httpx.get(f"{damaged.url}/v1/info", timeout=10).json()
        assert info["resolved"]["backend"] == "openvino"
        assert info["resolved"]["from_cache"] is False  # the cache held blobs: none was imported, it compiled again


@needs_unshare
def test_a_read_only_cache_with_a_compiled_model_serves_without_writing(cache_dir: Path, tmp_path: Path,
                                                                         server: LiveServer) -> None:
    cache, model = populated_copy(cache_dir, tmp_path / "cache")
    before = sorted(str(p) for p in cache.rglob("*"))
    setup = f"mount --bind {shlex.quote(str(cache))} {shlex.quote(str(cache))} && " \
            f"mount -o remount,ro,bind {shlex.quote(str(cache))}"
    with live_server(cache, tmp_path, prefix=in_namespace(setup), quiet_window_s="0", model_path=model,
                     backend="openvino") as readonly:
        assert_same_speech(speak(readonly), speak(server))
        info = httpx.get(f"{readonly.url}/v1/info", timeout=10).json()
        assert info["resolved"]["from_cache"] is True
    assert sorted(str(p) for p in cache.rglob("*")) == before


@needs_unshare
def test_an_empty_read_only_cache_dir_falls_back_to_a_private_temporary_one(tmp_path: Path,
                                                                              server: LiveServer) -> None:
    cache, scratch = tmp_path / "cache", tmp_path / "scratch"
    cache.mkdir()
    scratch.mkdir()
    setup = f"mount --bind {shlex.quote(str(cache))} {shlex.quote(str(cache))} && " \
            f"mount -o remount,ro,bind {shlex.quote(str(cache))} && export TMPDIR={shlex.quote(str(scratch))}"
    # ONNX Runtime (`SPEECH_BACKEND`): what is tested is where the server writes, and OpenVINO would compile afresh
    # (12-20 s). The same form on the same runtime as the session's server: the same bytes.
    with live_server(cache, tmp_path, prefix=in_namespace(setup), quiet_window_s="0",
                     backend=SPEECH_BACKEND) as fallback:
        assert speak(fallback) == speak(server)
    assert not list(cache.iterdir())
    assert any(scratch.rglob(modelfile.EMBEDDED_NAME))


@needs_unshare
def test_a_full_disk_while_writing_the_compile_cache_still_serves(cache_dir: Path, tmp_path: Path,
                                                                  server: LiveServer) -> None:
    cache = tmp_path / "cache"
    cache.mkdir()
    models = cache_dir / "models"
    # Room for the model (92 MB) but not for what the shipped default (auto) writes beside it: on ONNX Runtime the
    # timed copy, the fused form and the optimized graph, on OpenVINO the compiled blob (over 300 MB). Each write
    # fails with ENOSPC, and the server serves all the same.
    setup = (f"mount -t tmpfs -o size=120m tmpfs {shlex.quote(str(cache))} && mkdir {shlex.quote(str(cache))}/models"
             f" && cp -p {shlex.quote(str(models))}/{modelfile.EMBEDDED_NAME}* {shlex.quote(str(cache))}/models/")
    with live_server(cache, tmp_path, prefix=in_namespace(setup), quiet_window_s="0") as full:
        assert_same_speech(speak(full), speak(server))
        assert httpx.get(f"{full.url}/readyz", timeout=10).status_code == 200
    assert "No space left on device" in full.log()  # the disk was full when it wrote
