"""A load after the inference process died starts a fresh one, even before its exit is reported; a process that dies
during its load is replaced once."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import numpy as np
import psutil
import pytest

from app.runtime.backends.base import Resolved
from app.runtime.proxy import ProcessRuntime, WorkerGone
from app.runtime.spec import Spec
from app.settings import Settings
from app.sizing import PoolShape
from tests.app.runtime.children import inference_children, only_child
from tests.app.runtime.lingering_child import LINGER_S


def test_a_load_while_the_dead_process_lingers_waits_for_it_and_starts_another(tmp_path: Path) -> None:
    settings = Settings.from_env({}, cache_dir=tmp_path)
    runtime = ProcessRuntime(Spec(settings=settings, model_path=tmp_path / "m.onnx", shape=PoolShape(1, 1),
                                  writable=tmp_path))
    runtime.child_module = "tests.app.runtime.lingering_child"
    runtime.load()
    (child,) = inference_children("tests.app.runtime.lingering_child")
    with pytest.raises(WorkerGone):
        runtime.infer(0, np.zeros((1, 8), np.int64), np.zeros((1, 256), np.float32), 1.0)
    assert not runtime.intact()
    assert child.is_running() and child.status() != psutil.STATUS_ZOMBIE  # the window: answers over, exit not yet

    loaded: list[Resolved] = []
    started = time.monotonic()
    loader = threading.Thread(target=lambda: loaded.append(runtime.load()), daemon=True)
    loader.start()
    loader.join(LINGER_S + 20)
    try:
        # Before the fix the load went to the dying process and waited for an answer that never came.
        assert loaded, "the load never returned"
        assert only_child("tests.app.runtime.lingering_child") != child.pid
        assert not psutil.pid_exists(child.pid)  # waited for, not left a zombie
        assert runtime.intact() and runtime.loaded
        assert time.monotonic() - started < LINGER_S + 15
    finally:
        runtime.unload()


def _dying(tmp_path: Path, deaths: int) -> ProcessRuntime:
    (tmp_path / "deaths").write_text(str(deaths))
    settings = Settings.from_env({}, cache_dir=tmp_path)
    runtime = ProcessRuntime(Spec(settings=settings, model_path=tmp_path / "m.onnx", shape=PoolShape(1, 1),
                                  writable=tmp_path))
    runtime.child_module = "tests.app.runtime.dying_child"
    return runtime


def test_a_process_killed_during_its_load_is_replaced_once_and_the_load_succeeds(tmp_path: Path) -> None:
    runtime = _dying(tmp_path, deaths=1)
    try:
        assert runtime.load().backend == "fake"
        assert runtime.intact() and runtime.loaded
        assert (tmp_path / "loads").read_text() == "2"
        assert len(inference_children("tests.app.runtime.dying_child")) == 1  # the killed one reaped
    finally:
        runtime.unload()


def test_a_second_death_during_the_load_fails_it_with_worker_gone(tmp_path: Path) -> None:
    runtime = _dying(tmp_path, deaths=5)
    with pytest.raises(WorkerGone):
        runtime.load()
    assert (tmp_path / "loads").read_text() == "2"  # once more, not until one lives
    assert not runtime.loaded
    assert inference_children("tests.app.runtime.dying_child") == []
