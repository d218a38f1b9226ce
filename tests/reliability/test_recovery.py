"""Recovery without traffic, on real servers: a restore that failed once comes back by itself, and a model
that stays broken turns liveness off within the documented time (`lifecycle.manager.MAX_FAILURES`)."""

from __future__ import annotations

import time
from pathlib import Path

import httpx
import pytest

from bench.server import free_port, launch
from lifecycle.manager import BACKOFF_S, MAX_FAILURES
from tests.conftest import ROOT, SPEECH_BACKEND, live_server, stop

TEXT = "Back again, with nobody asking."


def post(url: str) -> httpx.Response:
    return httpx.post(f"{url}/v1/audio/speech", timeout=120,
                      json={"input": TEXT, "voice": "af_heart", "response_format": "pcm"})


def test_a_restore_that_failed_once_is_ready_again_with_no_traffic(cache_dir: Path, tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    marker = tmp_path / "fail-next-load"
    monkeypatch.setenv("FAULT_LOAD_FAILS_FILE", str(marker))  # inherited by the server and its inference process
    # On ONNX Runtime the restore loads the same form again, so its audio is the warm audio exactly.
    with live_server(cache_dir, tmp_path, module="tests.reliability.faulty_app", quiet_window_s="0",
                     admin_token="t", backend=SPEECH_BACKEND) as server:
        expected = post(server.url)
        assert expected.status_code == 200
        assert httpx.post(f"{server.url}/v1/lifecycle/release", headers={"Authorization": "Bearer t"},
                          timeout=60).status_code == 200
        marker.touch()
        failed = post(server.url)
        assert failed.status_code == 503 and "injected load fault" in failed.json()["error"]["message"]
        assert not marker.exists()
        down = httpx.get(f"{server.url}/v1/lifecycle", timeout=10).json()
        assert down["state"] == "failed" and down["failures_in_a_row"] == 1
        started = time.monotonic()
        while httpx.get(f"{server.url}/readyz", timeout=10).status_code != 200:  # no request in between
            assert time.monotonic() - started < 30, "not ready again within 30 s"
            time.sleep(0.2)
        assert httpx.get(f"{server.url}/healthz", timeout=10).status_code == 200
        again = post(server.url)
        assert again.status_code == 200 and again.content == expected.content
        lifecycle = httpx.get(f"{server.url}/v1/lifecycle", timeout=10).json()
        assert lifecycle["transitions"]["failed->restoring"] == 1 and lifecycle["failures_in_a_row"] == 0
        # The one retry began BACKOFF_S after the failure (the first step of the documented backoff): when the
        # restore that made it warm began is when it turned warm less how long that restore took.
        retried_after = lifecycle["since"] - lifecycle["last_restore_s"] - down["since"]
        assert BACKOFF_S - 0.01 <= retried_after < 2 * BACKOFF_S, retried_after


def test_a_model_file_that_stays_broken_turns_liveness_off_in_the_documented_time(tmp_path: Path) -> None:
    model = tmp_path / "model.onnx"
    model.write_bytes(b"not an onnx model" * 1000)
    attempts = MAX_FAILURES  # as shipped: 2 + 4 + 8 + 16 s of waits (docs/operations.md)
    waits = sum(BACKOFF_S * 2 ** i for i in range(attempts - 1))
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    log_path = tmp_path / "server.log"
    env = {"TTS_CACHE_DIR": str(tmp_path / "cache"), "TTS_MODEL_PATH": str(model), "TTS_BACKEND": "onnxruntime",
           "TTS_QUIET_WINDOW_S": "0"}
    process = launch(env, port, log_path, cwd=ROOT)
    try:
        deadline = time.monotonic() + 60
        while True:  # the server starts (unready) in spite of the failed first load
            assert process.poll() is None, log_path.read_text()
            try:
                first = httpx.get(f"{url}/healthz", timeout=2)
                break
            except httpx.HTTPError:
                assert time.monotonic() < deadline, log_path.read_text()
                time.sleep(0.1)
        started = time.monotonic()
        assert httpx.get(f"{url}/readyz", timeout=5).status_code == 503
        status = first.status_code
        while status == 200:
            # Each attempt here fails in well under a second; 5 s each is a generous bound.
            assert time.monotonic() - started < waits + attempts * 5, "liveness still 200"
            time.sleep(0.05)
            status = httpx.get(f"{url}/healthz", timeout=5).status_code
        # Not sooner either: the first load failed before the server listened, a moment before `started`.
        assert time.monotonic() - started > waits - BACKOFF_S, "liveness off before every retry was made"
        health = httpx.get(f"{url}/healthz", timeout=5)
        assert health.status_code == 503 and health.json()["failures_in_a_row"] >= attempts
        assert str(model) in health.json()["last_error"] or "model" in health.json()["last_error"].lower()
        refused = post(url)
        assert refused.status_code == 503 and refused.json()["error"]["type"] == "server_error"
        assert process.poll() is None  # alive, unhealthy: the platform restarts it
    finally:
        stop(process)
