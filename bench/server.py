"""Start and stop one server process for one configuration, in a memory cgroup of its own.

The server is started exactly as a user starts it (``python -m app``), configured only through ``TTS_*``
variables; inherited ``TTS_*`` variables are dropped so the caller's shell cannot change a configuration.
Its log goes to a file in the run folder.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from types import TracebackType

import httpx

from bench.configs import ServerConfig
from bench.meter import MemoryCgroup, Meter, RssMeter

log = logging.getLogger(__name__)


class ServerFailed(RuntimeError):
    """The server exited or did not become ready."""


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class Server:
    """A running ``python -m app`` for one configuration. Use as a context manager, or `start` / `stop`."""

    def __init__(self, config: ServerConfig, settings: dict[str, str], log_path: Path, *, label: str = "") -> None:
        self.config = config
        self.settings = dict(settings)
        self.log_path = log_path
        self.label = label or config.name
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.meter: Meter = RssMeter()
        self._cgroup: MemoryCgroup | None = None
        self._process: subprocess.Popen[bytes] | None = None
        self.spawned_at = 0.0
        """``time.perf_counter()`` just before the process was spawned."""

    @property
    def pid(self) -> int:
        if self._process is None:
            raise ServerFailed("not started")
        return self._process.pid

    def environment(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("TTS_")}
        env.update(self.settings)
        env.update({"TTS_HOST": "127.0.0.1", "TTS_PORT": str(self.port), "TTS_SHUTDOWN_GRACE_S": "2"})
        return env

    def start(self) -> None:
        """Spawn the process (into its own memory cgroup when one can be made); does not wait."""
        self._cgroup = MemoryCgroup.create(self.label)
        argv = [sys.executable, "-m", "app"]
        if self._cgroup is not None:
            argv = self._cgroup.wrap(argv)
            self.meter = self._cgroup
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as sink:
            self.spawned_at = time.perf_counter()
            self._process = subprocess.Popen(argv, env=self.environment(), stdout=sink, stderr=subprocess.STDOUT,
                                             start_new_session=True)
        self.meter.pid = self._process.pid

    def wait_ready(self, timeout_s: float = 300.0, poll_s: float = 0.02) -> float:
        """Poll ``/readyz`` until 200; returns seconds since spawn. Fails fast if the process exits."""
        deadline = time.monotonic() + timeout_s
        with httpx.Client(timeout=2.0) as http:
            while True:
                if self._process is None or self._process.poll() is not None:
                    raise ServerFailed(f"{self.label} exited during start-up; see {self.log_path}")
                try:
                    if http.get(self.url + "/readyz").status_code == 200:
                        return time.perf_counter() - self.spawned_at
                except httpx.HTTPError:
                    pass  # not listening yet: the model loads before the socket opens
                if time.monotonic() > deadline:
                    raise ServerFailed(f"{self.label} not ready after {timeout_s:.0f} s; see {self.log_path}")
                time.sleep(poll_s)

    def alive(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def stop(self, timeout_s: float = 20.0) -> None:
        """SIGTERM, then SIGKILL after ``timeout_s``; then remove the cgroup."""
        process = self._process
        if process is not None and process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout_s)
            except subprocess.TimeoutExpired:
                log.warning("%s ignored SIGTERM for %.0f s; killing it", self.label, timeout_s)
                process.kill()
                process.wait()
        if self._cgroup is not None:
            self._cgroup.remove()
            self._cgroup = None

    def __enter__(self) -> Server:
        self.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()
