"""The fast form serves first, the primary takes over behind it (`app.runtime.local`), with backends that
block on demand: the switch with inferences in flight loses and cuts none, and a primary that fails to
load leaves the bridge serving, logged and reported. The real model's switch: tests/app/test_coldstart.py."""

from __future__ import annotations

import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from unittest import mock

import numpy as np
import numpy.typing as npt
import pytest

from app.runtime.backends.base import Inference, Resolved
from app.runtime.local import LocalRuntime
from app.runtime.protocol import WIDE
from app.runtime.spec import Spec
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


def test_a_held_bridge_loads_the_primary_only_once_claimed_and_then_served() -> None:
    """A standby while released (``TTS_RELEASED_BRIDGE``): the bridge opens at once, the primary neither with time
    (no `PRIMARY_WAIT_S` fallback) nor on a warm-up; once claimed it waits for the bridge's first inference."""
    primary, bridge = Backend("openvino", 1.0), Backend("onnxruntime", 2.0)
    runtime = LocalRuntime(primary, bridge)
    with mock.patch("app.runtime.local.PRIMARY_WAIT_S", 0.05):
        runtime.load_bridged(wait_for_request=True, hold=True)
        time.sleep(0.3)
        assert bridge.loaded and not primary.loaded and runtime.active_name == "onnxruntime"
        runtime.claim()
        time.sleep(0.02)
        assert not primary.loaded  # claimed, not yet served: the request's inference comes first
        assert runtime.infer_named(0, tokens(5), STYLE, 1.0)[1] == "onnxruntime"
        wait_until(lambda: runtime.active_name == "openvino")
    runtime.unload()
    assert not primary.loaded and not bridge.loaded


def test_a_held_bridge_released_again_loads_nothing_more() -> None:
    primary, bridge = Backend("openvino", 1.0), Backend("onnxruntime", 2.0)
    runtime = LocalRuntime(primary, bridge)
    runtime.load_bridged(wait_for_request=True, hold=True)
    runtime.unload()  # joins the held loader at once
    assert not primary.loaded and not bridge.loaded


def test_a_failed_background_load_leaves_the_bridge_serving_logged_and_reported(
        caplog: pytest.LogCaptureFixture) -> None:
    primary, bridge = Backend("openvino", 1.0, fail_load=True), Backend("onnxruntime", 2.0)
    runtime = LocalRuntime(primary, bridge)
    reported: list[str] = []
    runtime.on_primary_failed = reported.append
    with caplog.at_level(logging.ERROR, logger="app.runtime.local"):
        runtime.load_bridged(wait_for_request=False)
        wait_until(lambda: runtime.primary_error is not None)
    assert runtime.primary_error == "RuntimeError: injected primary load failure"
    assert reported == [runtime.primary_error]
    assert "failed to load behind the bridge" in caplog.text
    for _ in range(3):
        inference, name = runtime.infer_named(0, tokens(4), STYLE, 1.0)
        audio = inference.audio
        assert name == "onnxruntime" and np.all(audio == 2.0)
    assert runtime.active_name == "onnxruntime" and bridge.loaded
    runtime.unload()
    primary.fail_load = False
    runtime.load_primary()  # the next load tries the primary again, and clears the report
    assert runtime.primary_error is None and runtime.active_name == "openvino"


@pytest.mark.parametrize(("settings", "streams", "bridged"), [
    (Settings(backend="openvino"), 2, True),
    (Settings(backend="openvino"), 1, True),
    (Settings(backend="onnxruntime"), 2, True),  # one session of 2 threads before two of 1
    (Settings(backend="onnxruntime"), 1, False),  # the bridge would be the primary again
    (Settings(backend="onnxruntime", runtime_defaults=True), 2, False),  # one shared session already
    (Settings(backend="openvino", restore_bridge=False), 2, False),
])
def test_which_primaries_get_the_bridge_in_front(settings: Settings, streams: int, bridged: bool) -> None:
    spec = Spec(settings=settings, model_path=Path("model.onnx"), shape=PoolShape(streams, 1), writable=Path("w"))
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


