"""The runtime in this process (`app.runtime.local`): one backend serves every inference from the first after a
load, and the runtime's files leave the page cache after a load and after inferences."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest

from app.runtime.backends.base import Inference, Resolved
from app.runtime.local import LocalRuntime
from app.runtime.spec import Options
from app.settings import Settings

STYLE = np.zeros((1, 256), dtype=np.float32)


class Filed:
    """A backend whose model is a real file, read at load (as ONNX Runtime reads its graph into its heap)."""

    def __init__(self, name: str, path: Path) -> None:
        self.name = name
        self.path = path
        self.loads = 0
        self._loaded = False

    @property
    def loaded(self) -> bool:
        return self._loaded

    def load(self) -> Resolved:
        self.path.read_bytes()
        self.loads += 1
        self._loaded = True
        return Resolved(self.name, 2, 2, 2, "f32", 0.0, None)

    def unload(self) -> None:
        self._loaded = False

    def infer(self, slot: int, tokens: npt.NDArray[np.int64], style: npt.NDArray[np.float32],
              speed: float) -> npt.NDArray[np.float32]:
        assert self._loaded, f"{self.name} ran unloaded"
        return np.full(600 * tokens.shape[1], 0.5, dtype=np.float32)

    def infer_timed(self, slot: int, tokens: npt.NDArray[np.int64], style: npt.NDArray[np.float32],
                    speed: float) -> Inference:
        return Inference(self.infer(slot, tokens, style, speed))

    def files(self) -> list[Path]:
        return [self.path]


def tokens(n: int) -> npt.NDArray[np.int64]:
    return np.zeros((1, n), dtype=np.int64)


def test_one_backend_serves_from_the_first_inference_after_each_load(tmp_path: Path) -> None:
    model = tmp_path / "model.bin"
    model.write_bytes(b"weights")
    backend = Filed("openvino", model)
    runtime = LocalRuntime(backend)
    with pytest.raises(RuntimeError, match="no backend is loaded"):
        runtime.infer(0, tokens(5), STYLE, 1.0)
    for restores in (1, 2):
        assert runtime.load().backend == "openvino" and runtime.loaded and runtime.active_name == "openvino"
        runtime.infer(0, tokens(5), STYLE, 1.0)
        runtime.unload()
        assert not runtime.loaded and runtime.active_name is None and not backend.loaded
        assert backend.loads == restores
    assert runtime.served == {"openvino": 2}


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
    runtime.load()
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
    from app.services import build_engine
    from app.sizing import read_budget
    from tests.app.runtime.children import inference_children
    from tests.conftest import SPEECH_BACKEND

    built = build_engine(Settings(cache_dir=cache_dir, backend=SPEECH_BACKEND), read_budget(),
                         Options(in_process=in_process))
    state = built.state
    try:
        assert state.runtime is built.engine.runtime and state.frontend is built.engine.frontend
        before = [p.pid for p in inference_children()]  # started ahead of the first load, out of process
        assert len(before) == (0 if in_process else 1)
        state.release()
        after = [p.pid for p in inference_children()]
        if in_process:
            assert after == []
        else:
            assert len(after) == 1 and after[0] not in before  # the old one ended, the next one waits
    finally:
        state.close()
    assert inference_children() == []
