"""``python -m bench coldstart``: how long a new or released instance takes to speak, against a plain script.

Three things, each ``--runs`` times, alternating (script first, then the servers; the next run the other way
round), so drift of this shared machine falls on all alike:

- **the plain script** (`bench/plain_kokoro.py`): import kokoro-onnx, open the same model file with ONNX
  Runtime, synthesize the request's text, exit; timed from process spawn to the moment its audio exists;
- **a server start** (``python -m app`` with the compile cache and every other cache already on disk): spawn
  to ``/readyz`` 200, and spawn to the first audio byte of the same request sent the moment it is ready;
- **released → first audio**: the admin release endpoint, then the same request, timed from sending it
  (``--release-cycles`` per server run); ``--released-wait-s`` waits that
  long after the release's answer before sending it (0: at once), as a released instance's next request comes
  later than that: the next inference process is still starting when the release answers.

``--container NAME=IMAGE`` adds a server variant that runs the image with podman (``podman run --init --cpus
CPUS --memory 4g``, the port from ``PORT`` as Cloud Run sets it), timed from spawning ``podman run``: what a
platform's container start adds to the server's own. The image keeps its own model, caches and settings; only the
admin token, the quiet window and the log level are passed. With a container variant the plain script runs in
the first such image too (``podman run … python -`` with the script on its standard input, the image's model),
alternating with the rest, so the container's figures have a yardstick that pays the same container start.

One unrecorded run of each comes first, so every cache (compile cache, ONNX Runtime's optimized graph, the
lexicon tries, the page cache) is as a restarted instance on the same disk finds it. Writes ``results.json``
and ``report.md`` into ``--out``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import logging
import os
import shlex
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx

from app.forms import modelfile
from app.voices import EMBEDDED
from bench import machine
from bench.server import CHECKOUT, environment, free_port, terminate, with_checkout
from bench.server import progress as _progress
from bench.startreport import render, summarize

log = logging.getLogger(__name__)

TEXT = "Welcome back."
VOICE = "af_heart"
TOKEN = "coldstart-admin"
PLAIN = Path(__file__).with_name("plain_kokoro.py")


CONTAINER = "container"
"""The key, among a variant's settings, of the image a container variant runs (``--container NAME=IMAGE``)."""
CONTAINER_MEMORY = "4g"


class Failed(RuntimeError):
    """A run did not produce audio."""


def _variant(text: str) -> tuple[str, dict[str, str]]:
    """``name`` (the defaults), ``name:TTS_X=1;TTS_Y=2``, and either with ``@DIR`` after the name: the server
    runs from the checkout in DIR (its working directory comes first on ``sys.path``), to compare code
    before and after a change in one interleaved run."""
    head, _, rest = text.partition(":")
    settings = dict(pair.split("=", 1) for pair in rest.split(";") if pair)
    if not all(key.startswith("TTS_") for key in settings):
        raise argparse.ArgumentTypeError(f"settings must be TTS_* variables: {rest!r}")
    return with_checkout(head, settings), settings


SCRIPT_IN_CONTAINER = "\0script-in-container"
"""The run order's entry for the plain script in the container (no variant can be named so)."""
IMAGE_MODEL = "/opt/tts/models/model.onnx"
"""The model file of the image (the Containerfile's ``TTS_MODEL_PATH``)."""


def _image_voices(image: str) -> str:
    """Where the image keeps the voices the script reads (the embedded package's file), asked once, untimed."""
    found = subprocess.run(["podman", "run", "--rm", image, "python", "-c",
                            "from app.voices import EMBEDDED; print(EMBEDDED)"],
                           capture_output=True, text=True, timeout=120)
    if found.returncode != 0:
        raise Failed(f"could not find the voices in {image}: {found.stderr[-1000:]}")
    return found.stdout.strip().splitlines()[-1]


def container_script(image: str, voices: str) -> dict[str, float]:
    """One run of the plain script inside ``image``: seconds from spawning ``podman run`` to opened model and to
    audio (the container shares this machine's monotonic clock)."""
    spawned = time.monotonic()
    with open(PLAIN, "rb") as script:
        done = subprocess.run(["podman", "run", "--rm", "-i", "--init", "--cpus", str(os.cpu_count() or 1),
                               "--memory", CONTAINER_MEMORY, image, "python", "-", IMAGE_MODEL, voices, TEXT, VOICE],
                              stdin=script, capture_output=True, text=True, timeout=120)
    return _script_times(done, spawned, f"the plain script in {image}")


def container_variant(text: str) -> tuple[str, dict[str, str]]:
    """``NAME=IMAGE``: a variant that runs the image with podman."""
    name, _, image = text.partition("=")
    if not name or not image:
        raise argparse.ArgumentTypeError(f"--container takes NAME=IMAGE, not {text!r}")
    return name, {CONTAINER: image}