def test_a_kept_bridge_serves_the_wide_slot_beside_the_primary() -> None:
    primary, bridge = Backend("openvino", 1.0), Backend("onnxruntime", 2.0)
    runtime = LocalRuntime(primary, bridge, keep_bridge=True)
    assert runtime.has_wide and not LocalRuntime(primary, bridge).has_wide and not LocalRuntime(primary).has_wide
    primary.loading.clear()
    runtime.load_bridged(wait_for_request=False)
    assert runtime.infer_named(WIDE, tokens(3), STYLE, 1.0)[1] == "onnxruntime"  # before the takeover: the bridge
    primary.loading.set()
    wait_until(lambda: runtime.active_name == "openvino")
    time.sleep(0.05)
    assert bridge.loaded  # kept, where it would have been dropped (the test above)
    assert [runtime.infer_named(slot, tokens(3), STYLE, 1.0)[1] for slot in (0, 1, WIDE)] == [
        "openvino", "openvino", "onnxruntime"]
    runtime.unload()
    assert not bridge.loaded and not primary.loaded


def test_a_wide_backend_loads_behind_the_primary_and_serves_the_wide_slot() -> None:
    primary, bridge, wide = Backend("openvino", 1.0), Backend("onnxruntime", 2.0), Backend("openvino", 3.0)
    runtime = LocalRuntime(primary, bridge, keep_bridge=True, wide=wide)
    assert runtime.has_wide and not runtime.keep_bridge  # the wide backend replaces the kept bridge
    wide.loading.clear()
    runtime.load_bridged(wait_for_request=False)
    wait_until(lambda: runtime.active_name == "openvino" and not bridge.loaded)  # dropped once the primary serves
    marks = lambda: [runtime.infer(slot, tokens(3), STYLE, 1.0)[0] for slot in (0, 1, WIDE)]  # noqa: E731
    assert marks() == [1.0, 1.0, 1.0]  # the wide backend still loading: the wide slot on the primary's first
    wide.loading.set()
    wait_until(lambda: marks()[2] == 3.0)
    assert marks() == [1.0, 1.0, 3.0] and runtime.wide_error is None
    runtime.unload()
    assert not wide.loaded and not primary.loaded
    # A restore without the bridge loads it behind the primary too.
    runtime.load_primary()
    wait_until(lambda: marks()[2] == 3.0)
    runtime.unload()
    assert not wide.loaded


def test_a_wide_backend_that_fails_to_load_leaves_the_wide_slot_on_a_stream(caplog: pytest.LogCaptureFixture) -> None:
    primary, wide = Backend("openvino", 1.0), Backend("openvino", 3.0, fail_load=True)
    runtime = LocalRuntime(primary, wide=wide)
    with caplog.at_level(logging.ERROR, logger="app.runtime.local"):
        runtime.load_primary()
        wait_until(lambda: runtime.wide_error is not None)
    assert "injected primary load failure" in (runtime.wide_error or "") and "wide session" in caplog.text
    assert runtime.infer(WIDE, tokens(3), STYLE, 1.0)[0] == 1.0 and runtime.active_name == "openvino"
    runtime.unload()


@pytest.mark.parametrize(("settings", "streams", "wide", "primary"), [
    (Settings(backend="openvino"), 2, True, False),
    (Settings(backend="onnxruntime"), 2, True, False),
    (Settings(backend="openvino"), 1, False, False),  # the bridge's threads are the one stream's: nothing wider
    (Settings(backend="openvino", wide_chunk_tokens=0), 2, False, False),
    (Settings(backend="openvino", restore_bridge=False), 2, False, False),
    (Settings(backend="openvino", wide_form="primary"), 2, True, True),
    (Settings(backend="openvino", wide_form="primary", restore_bridge=False), 2, True, True),  # needs no bridge
    (Settings(backend="openvino", wide_form="primary"), 1, False, False),
    (Settings(backend="openvino", wide_form="primary", wide_chunk_tokens=0), 2, False, False),
    (Settings(backend="onnxruntime", wide_form="primary"), 2, True, False),  # ONNX Runtime's is the bridge
])
def test_which_pools_have_a_wide_session_and_what_it_runs(settings: Settings, streams: int, wide: bool,
                                                          primary: bool) -> None:
    spec = Spec(settings=settings, model_path=Path("model.onnx"), shape=PoolShape(streams, 1), writable=Path("w"))
    assert spec.wide is wide and spec.wide_primary is primary


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


