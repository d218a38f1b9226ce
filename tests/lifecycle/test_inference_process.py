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

from tests.conftest import LiveServer, live_server
from tests.lifecycle.test_release_live import ADMIN, lifecycle, speak, wait_for
from tests.reliability.test_security import assert_no_socket_and_no_telemetry

LONG = " ".join(f"Sentence number {i} keeps this stream going for a while." for i in range(4))


@pytest.fixture(scope="module")
def server(cache_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    """OpenVINO (``TTS_BACKEND=openvino``): the runtime whose process holds the most."""
    with live_server(cache_dir, tmp_path_factory.mktemp("logs"), quiet_window_s="0", admin_token="admin-secret",
                     backend="openvino") as s:
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


def mapped(pid: int, needle: str) -> bool:
    return needle in Path(f"/proc/{pid}/maps").read_text()


def release(server: LiveServer) -> None:
    assert httpx.post(f"{server.url}/v1/lifecycle/release", headers=ADMIN, timeout=60).json()["released"] is True


def test_release_ends_the_inference_process_and_the_next_request_starts_one(server: LiveServer) -> None:
    warm = speak(server)
    warm_memory = lifecycle(server)["memory"]
    (child,) = children(server)
    assert mapped(child.pid, "libopenvino")
    assert_no_socket_and_no_telemetry(child)  # OpenVINO ships a telemetry client: never loaded, nowhere to send
    # The server itself never loads a runtime: that is what leaves it small once the child is gone.
    for runtime in ("libopenvino", "onnxruntime"):
        assert not mapped(server.process.pid, runtime)

    release(server)
    (idle,) = live_children(server)  # the next process, started at once, waiting with no model
    assert idle.pid != child.pid
    assert not psutil.pid_exists(child.pid) or child.status() == psutil.STATUS_ZOMBIE
    released = lifecycle(server)["memory"]
    assert isinstance(released, dict) and isinstance(warm_memory, dict)
    assert released["rss"] < 0.25 * warm_memory["rss"]  # the child's memory was counted while warm

    again = speak(server)
    (restarted,) = live_children(server)
    assert restarted.pid != child.pid
    assert again == warm  # OpenVINO again, in a fresh process: the same bytes


def test_a_crashed_inference_process_fails_the_requests_in_flight_and_the_next_one_restores(
        server: LiveServer) -> None:
    short = speak(server, "Short and sweet.")
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

    after = speak(server, "Short and sweet.")
    assert after == short  # OpenVINO again, in a fresh process: the same bytes
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
    speak(server, "Short and sweet.")
    (child,) = live_children(server)
    time.sleep(12)
    assert child.is_running() and child.status() != psutil.STATUS_ZOMBIE
    speak(server, "Short and sweet.")
    assert [c.pid for c in live_children(server)] == [child.pid]


def test_a_release_starts_the_next_process_which_waits_imported_and_serves_the_restore(
        cache_dir: Path, tmp_path: Path) -> None:
    """A release ends the inference process and starts the next one at once (`ProcessRuntime.idle_standby`); it
    imports its runtime, gives back what that read and waits holding no model. The next request's restore loads
    into it (no process started for it), and one that died while released is replaced by the restore."""
    with live_server(cache_dir, tmp_path, quiet_window_s="0", admin_token="admin-secret", backend="openvino") as server:
        warm = speak(server)
        (child,) = children(server)
        release(server)
        (idle,) = children(server)
        assert idle.pid != child.pid
        assert not psutil.pid_exists(child.pid) or child.status() == psutil.STATUS_ZOMBIE
        deadline = time.monotonic() + 30
        while not mapped(idle.pid, "libopenvino"):  # its imports done (its runtime's)
            assert time.monotonic() < deadline
            time.sleep(0.1)
        assert not mapped(idle.pid, "onnxruntime")  # no other runtime
        assert idle.memory_info().rss < 200 << 20
        assert lifecycle(server)["state"] == "released"

        restored = speak(server)
        assert [c.pid for c in children(server)] == [idle.pid]  # served by the waiting process: none started
        assert restored == warm  # OpenVINO from its first request after the restore: the same bytes

        release(server)
        (second,) = children(server)
        second.kill()  # dies while released: the restore starts another, as without it
        deadline = time.monotonic() + 30
        while second.is_running() and second.status() != psutil.STATUS_ZOMBIE:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        again = speak(server)
        assert again == warm  # in a process started for this restore: the same bytes
        (fresh,) = children(server)
        assert fresh.pid not in (second.pid, idle.pid)


def test_the_process_waiting_released_holds_one_onnx_runtime_session_with_its_weights_paged_out(
        cache_dir: Path, tmp_path: Path) -> None:
    """Under ONNX Runtime the process that waits released opens one stream's session ahead of the restore
    (`LocalRuntime.hold`): it maps the saved graph's weights, whose pages it gives back, and the restore serves the
    same bytes from it."""
    with live_server(cache_dir, tmp_path, quiet_window_s="0", admin_token="admin-secret",
                     backend="onnxruntime") as server:
        warm = speak(server)
        release(server)
        (idle,) = children(server)
        deadline = time.monotonic() + 30
        while not mapped(idle.pid, ".packed"):  # the held session maps the graph saved with its packed weights
            assert time.monotonic() < deadline
            time.sleep(0.1)
        # ...then pages them out (`messages.Shed`): its heap and libraries stay, not the 170 MB of weights.
        while idle.memory_info().rss >= 150 << 20:
            assert time.monotonic() < deadline
            time.sleep(0.1)
        assert speak(server) == warm
        assert [c.pid for c in children(server)] == [idle.pid]