def plain_script(model: Path, voices: Path) -> dict[str, float]:
    """One run of the plain script: seconds from spawn to opened model and to audio."""
    spawned = time.monotonic()
    done = subprocess.run([sys.executable, str(PLAIN), str(model), str(voices), TEXT, VOICE],
                          capture_output=True, text=True, timeout=120, env={**os.environ, "ORT_DISABLE_TELEMETRY": "1"})
    return _script_times(done, spawned, "the plain script")


def _script_times(done: subprocess.CompletedProcess[str], spawned: float, what: str) -> dict[str, float]:
    """The script's own report (its monotonic clock is this machine's), as seconds since ``spawned``."""
    exited = time.monotonic()
    if done.returncode != 0:
        raise Failed(f"{what} failed ({done.returncode}): {done.stderr[-2000:]}")
    found = json.loads(done.stdout.strip().splitlines()[-1])
    return {"opened_s": found["opened"] - spawned, "first_audio_s": found["audio"] - spawned,
            "exit_s": exited - spawned, "audio_s": found["samples"] / found["rate"]}


def _first_audio(http: httpx.Client, sent: float) -> tuple[float, int]:
    """Seconds from ``sent`` to the first audio bytes of the request, and the bytes received in all."""
    body = {"model": "kokoro", "input": TEXT, "voice": VOICE, "response_format": "pcm", "stream": True}
    first: float | None = None
    received = 0
    with http.stream("POST", "/v1/audio/speech", json=body) as response:
        if response.status_code != 200:
            raise Failed(f"speech: {response.status_code} {response.read()[:300]!r}")
        for part in response.iter_raw():
            if part and first is None:
                first = time.monotonic() - sent
            received += len(part)
    if first is None:
        raise Failed("speech: no audio")
    return first, received


def container_command(image: str, name: str, port: int) -> list[str]:
    """``podman run`` of ``image`` listening on 127.0.0.1:``port``, with this machine's CPUs as its limit."""
    passed = {"PORT": str(port), "TTS_ADMIN_TOKEN": TOKEN, "TTS_QUIET_WINDOW_S": "0", "TTS_LOG_LEVEL": "info"}
    return ["podman", "run", "--rm", "--init", "--name", name, "--cpus", str(os.cpu_count() or 1),
            "--memory", CONTAINER_MEMORY, "-p", f"127.0.0.1:{port}:{port}",
            *[arg for key, value in passed.items() for arg in ("-e", f"{key}={value}")], image]


def server_run(settings: dict[str, str], work: Path, label: str, release_cycles: int,
               released_wait_s: float = 0.0) -> dict[str, Any]:
    """One server: spawn → ready → first audio, then ``release_cycles`` releases each followed by the request."""
    settings = dict(settings)
    checkout = settings.pop(CHECKOUT, None)
    image = settings.pop(CONTAINER, None)
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = environment({"TTS_CACHE_DIR": str(work / "server-cache"), "TTS_ADMIN_TOKEN": TOKEN,
                       "TTS_QUIET_WINDOW_S": "0", "TTS_LOG_LEVEL": "info", **settings}, port)
    log_path = work / "logs" / f"{label}.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    container: str | None = None
    command = [sys.executable, "-m", "app"]
    if image is not None:
        container = f"coldstart-{label}-{port}"
        command = container_command(image, container, port)
    with open(log_path, "ab") as sink:
        spawned, spawned_unix = time.monotonic(), time.time()
        process = subprocess.Popen(command, env=env if image is None else None, stdout=sink, stderr=subprocess.STDOUT,
                                   start_new_session=True, cwd=checkout)
    try:
        with httpx.Client(base_url=url, timeout=120) as http:
            ready_s = _wait_ready(http, process, spawned, log_path)
            first_s, received = _first_audio(http, spawned)
            start_parts = http.get("/v1/lifecycle").json().get("last_restore_parts", {})
            info = http.get("/v1/info").json()
            served_first = info.get("inferences_by_backend", {})
            cycles = []
            for _ in range(release_cycles):
                answer = http.post("/v1/lifecycle/release", headers={"Authorization": f"Bearer {TOKEN}"})
                if answer.status_code != 200 or not answer.json().get("released"):
                    raise Failed(f"release: {answer.status_code} {answer.text[:300]}")
                time.sleep(released_wait_s)
                sent = time.monotonic()
                released_s, _ = _first_audio(http, sent)
                parts = http.get("/v1/lifecycle").json().get("last_restore_parts", {})
                cycles.append({"first_audio_s": released_s, "parts": parts})
    finally:
        if container is not None:  # the podman client's end does not stop the container: stop it by name
            subprocess.run(["podman", "stop", "--time", "30", container], capture_output=True, timeout=90)
        terminate(process, 30)
    return {"ready_s": ready_s, "first_audio_s": first_s, "bytes": received, "start_parts": start_parts,
            "spawned_unix": spawned_unix, "log": str(log_path),
            "first_served_by": served_first, "backend": info.get("backend"), "engine": info.get("engine", {}),
            "released": cycles}


