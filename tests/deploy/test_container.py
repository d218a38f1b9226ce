"""Build the image and run it the way the Cloud Run manifest does, then check it from outside.

Needs podman (``../shared/container/podman-setup.sh WORKDIR`` on the CI machine, with its exports) and a base
image: ``TTS_CONTAINER_BASE`` where set (it must then be present or pullable: CI sets the local one that script
builds, as no registry is reachable there), else the Containerfile's own default (``ARG BASE``), used where it is
present or can be pulled; without one the tests skip, saying why. The container gets the manifest's CPU and
memory limits, a read-only root filesystem with a tmpfs ``/tmp``, and ``PORT`` set to a
non-default port. The figures it measures (image size, cold start to first audio, container memory
warm/peak/released) go to ``TTS_CONTAINER_REPORT`` (default ``var/container-report.json``).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from tests.conftest import require

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
IMAGE = "localhost/kokoro-tts:test"
BASE_SET = os.environ.get("TTS_CONTAINER_BASE", "")
"""The base image named for this run; empty: the Containerfile's default."""
PIP_CERT = Path("/etc/ssl/certs/ca-certificates.crt")
CONTEXT = Path(os.environ.get("TTS_CONTAINER_CONTEXT", ROOT))
"""The build context (a checkout); another one lets CI build a candidate tree with this test."""
REPORT = Path(os.environ.get("TTS_CONTAINER_REPORT", ROOT / "var" / "container-report.json"))
SETUP = 'eval "$(../shared/container/podman-setup.sh /tmp/podman-work)" first (as .ci/run does)'


def containerfile_base() -> str:
    """The Containerfile's default base image (its ``ARG BASE=...``)."""
    found = re.search(r"^ARG BASE=(\S+)$", (CONTEXT / "Containerfile").read_text(), re.MULTILINE)
    assert found, "the Containerfile has no default base (ARG BASE=...)"
    return found.group(1)


BASE = BASE_SET or containerfile_base()
PORT = 9090  # not the image's 8080: the server must take it from PORT, as Cloud Run sets it
QUIET_WINDOW_S = 20
TEXT = ("The container starts from a compile cache baked into its image, so the first request is "
        "answered in seconds rather than after a fresh compile. ")


def podman(*args: str, check: bool = True, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["podman", *args], capture_output=True, text=True, check=check, timeout=timeout)


def cloudrun_service() -> dict[str, Any]:
    found: dict[str, Any] = yaml.safe_load((ROOT / "deploy" / "cloudrun" / "service.yaml").read_text())
    return found


def cloudrun_limits() -> tuple[str, str, dict[str, str]]:
    """CPU and memory limits (podman spelling) and the environment the Cloud Run manifest sets."""
    container = cloudrun_service()["spec"]["template"]["spec"]["containers"][0]
    limits = container["resources"]["limits"]
    memory = limits["memory"].replace("Gi", "g").replace("Mi", "m")
    env = {e["name"]: str(e["value"]) for e in container.get("env", []) if "value" in e}
    return str(limits["cpu"]), memory, env


@dataclass
class Report:
    figures: dict[str, Any] = field(default_factory=dict)

    def add(self, **values: Any) -> None:
        self.figures.update(values)
        REPORT.parent.mkdir(parents=True, exist_ok=True)
        REPORT.write_text(json.dumps(self.figures, indent=2, sort_keys=True) + "\n")


@pytest.fixture(scope="module")
def report() -> Report:
    return Report({"measured_unix": int(time.time()), "base_image": BASE})


