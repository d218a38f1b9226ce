"""Start and stop one server process for one configuration, in a memory cgroup of its own.

The server is started exactly as a user starts it (``python -m app``), configured only through ``TTS_*``
variables; inherited ``TTS_*`` variables are dropped so the caller's shell cannot change a configuration. A
baseline that runs the model otherwise than the server does runs ``python -m bench.variant`` (`bench.variant`).
Its log goes to a file in the run folder. `launch` and `wait_ready` are also how the tests start servers
(tests/conftest.py).
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType

import httpx

from bench import variant
from bench.configs import ServerConfig
from bench.meter import MemoryCgroup, Meter, RssMeter
from bench.peers import Installed, launch_spec
from bench.quota import CpuQuota

log = logging.getLogger(__name__)


class ServerFailed(RuntimeError):
    """The server exited or did not become ready."""


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def environment(settings: Mapping[str, str], port: int) -> dict[str, str]:
    """The caller's environment without its ``TTS_*`` variables (nor `bench.variant`'s), then ``settings``, then the
    address."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TTS_") and k != variant.OPTIONS}
    env.update(settings)
    env.update({"TTS_HOST": "127.0.0.1", "TTS_PORT": str(port)})
    return env


def launch(settings: Mapping[str, str], port: int, log_path: Path, *, module: str = "app",
           prefix: Sequence[str] = (), cwd: Path | None = None, new_session: bool = False,
           argv: Sequence[str] = ()) -> subprocess.Popen[bytes]:
    """``python -m module`` (or ``argv``: another server, `bench.peers`), after ``prefix`` (a cgroup or namespace
    wrapper that execs it, keeping the pid), listening on 127.0.0.1:``port``, its output appended to ``log_path``;
    does not wait."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    command = list(argv) or [sys.executable, "-m", module]
    with open(log_path, "ab") as sink:
        return subprocess.Popen([*prefix, *command], env=environment(settings, port), cwd=cwd,
                                stdout=sink, stderr=subprocess.STDOUT, start_new_session=new_session)


def wait_ready(url: str, process: subprocess.Popen[bytes], log_path: Path, *, timeout_s: float = 300.0,
               poll_s: float = 0.02, label: str = "server", path: str = "/readyz") -> None:
    """Poll ``path`` until 200. Fails fast, with the log's tail, if the process exits or the time runs out."""
    deadline = time.monotonic() + timeout_s
    with httpx.Client(timeout=2.0) as http:
        while True:
            if process.poll() is not None:
                raise ServerFailed(f"{label} exited with {process.returncode} during start-up; {_tail(log_path)}")
            try:
                if http.get(url + path).status_code == 200:
                    return
            except httpx.HTTPError:
                pass  # not listening yet: the model loads before the socket opens
            if time.monotonic() > deadline:
                raise ServerFailed(f"{label} not ready after {timeout_s:.0f} s; {_tail(log_path)}")
            time.sleep(poll_s)


def terminate(process: subprocess.Popen[bytes], timeout_s: float = 30.0) -> bool:
    """SIGTERM (a server drains), then SIGKILL if it has not exited within ``timeout_s``; True if it had to
    be killed."""
    if process.poll() is not None:
        return False
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout_s)
        return False
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
        return True


def progress(message: str) -> None:
    """A command's progress line on stderr, with the wall-clock time (a long run must show where it is)."""
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def _tail(log_path: Path, chars: int = 3000) -> str:
    try:
        return f"the end of {log_path}:\n{log_path.read_text(errors='replace')[-chars:]}"
    except OSError:
        return f"no log at {log_path}"


CHECKOUT = "checkout"
"""The key, among a benchmark variant's settings, of the checkout its server runs from (not a ``TTS_*``
variable): ``name@DIR`` in `bench.coldstart` and `bench.latency` variants."""


