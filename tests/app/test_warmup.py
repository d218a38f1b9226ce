"""Every OpenVINO stream runs one inference after each load, before it serves: at start and at a restore; ONNX
Runtime is not warmed (`app.runtime.local.WARMED_BACKENDS`). Asserted on what the runtime reports
(slots warmed, the warm-up's seconds in the restore's parts), never on a timing."""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest
from starlette.testclient import TestClient

from app.http.server import create_app
from app.runtime.backends.base import Inference, Resolved
from app.runtime.local import LocalRuntime, WarmUp
from app.settings import Settings
from tests.app.runtime.children import inference_children
from tests.reliability.test_security import assert_no_socket_and_no_telemetry

ADMIN = {"Authorization": "Bearer warm"}


class FakeBackend:
    """Records the inferences it runs, per slot."""

    def __init__(self, name: str, slots: int, streams: int | None = None) -> None:
        self.name = name
        self.slots = slots
        self.streams = slots if streams is None else streams
        self.calls: list[tuple[int, int]] = []
        self._loaded = False
        self._lock = threading.Lock()

    @property
    def loaded(self) -> bool:
        return self._loaded

    def load(self) -> Resolved:
        self._loaded = True
        return Resolved(self.name, self.slots, self.streams, self.slots, "f32", 0.0, None)

    def unload(self) -> None:
        self._loaded = False

    def infer(self, slot: int, tokens: npt.NDArray[np.int64], style: npt.NDArray[np.float32],
              speed: float) -> npt.NDArray[np.float32]:
        with self._lock:
            self.calls.append((slot, tokens.shape[1]))
        return np.zeros(600, dtype=np.float32)

    def infer_timed(self, slot: int, tokens: npt.NDArray[np.int64], style: npt.NDArray[np.float32],
                    speed: float) -> Inference:
        return Inference(self.infer(slot, tokens, style, speed))

    def files(self) -> list[Path]:
        return []


WARM = WarmUp(tokens=np.zeros((1, 12), dtype=np.int64), style=np.zeros((1, 256), dtype=np.float32))


def test_every_slot_runs_one_warm_up_inference_after_a_load_and_it_is_not_counted_as_served() -> None:
    primary = FakeBackend("openvino", 3)
    runtime = LocalRuntime(primary, warm_up=WARM)
    resolved = runtime.load()
    assert sorted(primary.calls) == [(0, 12), (1, 12), (2, 12)]
    assert resolved.warmed == 3 and resolved.warm_up_s >= 0
    assert sum(runtime.served.values()) == 0


def test_onnx_runtime_is_not_warmed() -> None:
    # ONNX Runtime's warm-up cost a start or restore a second and bought the next request nothing.
    backend = FakeBackend("onnxruntime", 2)
    assert LocalRuntime(backend, warm_up=WARM).load().warmed == 0
    assert backend.calls == []


def test_no_warm_up_without_an_input() -> None:
    primary = FakeBackend("openvino", 2)
    assert LocalRuntime(primary).load().warmed == 0
    assert primary.calls == []


def test_the_server_is_ready_only_once_every_stream_is_warm_and_restores_warm(
        cache_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The environment `python -m app` gives its inference process (app/__main__.py; tests/reliability/test_security.py
    # checks that on a real server): this app runs in the test's process, its inference process is its child.
    monkeypatch.setenv("ORT_DISABLE_TELEMETRY", "1")
    settings = Settings(cache_dir=cache_dir, backend="openvino", quiet_window_s=0, admin_token="warm")
    with TestClient(create_app(settings)) as client:
        assert client.get("/readyz").status_code == 200
        info = client.get("/v1/info").json()
        assert info["active_backend"] == "openvino"
        assert info["resolved"]["warmed"] == info["resolved"]["streams"] == info["pool"]["slots"] >= 1
        assert info["resolved"]["warm_up_s"] > 0
        assert client.get("/v1/lifecycle").json()["last_restore_parts"]["warm_up_s"] > 0
        assert info["inferences_by_backend"] == {}  # warm-up inferences serve nobody
        (child,) = inference_children()
        assert "libopenvino" in Path(f"/proc/{child.pid}/maps").read_text()
        assert_no_socket_and_no_telemetry(child)  # OpenVINO ships a telemetry client: never loaded, nowhere to send
        assert client.post("/v1/lifecycle/release", headers=ADMIN).status_code == 200
        body = {"input": "Hello there.", "voice": "af_heart", "response_format": "pcm"}
        assert client.post("/v1/audio/speech", json=body).status_code == 200
        parts = client.get("/v1/lifecycle").json()["last_restore_parts"]
        assert parts["warm_up_s"] > 0 and parts["backend_s"] > 0  # warmed before the waiting request ran
        after = client.get("/v1/info").json()
        assert after["resolved"]["warmed"] == info["pool"]["slots"]
        assert after["resolved"]["from_cache"] is True  # the restore imported the compile cache: nothing compiled
        assert set(after["inferences_by_backend"]) == {"openvino"}
