"""Release and restore on a real server with the real model, on the shipped default's runtime (`SPEECH_BACKEND`):
the release and the restore are the server's; OpenVINO's restore (its cache import and warm-up) is tested in
tests/app/test_warmup.py."""

from __future__ import annotations

import concurrent.futures
import shutil
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from lifecycle.pagecache import evict, resident_bytes
from tests.conftest import SPEECH_BACKEND, LiveServer, live_server

TEXT = "Released and restored, the voice must sound the same."
ADMIN = {"Authorization": "Bearer admin-secret"}


def speak(server: LiveServer, text: str = TEXT) -> bytes:
    response = httpx.post(f"{server.url}/v1/audio/speech", timeout=120,
                          json={"input": text, "voice": "af_heart", "response_format": "pcm"})
    assert response.status_code == 200, response.text
    return response.content


def lifecycle(server: LiveServer) -> dict[str, object]:
    state: dict[str, object] = httpx.get(f"{server.url}/v1/lifecycle", timeout=10).json()
    return state


def wait_for(server: LiveServer, state: str, timeout: float = 30) -> dict[str, object]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        snapshot = lifecycle(server)
        if snapshot["state"] == state:
            return snapshot
        time.sleep(0.1)
    raise AssertionError(f"state never became {state}: {lifecycle(server)}")


def mappers(path: Path) -> str:
    """Which processes map ``path`` (a mapped page cannot leave the page cache), for a failure's message."""
    found = []
    for maps in Path("/proc").glob("[0-9]*/maps"):
        try:
            if str(path) in maps.read_text():
                command = (maps.parent / "cmdline").read_bytes().replace(b"\0", b" ")[:120]
                found.append(f"{maps.parent.name}: {command!r}")
        except OSError:
            continue
    return "mapped by " + "; ".join(found) if found else "mapped by no process"


def cache_files(cache: Path) -> dict[str, tuple[int, int]]:
    """Each saved optimized graph and data file, with its size and modification time: a rewrite changes either."""
    return {str(p.relative_to(cache)): (p.stat().st_size, p.stat().st_mtime_ns)
            for p in (cache / "onnxruntime").rglob("*") if p.is_file()}


