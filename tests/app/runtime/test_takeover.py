"""The fast form serves first, the primary takes over behind it (`app.runtime.local`), with backends that
block on demand: the switch with inferences in flight loses and cuts none, and a primary that fails to
load leaves the bridge serving, logged and reported. The real model's switch: tests/app/test_coldstart.py."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest

from app.runtime.backends.base import Inference, Resolved
from app.runtime.local import LocalRuntime
from app.runtime.spec import Options, Spec
from app.settings import Settings
from app.sizing import PoolShape

STYLE = np.zeros((1, 256), dtype=np.float32)


class Backend:
    """Audio that names its maker (every sample is ``mark``); ``gate`` holds each inference, ``loading`` the load."""

    def __init__(self, name: str, mark: float, *, fail_load: bool = False) -> None:
        self.name = name
        self.mark = mark
        self.fail_load = fail_load
        self.gate = threading.Event()
        self.gate.set()
        self.loading = threading.Event()
        self.loading.set()
        self.running = 0
        self.unloaded_while_running = False
        self._loaded = False
        self._lock = threading.Lock()

    @property
    def loaded(self) -> bool:
        return self._loaded

    def load(self) -> Resolved:
        self.loading.wait(10)
        if self.fail_load:
            raise RuntimeError("injected primary load failure")
        self._loaded = True
        return Resolved(self.name, 2, 2, 2, "f32", 0.0, None)

    def unload(self) -> None:
        with self._lock:
            self.unloaded_while_running |= self.running > 0
        self._loaded = False

    def infer(self, slot: int, tokens: npt.NDArray[np.int64], style: npt.NDArray[np.float32],
              speed: float) -> npt.NDArray[np.float32]:
        assert self._loaded, f"{self.name} ran unloaded"
        with self._lock:
            self.running += 1
        try:
            self.gate.wait(10)
            return np.full(600 * tokens.shape[1], self.mark, dtype=np.float32)
        finally:
            with self._lock:
                self.running -= 1

    def infer_timed(self, slot: int, tokens: npt.NDArray[np.int64], style: npt.NDArray[np.float32],
                    speed: float) -> Inference:
        return Inference(self.infer(slot, tokens, style, speed))

    def files(self) -> list[Path]:
        return []


def tokens(n: int) -> npt.NDArray[np.int64]:
    return np.zeros((1, n), dtype=np.int64)


def wait_until(condition: object, timeout_s: float = 5.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():  # type: ignore[operator]
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.005)


def test_the_switch_with_inferences_in_flight_loses_and_cuts_none() -> None:
    primary, bridge = Backend("openvino", 1.0), Backend("onnxruntime", 2.0)
    primary.loading.clear()
    bridge.gate.clear()  # the bridge's inferences hold until the primary has taken over
    runtime = LocalRuntime(primary, bridge)
    runtime.load_bridged(wait_for_request=False)  # as at start: the primary loads at once, behind
    with ThreadPoolExecutor(4) as pool:
        in_flight = [pool.submit(runtime.infer_named, slot % 2, tokens(10 + slot), STYLE, 1.0) for slot in range(3)]
        wait_until(lambda: bridge.running == 3)
        primary.loading.set()
        wait_until(lambda: runtime.active_name == "openvino")
        assert bridge.loaded  # three inferences still run on it: it stays until the last ends
        after = [pool.submit(runtime.infer_named, 0, tokens(7), STYLE, 1.0) for _ in range(2)]
        assert [f.result(5)[1] for f in after] == ["openvino", "openvino"]
        bridge.gate.set()
        results = [f.result(5) for f in in_flight]
    # Every inference begun on the bridge finished there, whole, after the switch.
    for n, (inference, name) in enumerate(results):
        audio = inference.audio
        assert name == "onnxruntime" and len(audio) == 600 * (10 + n) and np.all(audio == 2.0)
    wait_until(lambda: not bridge.loaded)  # dropped by the last inference that used it
    assert not bridge.unloaded_while_running
    assert runtime.served == {"onnxruntime": 3, "openvino": 2}
    assert runtime.primary_error is None


def test_at_a_restore_the_primary_waits_for_the_bridge_to_serve_first() -> None:
    primary, bridge = Backend("openvino", 1.0), Backend("onnxruntime", 2.0)
    runtime = LocalRuntime(primary, bridge)
    runtime.load_bridged()
    time.sleep(0.2)
    assert not primary.loaded and runtime.active_name == "onnxruntime"
    runtime.infer(0, tokens(5), STYLE, 1.0)
    wait_until(lambda: runtime.active_name == "openvino")
    runtime.unload()


def test_a_failed_background_load_leaves_the_bridge_serving_and_reported() -> None:
    primary, bridge = Backend("openvino", 1.0, fail_load=True), Backend("onnxruntime", 2.0)
    runtime = LocalRuntime(primary, bridge)
    reported: list[str] = []
    runtime.on_primary_failed = reported.append
    runtime.load_bridged(wait_for_request=False)
    wait_until(lambda: runtime.primary_error is not None)
    assert runtime.primary_error == "RuntimeError: injected primary load failure"
    assert reported == [runtime.primary_error]  # what /v1/info shows, handed to whoever listens
    for _ in range(3):
        inference, name = runtime.infer_named(0, tokens(4), STYLE, 1.0)
        audio = inference.audio
        assert name == "onnxruntime" and np.all(audio == 2.0)
    assert runtime.active_name == "onnxruntime" and bridge.loaded
    runtime.unload()
    primary.fail_load = False
    runtime.load_primary()  # the next load tries the primary again, and clears the report
    assert runtime.primary_error is None and runtime.active_name == "openvino"


@pytest.mark.parametrize(("backend", "streams", "options", "bridged"), [
    ("openvino", 2, Options(), True),
    ("openvino", 1, Options(), True),
    ("onnxruntime", 2, Options(), False),  # its first requests are made by the same form as the later ones
    ("onnxruntime", 1, Options(), False),
    ("openvino", 2, Options(bridge=False), False),  # the benchmark measuring the form alone
])
def test_only_an_openvino_primary_gets_the_bridge_in_front(backend: str, streams: int, options: Options,
                                                          bridged: bool) -> None:
    spec = Spec(settings=Settings(backend=backend), model_path=Path("model.onnx"), shape=PoolShape(streams, 1),
                writable=Path("w"), options=options)
    assert spec.has_bridge is bridged


def test_the_dropped_bridge_is_handed_back_to_the_system(monkeypatch: pytest.MonkeyPatch) -> None:
    """Idle at the takeover or dropped by its last inference, the bridge's freed memory is trimmed at once."""
    from lifecycle import trim

    trims: list[bool] = []
    monkeypatch.setattr(trim, "collect_and_trim", lambda: trims.append(True) or True)
    primary, bridge = Backend("openvino", 1.0), Backend("onnxruntime", 2.0)
    runtime = LocalRuntime(primary, bridge)
    runtime.load_bridged(wait_for_request=False)  # nothing runs on the bridge: it is idle at the takeover
    wait_until(lambda: runtime.active_name == "openvino" and not bridge.loaded and trims)
    time.sleep(0.05)
    assert trims == [True]  # once, for the bridge
    runtime.unload()