@pytest.mark.parametrize(("process", "bridge", "kept"), [(True, True, True), (False, True, False)])
def test_a_released_bridge_needs_the_inference_process_and_a_bridge(
        cache_dir: Path, caplog: pytest.LogCaptureFixture, process: bool, bridge: bool, kept: bool) -> None:
    from app.services import build_engine
    from app.sizing import read_budget

    settings = Settings(cache_dir=cache_dir, inference_process=process, restore_bridge=bridge, backend="openvino",
                        released_bridge=True)
    with caplog.at_level(logging.WARNING, logger="app.services"):
        engine, _ = build_engine(settings, read_budget())
    try:
        assert (engine.standby is not None) is kept
        assert ("TTS_RELEASED_BRIDGE is ignored" in caplog.text) is not kept
    finally:
        engine.close()


class Repacking(Backend):
    """A bridge opened with its weights unpacked (`OnnxRuntimeBackend.repack`): ``repacked`` counts the packs done."""

    def __init__(self, name: str, mark: float, *, fail: bool = False) -> None:
        super().__init__(name, mark)
        self.fail = fail
        self.pack_at_open: bool | None = None
        """What `LocalRuntime.load_bridged` chose for this load."""
        self.repacked = 0
        self.primary: Backend | None = None
        self.primary_loaded_at_repack: bool | None = None

    def repack(self) -> bool:
        if self.primary is not None:
            self.primary_loaded_at_repack = self.primary.loaded
        if self.fail:
            raise RuntimeError("injected repack failure")
        self.repacked += 1
        return self.repacked == 1


@pytest.mark.parametrize("keep", [True, False])
def test_a_bridge_kept_as_the_wide_session_is_repacked_after_the_takeover_and_a_dropped_one_is_not(keep: bool) -> None:
    primary, bridge = Backend("openvino", 1.0), Repacking("onnxruntime", 2.0)
    bridge.primary = primary
    runtime = LocalRuntime(primary, bridge, keep_bridge=keep)
    runtime.load_bridged()  # a restore: a request waits on the opening
    assert bridge.pack_at_open is False
    runtime.infer(0, tokens(5), STYLE, 1.0)
    wait_until(lambda: runtime.active_name == "openvino")
    if keep:
        wait_until(lambda: bridge.repacked == 1)
        assert bridge.primary_loaded_at_repack  # behind the primary, never in front of a waiting request
        assert runtime.infer_named(WIDE, tokens(3), STYLE, 1.0)[1] == "onnxruntime"
    else:
        wait_until(lambda: not bridge.loaded)
        assert bridge.repacked == 0
    runtime.unload()


def test_a_standby_and_a_start_open_the_bridge_packed_and_a_failed_repack_leaves_it_serving(
        caplog: pytest.LogCaptureFixture) -> None:
    primary, bridge = Backend("openvino", 1.0), Repacking("onnxruntime", 2.0)
    runtime = LocalRuntime(primary, bridge)
    runtime.load_bridged(wait_for_request=True, hold=True)
    assert bridge.pack_at_open is True  # while released: nobody waits on a standby's opening
    runtime.unload()
    runtime.load_bridged(wait_for_request=False)  # a start: beside the imports, packed (its first inference is dearer)
    assert bridge.pack_at_open is True
    runtime.unload()
    failing = Repacking("onnxruntime", 2.0, fail=True)
    runtime = LocalRuntime(Backend("openvino", 1.0), failing, keep_bridge=True)
    with caplog.at_level(logging.ERROR):
        runtime.load_bridged()
        assert runtime.infer_named(0, tokens(4), STYLE, 1.0)[1] == "onnxruntime"
        wait_until(lambda: "packing the bridge's weights failed" in caplog.text)
    assert runtime.active_name == "openvino" and failing.loaded
    assert runtime.infer_named(WIDE, tokens(4), STYLE, 1.0)[1] == "onnxruntime"  # still the wide session
    runtime.unload()
