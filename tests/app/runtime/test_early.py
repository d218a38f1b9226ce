"""The inference process ``python -m app`` starts before its own imports (`app.runtime.early`): adopted by the
first child start, discarded cleanly when nobody takes it, replaced when it died first."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from app.runtime import early
from app.runtime.proxy import ProcessRuntime
from app.runtime.spec import Spec
from app.settings import Settings
from app.sizing import PoolShape

FAKE_CHILD = "tests.app.runtime.lingering_child"


@pytest.fixture(autouse=True)
def no_early_child_left() -> Iterator[None]:
    yield
    left = early.take(early.CHILD_MODULE)  # whatever a failed test left: closed and reaped
    if left is not None:
        early.discard(left)


def runtime(tmp_path: Path) -> ProcessRuntime:
    settings = Settings.from_env({}, cache_dir=tmp_path)
    found = ProcessRuntime(Spec(settings=settings, model_path=tmp_path / "m.onnx", shape=PoolShape(1, 1),
                                writable=tmp_path))
    found.child_module = FAKE_CHILD
    return found


def test_the_first_child_start_adopts_the_early_process_and_the_next_starts_its_own(tmp_path: Path) -> None:
    early.start(FAKE_CHILD)
    spawned = early._early
    assert spawned is not None
    served = runtime(tmp_path)
    served.load_primary()
    try:
        assert served._child is not None and served._child.early
        assert served._child.process.pid == spawned.process.pid
        assert early._early is None  # taken once
    finally:
        served.unload()
    assert spawned.process.returncode == 0  # told to exit, and waited for
    served.load_primary()  # a restore: a fresh process of its own
    try:
        assert served._child is not None and not served._child.early
        assert served._child.process.pid != spawned.process.pid
    finally:
        served.unload()


def test_an_early_process_for_another_module_is_not_adopted_and_exits_at_the_end_of_its_pipe() -> None:
    early.start(early.CHILD_MODULE, ("onnxruntime",))  # the real child, importing ONNX Runtime while it waits
    spawned = early._early
    assert spawned is not None
    assert early.take(FAKE_CHILD) is None
    # take() closed its pipes and reaped it: the real child read the end of its pipe instead of a Spec and
    # left quietly (status 0), not with a traceback.
    assert spawned.process.returncode == 0
    assert early.take(early.CHILD_MODULE) is None


def test_an_early_process_that_died_is_replaced_by_a_new_one(tmp_path: Path) -> None:
    early.start(FAKE_CHILD)
    spawned = early._early
    assert spawned is not None
    os.kill(spawned.process.pid, signal.SIGKILL)
    spawned.process.wait()
    served = runtime(tmp_path)
    served.load_primary()
    try:
        assert served._child is not None and not served._child.early
        assert served._child.process.pid != spawned.process.pid
        assert served.intact()
    finally:
        served.unload()


def test_an_early_process_that_cannot_take_its_spec_is_replaced_by_a_new_one(tmp_path: Path) -> None:
    early.start("tests.app.runtime.deaf_child")
    spawned = early._early
    assert spawned is not None
    assert os.read(spawned.inbox.fileno(), 1) == b"x"  # alive, and its Spec pipe closed
    spawned.module = FAKE_CHILD  # taken by the runtime below, whose later children answer
    served = runtime(tmp_path)
    served.load_primary()
    try:
        assert served._child is not None and not served._child.early
        assert served._child.process.pid != spawned.process.pid
        assert spawned.process.returncode is not None  # closed and reaped, not left behind
        assert served.intact()
    finally:
        served.unload()