class Filed(Backend):
    """A backend whose model is a real file, read at load (as ONNX Runtime reads its graph into its heap)."""

    def __init__(self, name: str, path: Path) -> None:
        super().__init__(name, 0.5)
        self.path = path

    def load(self) -> Resolved:
        self.path.read_bytes()
        return super().load()

    def files(self) -> list[Path]:
        return [self.path]


def test_the_runtimes_files_leave_the_page_cache_after_a_load_and_after_inferences(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """What a runtime read into its own memory is billed twice while it stays cached: `settle` drops it once the
    load is done, and again (rate-limited) after inferences, which read more of OpenVINO's blob."""
    from app.runtime import local
    from lifecycle.pagecache import resident_bytes

    model = tmp_path / "model.bin"
    model.write_bytes(np.random.default_rng(0).bytes(8 << 20))
    runtime = LocalRuntime(Filed("openvino", model))
    model.read_bytes()
    if resident_bytes(model) < (4 << 20):
        pytest.skip(f"{tmp_path} keeps no page cache to measure (tmpfs or a network file system?)")
    runtime.load_primary()
    assert resident_bytes(model) < (1 << 20)
    model.read_bytes()  # something reads it again while serving
    monkeypatch.setattr(local, "SETTLE_S", 3600.0)
    runtime.infer(0, tokens(5), STYLE, 1.0)
    assert resident_bytes(model) > (4 << 20)  # not yet: the last eviction was just now
    monkeypatch.setattr(local, "SETTLE_S", 0.0)
    runtime.infer(0, tokens(5), STYLE, 1.0)
    assert resident_bytes(model) < (1 << 20)


@pytest.mark.parametrize("in_process", [False, True])
def test_a_release_starts_the_next_inference_process_and_in_process_nothing(cache_dir: Path,
                                                                           in_process: bool) -> None:
    from app.runtime.proxy import ProcessRuntime
    from app.services import build_engine
    from app.sizing import read_budget

    built = build_engine(Settings(cache_dir=cache_dir, backend="openvino"), read_budget(),
                         Options(in_process=in_process))
    state = built.state
    try:
        assert state.runtime is built.engine.runtime and state.frontend is built.engine.frontend
        if in_process:
            assert state.standby is None
        else:
            assert isinstance(state.runtime, ProcessRuntime) and state.standby == state.runtime.idle_standby
    finally:
        state.close()


class Packing(Backend):
    """A bridge that records whether `LocalRuntime.load_bridged` let it pack its weights as it opens."""

    def __init__(self, name: str, mark: float) -> None:
        super().__init__(name, mark)
        self.pack_at_open: bool | None = None


def test_a_restore_opens_the_bridge_unpacked_and_a_start_packed() -> None:
    """At a restore a request waits on the opening (unpacked opens faster); at a start the bridge opens beside the
    server's imports, and its first inference would pay for the packing."""
    primary, bridge = Backend("openvino", 1.0), Packing("onnxruntime", 2.0)
    runtime = LocalRuntime(primary, bridge)
    runtime.load_bridged()
    assert bridge.pack_at_open is False
    runtime.infer(0, tokens(5), STYLE, 1.0)
    wait_until(lambda: runtime.active_name == "openvino" and not bridge.loaded)
    runtime.unload()
    runtime.load_bridged(wait_for_request=False)
    assert bridge.pack_at_open is True
    runtime.unload()
