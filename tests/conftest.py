"""Shared fixtures: one model/compile cache for the whole run, and real servers on free ports."""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from bench.server import free_port, launch, wait_ready

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


@pytest.fixture(scope="session")
def cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One cache (assembled model + OpenVINO compile cache) shared by every test server."""
    return tmp_path_factory.mktemp("tts-cache")


@dataclass
class LiveServer:
    url: str
    process: subprocess.Popen[bytes]
    log_path: Path

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")


@contextmanager
def live_server(cache: Path, log_dir: Path, *, module: str = "app", prefix: tuple[str, ...] = (),
                **settings: str) -> Iterator[LiveServer]:
    """``python -m app`` in a subprocess with ``TTS_*`` settings; stopped with SIGTERM afterwards.

    ``module`` runs another entry point (a fault-injecting wrapper); ``prefix`` comes before the
    interpreter (a command that sets up a namespace, then execs it, keeping the pid). Started and
    awaited as the benchmark starts its servers (`bench.server.launch`, `bench.server.wait_ready`)."""
    port = free_port()
    env = {"TTS_CACHE_DIR": str(cache), "PYTHONUNBUFFERED": "1"}
    env.update({f"TTS_{k.upper()}": v for k, v in settings.items()})
    log_path = log_dir / f"server-{port}.log"
    process = launch(env, port, log_path, module=module, prefix=prefix, cwd=ROOT)
    server = LiveServer(f"http://127.0.0.1:{port}", process, log_path)
    try:
        wait_ready(server.url, process, log_path, timeout_s=120, poll_s=0.1)
        yield server
    finally:
        stop(process)


def stop(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM (the server drains), then SIGKILL if it has not exited within 30 s."""
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@pytest.fixture(scope="session")
def server(cache_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    """A real uvicorn on the embedded model with default settings (shared, read-mostly), except that it never
    releases: its audio is the reference other servers are compared with, and after a release (45 s quiet by
    default) the next request would be served by the ONNX Runtime bridge, whose audio differs slightly."""
    with live_server(cache_dir, tmp_path_factory.mktemp("logs"), admin_token="admin-secret", quiet_window_s="0") as s:
        yield s