def with_checkout(head: str, settings: dict[str, str]) -> str:
    """The name in ``name@DIR``; with a DIR, records it (resolved) in ``settings`` under `CHECKOUT`, after
    checking that it holds a checkout of this project (its working directory comes first on ``sys.path``,
    so the server runs that tree's code). Raises ``argparse.ArgumentTypeError`` otherwise."""
    name, _, checkout = head.partition("@")
    if checkout:
        if not (Path(checkout) / "app" / "__main__.py").is_file():
            raise argparse.ArgumentTypeError(f"{checkout} holds no checkout of this project")
        settings[CHECKOUT] = str(Path(checkout).resolve())
    return name


class Server:
    """A running ``python -m app`` for one configuration. Use as a context manager, or `start` / `stop`."""

    def __init__(self, config: ServerConfig, settings: dict[str, str], log_path: Path, *, label: str = "",
                 cwd: Path | None = None, cpu_quota: float | None = None) -> None:
        self.config = config
        self.cpu_quota = cpu_quota
        """CPUs the process may use (a cpu cgroup of its own, `bench.quota`); None: no limit."""
        self._quota: CpuQuota | None = None
        self.cwd = cwd
        """Working directory of the process: another checkout's code runs (it comes first on ``sys.path``)."""
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
        self.argv: list[str] = []
        """The command of another server (`bench.peers`); empty: ``python -m app`` (or `bench.variant`)."""
        self.ready_path = "/readyz"
        """What answers 200 once the server serves."""

    @property
    def pid(self) -> int:
        if self._process is None:
            raise ServerFailed("not started")
        return self._process.pid

    def start(self) -> None:
        """Spawn the process (into its own memory cgroup when one can be made); does not wait."""
        self._cgroup = MemoryCgroup.create(self.label)
        prefix: list[str] = []
        if self._cgroup is not None:
            prefix = self._cgroup.wrap([])
            self.meter = self._cgroup
        if self.cpu_quota is not None:
            self._quota = CpuQuota.create(self.label, self.cpu_quota)
            prefix = self._quota.wrap(prefix)
        self.spawned_at = time.perf_counter()
        self._process = launch({**self.settings, "TTS_SHUTDOWN_GRACE_S": "2"}, self.port, self.log_path,
                               module=variant.module_for(self.settings), prefix=prefix, new_session=True, cwd=self.cwd,
                               argv=self.argv)
        self.meter.pid = self._process.pid

    def wait_ready(self, timeout_s: float = 300.0, poll_s: float = 0.02) -> float:
        """Poll ``/readyz`` until 200; returns seconds since spawn. Fails fast if the process exits."""
        if self._process is None:
            raise ServerFailed(f"{self.label} was not started")
        wait_ready(self.url, self._process, self.log_path, timeout_s=timeout_s, poll_s=poll_s, label=self.label,
                   path=self.ready_path)
        return time.perf_counter() - self.spawned_at

    def alive(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def stop(self, timeout_s: float = 20.0) -> None:
        """SIGTERM, then SIGKILL after ``timeout_s``; then remove the cgroup."""
        if self._process is not None and terminate(self._process, timeout_s):
            log.warning("%s ignored SIGTERM for %.0f s; killed it", self.label, timeout_s)
        if self._cgroup is not None:
            self._cgroup.remove()
            self._cgroup = None
        if self._quota is not None:
            self._quota.remove()
            self._quota = None

    def __enter__(self) -> Server:
        self.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()


def peer_server(config: ServerConfig, installed: Installed, *, model: Path, voices: Path, work: Path,
           log_path: Path, label: str = "") -> Server:
    """A `Server` that starts the peer (`bench.peers`), not yet started."""
    peer = installed.peer
    made = Server(config, {}, log_path, label=label)
    argv, env = launch_spec(peer, installed.venv, model=model, voices=voices, work=work, port=made.port,
                            threads=config.threads_per_stream)
    made.argv, made.settings, made.ready_path = argv, env, peer.ready_path
    return made