@pytest.fixture(scope="module")
def image(report: Report) -> str:
    require(shutil.which("podman") is not None, f"podman is not installed: {SETUP}")
    require(podman("info", check=False, timeout=60).returncode == 0, f"podman does not work here: {SETUP}",
            provided=True)
    require(base_present(), f"base image {BASE} ({'TTS_CONTAINER_BASE' if BASE_SET else 'the Containerfile default'}) "
            f"is neither present here nor pullable" + ("" if BASE_SET else
            "; set TTS_CONTAINER_BASE to a local one (../shared/container/podman-setup.sh builds one)"),
            provided=bool(BASE_SET))
    # TUNE=0: the engine tuner adds about 3 minutes to a build on 2 vCPUs, more than the suite can spend; it is
    # tested on its own (tests/app/tune/test_tuning.py), and the image then serves OpenVINO (no manifest).
    args = ["build", "--build-arg", f"BASE={BASE}", "--build-arg", "TUNE=0", "-t", IMAGE, "-f", "Containerfile"]
    if PIP_CERT.is_file():  # the pip proxy's CA, as a build secret: used by pip, never stored in the image
        args += ["--secret", f"id=pipcert,src={PIP_CERT}"]
    started = time.monotonic()
    built = subprocess.run(["podman", *args, str(CONTEXT)], capture_output=True, text=True, timeout=900, cwd=CONTEXT)
    assert built.returncode == 0, built.stdout[-4000:] + built.stderr[-4000:]
    size = int(podman("image", "inspect", IMAGE, "--format", "{{.Size}}").stdout.strip())
    report.add(image_build_s=round(time.monotonic() - started, 1), image_size_bytes=size)
    return IMAGE


def base_present() -> bool:
    """The base image is here, or pulled now (a registry reachable within two minutes)."""
    if podman("image", "exists", BASE, check=False).returncode == 0:
        return True
    try:
        return podman("pull", "--quiet", BASE, check=False, timeout=120).returncode == 0
    except subprocess.TimeoutExpired:
        return False


@dataclass
class Container:
    name: str
    url: str
    started: float
    ready_s: float = 0.0

    def logs(self) -> str:
        out = podman("logs", self.name, check=False)
        return out.stdout + out.stderr

    def cgroup(self, *names: str) -> int | None:
        """First readable cgroup memory file among ``names`` (v1 and v2 spellings), in bytes."""
        for name in names:
            for root in ("/sys/fs/cgroup/memory", "/sys/fs/cgroup"):
                out = podman("exec", self.name, "cat", f"{root}/{name}", check=False)
                if out.returncode == 0 and out.stdout.strip().isdigit():
                    return int(out.stdout.strip())
        return None

    def memory(self) -> int:
        usage = self.cgroup("memory.usage_in_bytes", "memory.current")
        assert usage is not None, "no cgroup memory meter readable in the container"
        return usage

    def peak(self) -> int | None:
        return self.cgroup("memory.max_usage_in_bytes", "memory.peak")

    def cpu_seconds(self) -> float:
        """CPU time the container has used (cgroup v1 cpuacct, or v2 cpu.stat)."""
        out = podman("exec", self.name, "cat", "/sys/fs/cgroup/cpuacct/cpuacct.usage", check=False)
        if out.returncode == 0:
            return int(out.stdout) / 1e9
        stat = podman("exec", self.name, "cat", "/sys/fs/cgroup/cpu.stat").stdout
        return int(dict(line.split() for line in stat.splitlines())["usage_usec"]) / 1e6


@contextmanager
def running(image: str, name: str, **env: str) -> Iterator[Container]:
    """The image under the Cloud Run manifest's CPU and memory limits and environment, plus ``env``,
    on a read-only root filesystem with a tmpfs /tmp (where TTS_CACHE_DIR points)."""
    cpus, memory, manifest_env = cloudrun_limits()
    merged = {**manifest_env, "PORT": str(PORT), **env}
    env_args = [a for k, v in merged.items() for a in ("-e", f"{k}={v}")]
    started = time.monotonic()
    podman("run", "-d", "--init", "--name", name, "--read-only", "--tmpfs", "/tmp:rw,mode=1777",
           "--cpus", cpus, "--memory", memory, "--memory-swap", memory, "-p", f"127.0.0.1:{PORT}:{PORT}",
           *env_args, image)
    box = Container(name, f"http://127.0.0.1:{PORT}", started)
    try:
        yield box
    finally:
        if os.environ.get("TTS_CONTAINER_KEEP_LOGS"):
            with open(os.environ["TTS_CONTAINER_KEEP_LOGS"], "a") as keep:
                keep.write(f"==== {name}\n{box.logs()}")
        podman("rm", "-f", "-t", "5", name, check=False)