@pytest.fixture(scope="module")
def private_cache(cache_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A cache of this module's own (the assembled model copied, its optimized graph saved afresh): the session's
    shared server stays warm and keeps the shared optimized graph's weights mapped, and a mapped file cannot leave
    the page cache."""
    private = tmp_path_factory.mktemp("release-cache")
    if (cache_dir / "models").is_dir():  # else the server assembles the model there itself
        shutil.copytree(cache_dir / "models", private / "models")
        # Writing the copies left their pages cached; the test asks what the server leaves there, so the
        # files start out of the page cache, as they do in an image (CI found 16 MB of the export left).
        evict([p for p in (private / "models").iterdir() if p.is_file()])
    return private


@pytest.fixture(scope="module")
def windowed(private_cache: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    """Quiet window of 3 s, on the shipped default's runtime: restores open its saved optimized graph."""
    # Bursts admitted whole whatever this CPU plays in real time (max_requests): the rest wait for a place.
    with live_server(private_cache, tmp_path_factory.mktemp("logs"), quiet_window_s="3", backend=SPEECH_BACKEND,
                     admin_token="admin-secret", max_requests="8") as s:
        yield s


def test_release_after_the_window_frees_memory_and_page_cache_then_restores_same_audio(
        windowed: LiveServer, private_cache: Path) -> None:
    cache_dir = private_cache
    speak(windowed, "Warm up.")  # restores it, where it released before this test
    warm_audio = speak(windowed)
    warm = lifecycle(windowed)
    assert warm["state"] == "warm"
    files_before = cache_files(cache_dir)
    time.sleep(1.5)
    assert lifecycle(windowed)["state"] == "warm"  # not before the window
    released = wait_for(windowed, "released", timeout=20)
    warm_memory, released_memory = warm["memory"], released["memory"]
    assert isinstance(warm_memory, dict) and isinstance(released_memory, dict)
    # What is left is the server and the process that waits for the restore, which holds a session (its weights
    # paged out: tests/lifecycle/test_inference_process.py).
    assert released_memory["rss"] < 0.5 * warm_memory["rss"]
    assert released_memory["billable"] < warm_memory["billable"]
    # The optimized graph the sessions opened, saved with its packed weights, and those weights' data file (the
    # process waiting released maps them for the session it holds, and pages them out).
    graph = max((cache_dir / "onnxruntime").glob("*.packed.onnx"), key=lambda p: p.stat().st_mtime_ns)
    (data,) = [p for p in graph.parent.iterdir() if p.name.startswith(f"{graph.stem}.") and p.suffix == ".data"]
    model = cache_dir / "models" / "kokoro-v1.0.int8.onnx"
    served = cache_dir / "models" / "kokoro-v1.0.int8.timed.onnx"  # what the runtimes load (app.forms.timed)
    # The process that waits for the restore starts as the release ends: it opens its held session (reading the
    # graph and mapping its weights) and then gives back what it read (`messages.Shed`), so the files leave the
    # page cache once it has, not at the moment the state reads released.
    deadline = time.monotonic() + 30
    for path in (graph, data, served, model):
        while resident_bytes(path) >= 0.05 * path.stat().st_size:
            assert time.monotonic() < deadline, f"{path} is still in the page cache ({mappers(path)})"
            time.sleep(0.2)

    assert speak(windowed) == warm_audio  # the restore's first request: identical audio
    info: dict[str, Any] = httpx.get(f"{windowed.url}/v1/info", timeout=10).json()
    assert set(info["inferences_by_backend"]) == {SPEECH_BACKEND}  # only ever the one engine
    assert cache_files(cache_dir) == files_before  # the restore opened the saved graph: nothing optimized again
    assert lifecycle(windowed)["transitions"]["restoring->warm"] >= 1  # type: ignore[index]


def test_a_stream_longer_than_the_window_is_never_released_under(windowed: LiveServer) -> None:
    speak(windowed, "Warm up.")
    text = " ".join(f"Sentence number {i} keeps this stream going." for i in range(4))  # about 10 s of audio
    samples: list[tuple[float, int, str]] = []  # (time, requests in flight, state), polled all along
    done = threading.Event()

    def poll() -> None:
        while not done.is_set():
            snapshot = lifecycle(windowed)
            samples.append((time.monotonic(), int(snapshot["in_flight"]), str(snapshot["state"])))  # type: ignore[call-overload]
            time.sleep(0.2)

    poller = threading.Thread(target=poll)
    poller.start()
    try:
        audio = speak(windowed, text)
    finally:
        done.set()
        poller.join()
    # The server may hand the last bytes to the kernel before the client reads them, and is then
    # free to release; what must never happen is a release while the request is still in flight.
    busy = [(t, state) for t, in_flight, state in samples if in_flight]
    assert busy and busy[-1][0] - busy[0][0] > 4  # synthesis alone spanned more than the 3 s window
    assert {state for _, state in busy} == {"warm"}
    assert len(audio) > 24000 * 2 * 6
    wait_for(windowed, "released", timeout=20)


def test_admin_release_needs_the_token(windowed: LiveServer) -> None:
    url = f"{windowed.url}/v1/lifecycle/release"
    assert httpx.post(url).status_code == 401
    assert httpx.post(url, headers={"Authorization": "Bearer wrong"}).status_code == 401
    assert httpx.post(url, headers=ADMIN).status_code == 200


def test_bursts_at_the_release_moment_lose_and_truncate_nothing(windowed: LiveServer) -> None:
    expected = speak(windowed, "Burst.")
    # Once at the window's edge (the burst lands as the release begins), once after it (the burst waits for
    # the restore). Hundreds of such moments run on a fake target in tests/lifecycle/test_manager.py; each
    # cycle here costs a real restore (a new inference process, a cache import and its warm-up). Every answer is
    # the same bytes: one engine serves from a restore's first request on.
    for cycle in range(2):
        wait_for(windowed, "released", timeout=20) if cycle % 2 else time.sleep(2.9)
        with concurrent.futures.ThreadPoolExecutor(3) as pool:
            answers = list(pool.map(lambda _: speak(windowed, "Burst."), range(3)))
        assert answers == [expected] * 3, ([len(a) for a in answers], len(expected))
