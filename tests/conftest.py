"""Shared fixtures: one model/compile cache for the whole run, and real servers on free ports."""

from __future__ import annotations

import fcntl
import os
import re
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from app.runtime.spec import Options
from bench import variant
from bench.server import free_port, launch, terminate, wait_ready

ROOT = Path(__file__).resolve().parents[1]


def in_ci() -> bool:
    """``CI`` is set (as `.ci/run` sets it)."""
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


def require(available: bool, reason: str, *, provided: bool = False) -> None:
    """Skip a test that needs what this machine lacks, saying why; fail instead in CI, or where the
    machine ``provided`` the tool but it does not work: there a skip would hide a broken setup."""
    if available:
        return
    if in_ci() or provided:
        pytest.fail(f"{reason} ({'CI is set' if in_ci() else 'the tool is installed'}, so this is a failure)",
                    pytrace=False)
    pytest.skip(reason)


SPEECH_BACKEND = "onnxruntime"
"""The backend of the real-model tests whose subject is not the runtime (HTTP, formats, streaming, captions,
faults in the pool, overload, security, release and restore, the inference process, kills and shutdown): what
``TTS_BACKEND=auto`` serves on every CPU class on record, so these tests run the shipped default. A server on ONNX
Runtime is also serving after about 2.6 CPU-seconds (its saved optimized graph opens without a compile or a
warm-up), one on OpenVINO after more (the cache import, a warm-up inference per stream). OpenVINO
(``TTS_BACKEND=openvino``) keeps the tests of what is its own: the compile cache and its faults, its warm-up and
warm restore, the ahead-of-time build, the forms and shape churn; determinism under load is tested
on both."""


@pytest.fixture(scope="session")
def cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One cache (assembled model, ONNX Runtime's optimized graph, OpenVINO's compile cache) shared by every test
    server, and by every worker of a parallel run (pytest-xdist): the first to get here fills it with one
    OpenVINO server start (the one compile of the run) under a file lock; the others wait and then import it.
    Tests that damage or evict a cache work on a copy of their own."""
    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent  # the run's folder, above each worker's own
    cache = root / "tts-cache"
    with open(root / "tts-cache.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (cache / ".filled").is_file():
            cache.mkdir(exist_ok=True)
            logs = root / "tts-cache-logs"
            logs.mkdir(exist_ok=True)
            with live_server(cache, logs, backend="openvino", quiet_window_s="0"):
                pass  # ready once OpenVINO's blob is compiled (and warmed)
            (cache / ".filled").touch()
    return cache


@dataclass
class LiveServer:
    url: str
    process: subprocess.Popen[bytes]
    log_path: Path

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")


@contextmanager
def live_server(cache: Path, log_dir: Path, *, module: str = "app", prefix: tuple[str, ...] = (),
                options: Options | None = None, answers_500: bool = False,
                **settings: str) -> Iterator[LiveServer]:
    """``python -m app`` in a subprocess with ``TTS_*`` settings; stopped with SIGTERM afterwards.

    ``module`` runs another entry point (a fault-injecting wrapper); ``prefix`` comes before the
    interpreter (a command that sets up a namespace, then execs it, keeping the pid). Started and
    awaited as the benchmark starts its servers (`bench.server.launch`, `bench.server.wait_ready`): ready, its one
    engine serves. ``options``: run it as the benchmark runs a baseline (`bench.variant`).

    A 500 in the server's access log fails the test that ran it, at the end of the block (`assert_no_500`): every
    error a client can cause or meet is a 4xx or a 503. ``answers_500``: a server that injects inference faults,
    whose 500s are what its tests check."""
    port = free_port()
    # The shipped defaults, but for what a test names: the same request gives the same audio at any load, so no
    # default needs turning off for a test to compare responses byte for byte.
    env = {"TTS_CACHE_DIR": str(cache), "PYTHONUNBUFFERED": "1"}
    env.update({f"TTS_{k.upper()}": v for k, v in settings.items()})
    if options is not None:
        env.update(variant.launch_env(options))
        module = variant.module_for(env)
    log_path = log_dir / f"server-{port}.log"
    process = launch(env, port, log_path, module=module, prefix=prefix, cwd=ROOT)
    server = LiveServer(f"http://127.0.0.1:{port}", process, log_path)
    try:
        wait_ready(server.url, process, log_path, timeout_s=180, poll_s=0.1)
        yield server
    finally:
        stop(process)
    if not answers_500:
        assert_no_500(server)


ACCESS_500 = re.compile(r'^.*uvicorn\.access: .*" 500$', re.MULTILINE)
"""An access-log line (uvicorn's, as the server logs it) whose status is 500."""


def assert_no_500(server: LiveServer) -> None:
    """No request to ``server`` was answered 500 (its access log, read after it stopped: the status of every response,
    which the clients of tests that ignore it would not show)."""
    found = ACCESS_500.findall(server.log_path.read_text(errors="replace"))
    assert not found, f"the server answered 500 ({server.log_path}):\n" + "\n".join(found[:10])


def stop(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM (the server drains), then SIGKILL if it has not exited within 30 s."""
    terminate(process, 30)


@pytest.fixture(scope="session")
def server(cache_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    """A real uvicorn on the embedded model with default settings (shared, read-mostly), except the backend
    (`SPEECH_BACKEND`) and that it never releases: its audio is the reference other servers are compared with."""
    with live_server(cache_dir, tmp_path_factory.mktemp("logs"), admin_token="admin-secret", quiet_window_s="0",
                     backend=SPEECH_BACKEND) as s:
        yield s


def form_check(model: Path, made: Path, optimized_dir: Path) -> dict[str, Any]:
    """The output check's verdict on a derived form's file ``made`` against ONNX Runtime on ``model`` as shipped: the
    check the server runs on the portable default's form (`app.tune.portable.check`)."""
    from app.tune import portable

    return portable.check(model, made, optimized_dir)