@pytest.fixture(scope="module")
def container(image: str, report: Report) -> Iterator[Container]:
    cpus, memory, _ = cloudrun_limits()
    report.add(run_cpus=cpus, run_memory=memory)
    # A longer grace than the manifest's 8 s (Cloud Run kills 10 s after SIGTERM): on a shared 2-core
    # machine the in-flight request of the drain test can outlast 8 s, and the test is about draining.
    with running(image, f"tts-test-{os.getpid()}", TTS_QUIET_WINDOW_S=str(QUIET_WINDOW_S),
                 TTS_SHUTDOWN_GRACE_S="30") as box:
        yield box


def wait_ready(box: Container, timeout: float = 180) -> float:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{box.url}/readyz", timeout=2).status_code == 200:
                return time.monotonic() - box.started
        except httpx.TransportError:
            pass
        state = podman("inspect", box.name, "--format", "{{.State.Status}}", check=False).stdout.strip()
        assert state == "running", f"container {state}:\n{box.logs()[-4000:]}"
        time.sleep(0.1)
    raise AssertionError(f"not ready within {timeout} s:\n{box.logs()[-4000:]}")


def speak(url: str, text: str = TEXT, fmt: str = "wav") -> tuple[float, bytes]:
    """(seconds to the first audio bytes, the whole body) of one streamed request."""
    started = time.monotonic()
    first = 0.0
    body = bytearray()
    request = {"input": text, "voice": "af_heart", "response_format": fmt, "stream": True}
    with httpx.stream("POST", f"{url}/v1/audio/speech", json=request, timeout=120) as response:
        assert response.status_code == 200, response.read()[:500]
        for chunk in response.iter_bytes():
            if chunk and not first:  # the server sends the WAV header together with the first audio
                first = time.monotonic() - started
            body.extend(chunk)
    return first, bytes(body)


def primary_info(url: str) -> dict[str, Any]:
    """``/v1/info`` with the model loaded: where the container's quiet window released it since, a request restores
    it first."""
    found: dict[str, Any] = httpx.get(f"{url}/v1/info", timeout=5).json()
    if found["resolved"] is None:
        speak(url, "Wake.")
        found = httpx.get(f"{url}/v1/info", timeout=5).json()
    return found


def test_starts_from_the_forms_baked_into_the_image_without_making_one(container: Container,
                                                                       report: Report) -> None:
    container.ready_s = wait_ready(container)
    asked = time.monotonic()
    first_s, _ = speak(container.url)
    served_by = httpx.get(f"{container.url}/v1/info", timeout=5).json()["inferences_by_backend"]
    info = primary_info(container.url)
    report.add(cold_start_ready_s=round(container.ready_s, 2), first_request_first_audio_s=round(first_s, 2),
               cold_start_to_first_audio_s=round(asked + first_s - container.started, 2), first_served_by=served_by,
               model_load_s=round(info["resolved"]["load_s"], 2), pool=info["pool"],
               from_cache=info["resolved"]["from_cache"])
    # What TTS_BACKEND=auto serves on any CPU (this CPU's or its class's manifest, else the portable default) is an
    # ONNX Runtime form the build made (--shipped-forms): opened from the image, none made into the tmpfs /tmp.
    assert info["resolved"]["backend"] == "onnxruntime", container.logs()[-3000:]
    assert info["resolved"]["extra"]["model"].startswith("/opt/tts/cache/forms/"), info["resolved"]
    assert "model form" not in container.logs() and "made from" not in container.logs()
    made = podman("exec", container.name, "ls", "/tmp/tts-cache/forms", check=False)
    assert made.returncode != 0 or not made.stdout.strip(), made.stdout
    # ONNX Runtime opened the optimized graph baked into the image: nothing optimized into the tmpfs /tmp.
    assert podman("exec", container.name, "ls", "/opt/tts/cache/onnxruntime").stdout.strip()
    written = podman("exec", container.name, "ls", "/tmp/tts-cache/onnxruntime", check=False)
    assert written.returncode != 0 or not written.stdout.strip(), written.stdout


def test_runs_as_a_non_root_user(container: Container) -> None:
    assert podman("exec", container.name, "id", "-u").stdout.strip() == "10001"
    assert podman("image", "inspect", IMAGE, "--format", "{{.Config.User}}").stdout.strip() == "10001"


