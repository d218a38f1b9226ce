"""A new instance speaks its first request with the one engine it serves every later one with, on the real model and
a real server: the request sent the moment /readyz turns 200 gets the bytes the same request gets later, under
OpenVINO as under ONNX Runtime; the inference process that serves was started, and its load begun, before the
server's own imports (`app.runtime.early`)."""

from __future__ import annotations

import re
from pathlib import Path

import httpx
import psutil
import pytest

from tests.conftest import LiveServer, live_server

BODY = {"input": "Welcome back.", "voice": "af_heart", "response_format": "pcm"}


def info(server: LiveServer) -> dict[str, object]:
    found: dict[str, object] = httpx.get(f"{server.url}/v1/info", timeout=10).json()
    return found


@pytest.mark.parametrize("backend", ["openvino", "onnxruntime"])
def test_the_first_request_at_ready_gets_the_bytes_every_later_one_gets(cache_dir: Path, tmp_path: Path,
                                                                         backend: str) -> None:
    with live_server(cache_dir, tmp_path, quiet_window_s="0", backend=backend) as server:
        first = httpx.post(f"{server.url}/v1/audio/speech", timeout=120, json=BODY)  # the moment /readyz turned 200
        served = info(server)
        later = httpx.post(f"{server.url}/v1/audio/speech", timeout=120, json=BODY)
        after = info(server)
        # The process that served was started before the server's imports (app.runtime.early), not after them...
        early = re.search(r"inference process (\d+) started before the server's imports", server.log())
        assert early is not None, server.log()
        children = psutil.Process(server.process.pid).children(recursive=True)
        assert int(early.group(1)) in [child.pid for child in children]
        # ...and it had begun its load before the server asked (python -m app sent it the Spec early).
        assert "the load was begun at start, before the server asked" in server.log()
    assert first.status_code == later.status_code == 200
    assert served["frontend"] == "misaki" and served["active_backend"] == backend
    assert set(served["inferences_by_backend"]) == set(after["inferences_by_backend"]) == {backend}
    assert first.content == later.content and len(first.content) > 24000
