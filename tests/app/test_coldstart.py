"""A new instance speaks from the fast form (the ONNX Runtime bridge) while the primary loads behind it
(`app.runtime.local`), on the real model and a real server. The switch with requests in flight, and a
failed background load, with blocking fakes: tests/app/runtime/test_takeover.py."""

from __future__ import annotations

import re
from pathlib import Path

import httpx
import numpy as np
import psutil
import pytest

from app.tune.outputcheck import check_chunk
from tests.conftest import LiveServer, live_server, until_primary

TEXT = "Welcome back."


def speak(server: LiveServer) -> np.ndarray:
    response = httpx.post(f"{server.url}/v1/audio/speech", timeout=120,
                          json={"input": TEXT, "voice": "af_heart", "response_format": "pcm"})
    assert response.status_code == 200, response.text
    return np.frombuffer(response.content, dtype="<i2").astype(np.float32) / 32767


def info(server: LiveServer) -> dict[str, object]:
    found: dict[str, object] = httpx.get(f"{server.url}/v1/info", timeout=10).json()
    return found


def test_the_first_request_after_start_is_served_by_the_bridge_and_passes_the_output_check(
        cache_dir: Path, tmp_path: Path) -> None:
    with live_server(cache_dir, tmp_path, primary=False, quiet_window_s="0") as server:
        first = speak(server)  # sent the moment /readyz turned 200
        served = info(server)
        assert served["inferences_by_backend"] == {"onnxruntime": 1}, served  # before OpenVINO served any
        assert served["backend"] == "openvino" and served["primary_error"] is None
        after = until_primary(lambda: info(server))
        assert after["active_backend"] == "openvino" and after["primary_error"] is None
        primary = speak(server)
        assert info(server)["inferences_by_backend"] == {"onnxruntime": 1, "openvino": 1}
        check = check_chunk("welcome", primary, first)  # the benchmark's output check, OpenVINO as reference
        assert check.passed, check
        # The process that served was started before the server's imports (app.runtime.early), not after them.
        early = re.search(r"inference process (\d+) started before the server's imports", server.log())
        assert early is not None, server.log()
        children = psutil.Process(server.process.pid).children(recursive=True)
        assert int(early.group(1)) in [child.pid for child in children]
        # ...and it had begun opening the bridge before the server asked (python -m app sent it the Spec early).
        assert "the bridged load was begun at start, before the server asked" in server.log()


def test_a_primary_that_fails_to_load_leaves_the_bridge_serving_and_says_so_in_info(
        cache_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAULT_PRIMARY_LOAD", "1")  # inherited by the server and its inference process
    with live_server(cache_dir, tmp_path, module="tests.reliability.faulty_app", quiet_window_s="0") as server:
        found = info(server)  # live_server waited for the primary: it failed instead
        assert "injected primary load fault" in str(found["primary_error"])
        assert found["active_backend"] == "onnxruntime"
        for _ in range(2):
            assert len(speak(server)) > 12000
        assert info(server)["inferences_by_backend"] == {"onnxruntime": 2}
        assert httpx.get(f"{server.url}/readyz").status_code == 200


def test_an_onnx_runtime_server_speaks_its_first_request_at_ready_as_it_speaks_every_later_one(
        cache_dir: Path, tmp_path: Path) -> None:
    """No bridge in front of an ONNX Runtime primary, and ready only with misaki loaded: the request sent the moment
    /readyz turns 200 gets the bytes the same request gets later."""
    body = {"input": "Welcome back, it is 3:30 pm.", "voice": "af_heart", "response_format": "pcm"}
    with live_server(cache_dir, tmp_path, primary=False, quiet_window_s="0", backend="onnxruntime") as server:
        first = httpx.post(f"{server.url}/v1/audio/speech", timeout=120, json=body)
        served = info(server)
        later = httpx.post(f"{server.url}/v1/audio/speech", timeout=120, json=body)
    assert first.status_code == later.status_code == 200
    assert served["frontend"] == "misaki" and not served["bridge_serving"]
    assert set(served["inferences_by_backend"]) == {"onnxruntime"} and served["active_backend"] == "onnxruntime"
    assert first.content == later.content and len(first.content) > 24000
