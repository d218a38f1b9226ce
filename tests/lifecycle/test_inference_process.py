"""The model runs in a child process: a release ends it, a request starts one, a crash is survived."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import psutil
import pytest

from app.runtime.child import WAITING
from tests.conftest import SPEECH_BACKEND, LiveServer, live_server
from tests.lifecycle.test_release_live import ADMIN, lifecycle, speak, wait_for

SHORT = "Short and sweet."
LONG = " ".join(f"Sentence number {i} keeps this stream going for a while." for i in range(4))


@pytest.fixture(scope="module")
def server(cache_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    """On the shipped default's runtime (`SPEECH_BACKEND`): the inference process is the server's, whatever it runs
    (OpenVINO's, its telemetry client never loaded, is looked at in tests/app/test_warmup.py)."""
    with live_server(cache_dir, tmp_path_factory.mktemp("logs"), quiet_window_s="0", admin_token="admin-secret",
                     backend=SPEECH_BACKEND) as s:
        yield s


def children(server: LiveServer) -> list[psutil.Process]:
    """The server's own children: its inference processes (not theirs: a runtime or ``ctypes.util.find_library``
    may run a short-lived command of its own)."""
    return psutil.Process(server.process.pid).children()


def live_children(server: LiveServer, settle_s: float = 5.0) -> list[psutil.Process]:
    """The server's children that are not zombies, once no zombie is left among them (a process the previous test
    killed is reaped by the server's restore, which may still be finishing under the suite's load), or after
    ``settle_s``."""
    deadline = time.monotonic() + settle_s
    while True:
        found = []
        for child in children(server):
            try:
                found.append((child, child.status() == psutil.STATUS_ZOMBIE))
            except psutil.NoSuchProcess:
                continue
        if not any(zombie for _, zombie in found) or time.monotonic() >= deadline:
            return [child for child, zombie in found if not zombie]
        time.sleep(0.1)


def ended(process: psutil.Process) -> bool:
    """Whether ``process`` has exited: a zombie, or already reaped by the server (between any two reads)."""
    try:
        return not process.is_running() or process.status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def waiting_logged(server: LiveServer) -> int:
    """How many inference processes have said they wait released, what they read given back (`messages.Shed`): only
    the log tells when that is done."""
    return server.log().count(WAITING)


def mapped(pid: int, needle: str) -> bool:
    return needle in Path(f"/proc/{pid}/maps").read_text()


def release(server: LiveServer) -> None:
    assert httpx.post(f"{server.url}/v1/lifecycle/release", headers=ADMIN, timeout=60).json()["released"] is True


def test_a_release_ends_the_inference_process_and_starts_the_next_which_waits_imported_and_serves_the_restore(
        server: LiveServer) -> None:
    """A release ends the inference process and starts the next one at once (`ProcessRuntime.idle_standby`); it
    imports its runtime, gives back what that read and waits holding no model but one session opened ahead of the
    restore (`LocalRuntime.hold`): it maps the saved graph's packed weights, whose pages it gives back. The next
    request's restore loads into it: no process is started for it, and it serves the same bytes."""
    warm = speak(server, SHORT)
    warm_memory = lifecycle(server)["memory"]
    (child,) = live_children(server)
    assert mapped(child.pid, "onnxruntime")
    child_rss = child.memory_info().rss
    # The server itself never loads a runtime: that is what leaves it small once the child is gone.
    for runtime in ("libopenvino", "onnxruntime"):
        assert not mapped(server.process.pid, runtime)

    shed = waiting_logged(server)
    release(server)
    (idle,) = live_children(server)  # the next process, started at once, waiting with no model
    assert idle.pid != child.pid
    assert ended(child)
    deadline = time.monotonic() + 30
    while waiting_logged(server) == shed:  # its imports done, its session held, what they read given back
        assert time.monotonic() < deadline
        time.sleep(0.1)
    # The held session maps the graph saved packed; its pages went (`messages.Shed`): its heap and libraries stay,
    # not the 170 MB of weights.
    assert mapped(idle.pid, ".packed")
    assert mapped(idle.pid, "onnxruntime") and not mapped(idle.pid, "libopenvino")  # its runtime, no other
    idle_rss = idle.memory_info().rss
    assert idle_rss < 150 << 20 and child_rss - idle_rss > 150 << 20
    released = lifecycle(server)
    assert released["state"] == "released"
    assert isinstance(released["memory"], dict) and isinstance(warm_memory, dict)
    # The meter counts the server's children: the warm child while warm, and once it is gone, only the server and
    # the process that waits (a few MB of slack for the server's own allocations between the reads).
    assert warm_memory["rss"] > child_rss
    server_rss = psutil.Process(server.process.pid).memory_info().rss
    assert released["memory"]["rss"] < server_rss + idle_rss + (16 << 20)

    restored = speak(server, SHORT)
    assert [c.pid for c in live_children(server)] == [idle.pid]  # served by the waiting process: none started
    assert restored == warm  # from its first request after the restore, in another process: the same bytes


def test_an_inference_process_that_dies_while_released_is_replaced_by_the_restore(server: LiveServer) -> None:
    warm = speak(server, SHORT)
    release(server)
    (waiting,) = live_children(server)
    waiting.kill()  # dies while released: the restore starts another, as without the process that waits
    deadline = time.monotonic() + 30
    while not ended(waiting):
        assert time.monotonic() < deadline
        time.sleep(0.05)
    again = speak(server, SHORT)
    assert again == warm  # in a process started for this restore: the same bytes
    (fresh,) = live_children(server)
    assert fresh.pid != waiting.pid


def test_a_crashed_inference_process_fails_the_requests_in_flight_and_the_next_one_restores(
        server: LiveServer) -> None:
    short = speak(server, SHORT)
    counted = lifecycle(server)["transitions"]
    assert isinstance(counted, dict)
    outcome: dict[str, object] = {}
    streaming = threading.Event()
    received: list[int] = []

    def long_request() -> None:
        try:
            with httpx.stream("POST", f"{server.url}/v1/audio/speech", timeout=120,
                              json={"input": LONG, "voice": "af_heart", "response_format": "pcm"}) as response:
                outcome["status"] = response.status_code
                for data in response.iter_raw():
                    streaming.set()
                    received.append(len(data))
        except httpx.RemoteProtocolError as exc:
            outcome["error"] = exc

    thread = threading.Thread(target=long_request)
    thread.start()
    assert streaming.wait(60), outcome  # its first audio is out: the stream is in flight, four sentences to go
    (child,) = live_children(server)
    os.kill(child.pid, signal.SIGKILL)
    thread.join(120)
    assert not thread.is_alive()
    # The stream in flight fails visibly: its chunked body is cut short (never ended as if it were whole). One that
    # had sent nothing yet is asked again of a fresh process instead (tests/reliability/test_disposable.py).
    assert outcome.get("status") == 200 and "error" in outcome and sum(received) > 0, outcome

    after = speak(server, SHORT)
    assert after == short  # in a fresh process: the same bytes
    state = wait_for(server, "warm")
    transitions = state["transitions"]
    assert isinstance(transitions, dict)
    for edge in ("warm->failed", "failed->restoring"):  # this module's server: counted since the kill
        assert transitions.get(edge, 0) - counted.get(edge, 0) >= 1, (edge, counted, transitions)
    assert server.process.poll() is None
    (replacement,) = children(server)
    assert replacement.pid != child.pid


def test_the_inference_process_outlives_the_thread_that_started_it(server: LiveServer) -> None:
    """The server starts it from a worker thread that ends after 10 idle seconds; it must live on."""
    speak(server, SHORT)
    (child,) = live_children(server)
    time.sleep(12)
    assert child.is_running() and child.status() != psutil.STATUS_ZOMBIE
    speak(server, SHORT)
    assert [c.pid for c in live_children(server)] == [child.pid]
