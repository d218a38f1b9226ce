"""The inference process ``python -m app`` starts before its own imports (`app.runtime.early`): adopted by the
first child start, discarded cleanly when nobody takes it or it was sent another Spec, replaced when it died first;
and the first load it begins before the server asks (`messages.Preload`), answered at the server's Load."""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import multiprocessing
import os
import pickle
import signal
import threading
import time
from collections.abc import Iterator
from multiprocessing.connection import Connection
from pathlib import Path

import pytest

from app.runtime import early, messages
from app.runtime.backends.base import Resolved
from app.runtime.child import InferenceLoop
from app.runtime.proxy import ProcessRuntime
from app.runtime.spec import Spec
from app.settings import Settings
from app.sizing import PoolShape
from tests.app.runtime.children import early_pending, only_child

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
    spawned = early_pending()
    assert spawned is not None
    served = runtime(tmp_path)
    served.load()
    try:
        assert only_child(FAKE_CHILD) == spawned.process.pid  # the early process serves
        assert early_pending() is None  # taken once
    finally:
        served.unload()
    assert spawned.process.returncode == 0  # told to exit, and waited for
    served.load()  # a restore: a fresh process of its own
    try:
        assert only_child(FAKE_CHILD) != spawned.process.pid  # a process of its own serves
    finally:
        served.unload()


def test_an_early_process_for_another_module_is_not_adopted_and_exits_at_the_end_of_its_pipe() -> None:
    early.start(early.CHILD_MODULE, ("onnxruntime",))  # the real child, importing ONNX Runtime while it waits
    spawned = early_pending()
    assert spawned is not None
    assert early.take(FAKE_CHILD) is None
    # take() closed its pipes and reaped it: the real child read the end of its pipe instead of a Spec and
    # left quietly (status 0), not with a traceback.
    assert spawned.process.returncode == 0
    assert early.take(early.CHILD_MODULE) is None


def test_an_early_process_that_died_is_replaced_by_a_new_one(tmp_path: Path) -> None:
    early.start(FAKE_CHILD)
    spawned = early_pending()
    assert spawned is not None
    os.kill(spawned.process.pid, signal.SIGKILL)
    spawned.process.wait()
    served = runtime(tmp_path)
    served.load()
    try:
        assert only_child(FAKE_CHILD) != spawned.process.pid  # a process of its own serves
        assert served.intact()
    finally:
        served.unload()


def test_an_early_process_that_cannot_take_its_spec_is_replaced_by_a_new_one(tmp_path: Path) -> None:
    early.start("tests.app.runtime.deaf_child")
    spawned = early_pending()
    assert spawned is not None
    assert os.read(spawned.inbox.fileno(), 1) == b"x"  # alive, and its Spec pipe closed
    spawned.module = FAKE_CHILD  # taken by the runtime below, whose later children answer
    served = runtime(tmp_path)
    served.load()
    try:
        assert only_child(FAKE_CHILD) != spawned.process.pid  # a process of its own serves
        assert spawned.process.returncode is not None  # closed and reaped, not left behind
        assert served.intact()
    finally:
        served.unload()


# --- the first load begun before the server asks (messages.Preload), in the inference process ----------------

LOADED = Resolved("openvino", 2, 2, 1, "f32", 1.5, True)


class Counted:
    """A runtime that counts its loads (and fails them where told)."""

    def __init__(self) -> None:
        self.loads = 0
        self.fail = False
        self.backend = self  # the loop names ``runtime.backend.name`` when a load fails
        self.name = "openvino"

    def load(self) -> Resolved:
        self.loads += 1
        if self.fail:
            raise RuntimeError("injected load failure")
        return LOADED


@contextlib.contextmanager
def inference_loop() -> Iterator[tuple[Counted, Connection, Connection]]:
    to_child_r, to_child_w = multiprocessing.Pipe(duplex=False)
    from_child_r, from_child_w = multiprocessing.Pipe(duplex=False)
    fake = Counted()
    loop = InferenceLoop(to_child_r, from_child_w, fake, 1)  # type: ignore[arg-type]
    serving = threading.Thread(target=loop.serve, daemon=True)
    serving.start()
    try:
        yield fake, to_child_w, from_child_r
    finally:
        to_child_w.send(messages.Exit())
        serving.join(10)


def test_a_preload_is_answered_at_the_servers_load() -> None:
    with inference_loop() as (runtime, server_out, server_in):
        server_out.send(messages.Preload())
        deadline = time.monotonic() + 10
        while not runtime.loads and time.monotonic() < deadline:
            time.sleep(0.01)
        assert runtime.loads == 1  # begun before anyone asked
        assert not server_in.poll(0.3)  # nothing said before the server asks
        server_out.send(messages.Load())
        assert server_in.recv() == messages.Loaded(LOADED)
        assert runtime.loads == 1  # loaded once
        server_out.send(messages.Load())  # a later load is a load again, answered at once
        assert server_in.recv() == messages.Loaded(LOADED)
        assert runtime.loads == 2


def test_a_preload_that_failed_is_answered_as_a_failed_load(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.ERROR, logger="app.runtime.child"), inference_loop() as (runtime, out, into):
        runtime.fail = True
        out.send(messages.Preload())
        out.send(messages.Load())
        assert into.recv() == messages.LoadFailed("RuntimeError: injected load failure")
        assert runtime.loads == 1
    assert "loading the openvino backend failed" in caplog.text


def test_a_process_sent_another_spec_is_not_adopted(tmp_path: Path) -> None:
    early.start(FAKE_CHILD)
    spawned = early_pending()
    assert spawned is not None
    served = runtime(tmp_path)
    other = dataclasses.replace(served.spec, writable=tmp_path / "elsewhere")
    spawned.outbox.send(other)
    spawned.sent = pickle.dumps(other)
    served.load()  # the fake child answers any load
    try:
        assert only_child(FAKE_CHILD) != spawned.process.pid  # a process of its own serves
        assert spawned.process.returncode is not None  # discarded, reaped
    finally:
        served.unload()