def test_streams_speech_in_every_format(container: Container) -> None:
    _, wav = speak(container.url)
    assert wav[:4] == b"RIFF" and len(wav) > 44 + 24_000  # more than half a second of 16-bit audio
    _, mp3 = speak(container.url, "Short.", "mp3")
    assert mp3[:3] == b"ID3" or (mp3[0] == 0xFF and mp3[1] & 0xE0 == 0xE0), mp3[:8]  # tag or frame sync
    for fmt, magic in (("flac", b"fLaC"), ("opus", b"OggS")):
        _, body = speak(container.url, "Short.", fmt)
        assert body.startswith(magic), (fmt, body[:8])


def test_serves_its_full_concurrency_and_measures_peak_memory(container: Container, report: Report) -> None:
    """As many simultaneous streams as the manifest's containerConcurrency (the most the platform sends one
    instance): none refused (429)."""
    capacity: int = cloudrun_service()["spec"]["template"]["spec"]["containerConcurrency"]
    info = httpx.get(f"{container.url}/v1/info", timeout=5).json()
    assert info["pool"]["capacity"] >= capacity, info["pool"]  # the server admits at least what the platform sends
    # Distinct lengths, each with chunks of the longest size (TEXT's sentences fill a whole later chunk), all at
    # once: the peak is the pool's inferences on its largest shapes side by side. (TEXT repeated up to three
    # times made twice the audio, 86 CPU-s of the suite, from chunks of the same largest shape.)
    texts = [TEXT + " ".join(["Request number", str(i)] * (1 + i % 3)) + "." for i in range(capacity)]
    started, cpu = time.monotonic(), container.cpu_seconds()
    with ThreadPoolExecutor(capacity) as pool:
        results = list(pool.map(speak, [container.url] * capacity, texts))
    wall, cpu = time.monotonic() - started, container.cpu_seconds() - cpu
    audio_s = sum((len(body) - 44) / 2 / 24_000 for _, body in results)
    firsts = sorted(first for first, _ in results)
    warm = container.memory()
    report.add(load_concurrency=capacity, load_audio_s=round(audio_s, 1), load_wall_s=round(wall, 1),
               load_audio_s_per_s=round(audio_s / wall, 2), load_audio_s_per_cpu_s=round(audio_s / cpu, 2),
               audio_s_per_char=round(audio_s / sum(len(t) for t in texts), 4),
               load_first_audio_median_s=round(firsts[len(firsts) // 2], 2),
               load_first_audio_max_s=round(firsts[-1], 2), memory_peak_bytes=container.peak(),
               memory_warm_bytes=warm)


def test_releases_memory_after_the_quiet_window(container: Container, report: Report) -> None:
    deadline = time.monotonic() + QUIET_WINDOW_S + 60
    state: dict[str, Any] = {}
    while time.monotonic() < deadline:
        state = httpx.get(f"{container.url}/v1/lifecycle", timeout=5).json()
        if state["state"] == "released":
            break
        time.sleep(1)
    assert state.get("state") == "released", state
    time.sleep(1)
    released = container.memory()
    warm = report.figures["memory_warm_bytes"]
    report.add(memory_released_bytes=released, lifecycle_meter_released=state["memory"])
    assert released < warm * 0.7, (released, warm)
    # The next request restores and speaks; the restore time is what a released instance costs a user.
    first_s, body = speak(container.url)
    report.add(first_audio_after_release_s=round(first_s, 2))
    assert body[:4] == b"RIFF"


def test_drains_in_flight_streams_on_sigterm(container: Container) -> None:
    result: dict[str, Any] = {}

    def long_request() -> None:
        try:
            result["first"], result["body"] = speak(container.url, TEXT)
        except Exception as exc:  # reported below: the assertion wants the body
            result["error"] = exc

    thread = threading.Thread(target=long_request)
    thread.start()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and httpx.get(f"{container.url}/v1/lifecycle", timeout=5).json()["in_flight"] < 1:
        time.sleep(0.05)
    podman("kill", "--signal", "TERM", container.name)
    thread.join(timeout=60)
    waited = podman("wait", container.name, timeout=60).stdout.strip()
    assert "error" not in result, result.get("error")
    body = result["body"]
    assert body[:4] == b"RIFF" and len(body) > 44 + 24_000 * 2 * 3  # the whole answer: a cut raises above
    assert waited == "0", container.logs()[-2000:]
    assert "draining in-flight requests" in container.logs()