def _wait_ready(http: httpx.Client, process: subprocess.Popen[bytes], spawned: float, log_path: Path) -> float:
    deadline = spawned + 300
    while True:
        if process.poll() is not None:
            raise Failed(f"the server exited with {process.returncode}; see {log_path}")
        try:
            if http.get("/readyz", timeout=2).status_code == 200:
                return time.monotonic() - spawned
        except httpx.HTTPError:
            pass  # not listening yet
        if time.monotonic() > deadline:
            raise Failed(f"the server was not ready after 300 s; see {log_path}")
        time.sleep(0.01)


def run(out: Path, cache_dir: Path, variants: Sequence[tuple[str, dict[str, str]]], runs: int,
        release_cycles: int, command: str, released_wait_s: float = 0.0) -> dict[str, Any]:
    out.mkdir(parents=True, exist_ok=True)
    work = cache_dir / "coldstart" / out.name
    model = modelfile.assemble(cache_dir / "models")
    voices = EMBEDDED
    results: dict[str, Any] = {
        "run": {"id": out.name, "command": command, "runs": runs, "release_cycles": release_cycles,
                "released_wait_s": released_wait_s, "text": TEXT,
                "voice": VOICE, "started": dt.datetime.now(dt.UTC).isoformat(timespec="seconds")},
        "machine": machine.describe(), "script": [], "variants": {n: {"settings": s, "runs": []} for n, s in variants},
    }
    images = [settings[CONTAINER] for _, settings in variants if CONTAINER in settings]
    image_voices = _image_voices(images[0]) if images else None
    if images:
        results["container_script"] = {"image": images[0], "runs": []}
    _progress("priming: one unrecorded run of each (caches, page cache)")
    plain_script(model, voices)
    if image_voices is not None:
        container_script(images[0], image_voices)
    for name, settings in variants:
        server_run(_served(model, settings), work / name, f"{name}-prime", 1)
    for index in range(runs):
        order: list[str | None] = [None, *([SCRIPT_IN_CONTAINER] if images else []), *(n for n, _ in variants)]
        if index % 2:
            order.reverse()
        for entry in order:
            if entry is None:
                plain = plain_script(model, voices)
                results["script"].append(plain)
                _progress(f"run {index + 1}: plain script first audio {plain['first_audio_s']:.2f} s")
                continue
            if entry == SCRIPT_IN_CONTAINER and image_voices is not None:
                plain = container_script(images[0], image_voices)
                results["container_script"]["runs"].append(plain)
                _progress(f"run {index + 1}: plain script in the container first audio {plain['first_audio_s']:.2f} s")
                continue
            name, settings = entry, dict(variants)[entry]
            found = server_run(_served(model, settings), work / name, f"{name}-{index}", release_cycles,
                               released_wait_s)
            results["variants"][name]["runs"].append(found)
            released = ", ".join(f"{c['first_audio_s']:.2f}" for c in found["released"])
            _progress(f"run {index + 1}: {name} ready {found['ready_s']:.2f} s, first audio "
                      f"{found['first_audio_s']:.2f} s, released -> first audio {released} s")
        (out / "results.json").write_text(json.dumps(results, indent=1) + "\n")
    results["run"]["finished"] = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    results["summary"] = summarize(results)
    (out / "results.json").write_text(json.dumps(results, indent=1) + "\n")
    (out / "report.md").write_text(render(results))
    return results


def _served(model: Path, settings: dict[str, str]) -> dict[str, str]:
    """A variant's settings with the model the script opens; a container keeps the model of its image."""
    return dict(settings) if CONTAINER in settings else {"TTS_MODEL_PATH": str(model), **settings}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench coldstart", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--variants", default="server",
                        help="comma-separated server variants: a name (the defaults) or name:TTS_X=v;TTS_Y=w; "
                             "name@DIR runs the server from the checkout in DIR")
    parser.add_argument("--container", action="append", default=[], metavar="NAME=IMAGE",
                        help="a variant that runs IMAGE with podman (repeatable)")
    parser.add_argument("--runs", type=int, default=3, help="runs of each, alternating (default 3)")
    parser.add_argument("--release-cycles", type=int, default=2, help="release → request cycles per server run")
    parser.add_argument("--released-wait-s", type=float, default=0.0,
                        help="seconds between a release's answer and the request (default 0)")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--cache-dir", type=Path, default=Path.home() / ".cache" / "kokoro-tts-bench")
    args = parser.parse_args(argv)
    variants = [_variant(text) for text in args.variants.split(",") if text]
    variants += [container_variant(text) for text in args.container]
    run(args.out, args.cache_dir, variants, args.runs, args.release_cycles,
        "python -m bench coldstart " + shlex.join(argv), args.released_wait_s)
    print(args.out / "report.md")
    return 0
