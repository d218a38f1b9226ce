"""Shape-churn soak: many requests over hundreds of distinct input lengths, memory sampled as they go.

OpenVINO keeps kernels per input shape, and every distinct length is a new shape (of the token input, and of the
audio frames the durations make). The soak starts one server per shape cache size
(`app.runtime.spec.Options.shape_cache`, through `bench.variant`; in a memory cgroup of its own), warms it with the
longest input, ``clients`` at once so that every stream's buffers already have their largest size, then sends
``requests`` requests whose phoneme inputs cycle through ``lengths`` distinct lengths in a shuffled order,
``clients`` at a time. Billable memory and RSS are read every ``sample_every`` requests. At the end it releases the
state (the admin endpoint), reads the released figure, and speaks once more to prove the restore.

With ``--kill-every-s`` and ``--hostile-every-s`` it is a soak with faults (`bench.faults`): helper processes killed
in turn and bursts of hostile requests while the clients ask, every other request streamed and every eighth Japanese;
each request is counted served, refused (429), lost (no audio) or cut (a stream broken after its first bytes), and
the run fails if one is lost or a hostile request gets anything but a 4xx.

``python -m bench soak --out bench/results/soak-<date>`` writes soak.json and soak.md.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import dataclasses
import itertools
import json
import random
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from app.settings import Settings
from bench import client, faults, meter, variant
from bench.configs import ServerConfig
from bench.server import Server
from bench.soakrecord import SoakResult, render, tally
from lifecycle import pagecache, proctree

MB = 1024 * 1024
MAX_INPUT_CHARS = Settings.max_input_chars
ADMIN_TOKEN = "soak-admin"
PHONEMES = ("ðə kwˈɪk bɹˈWn fˈɑks ʤˈʌmps ˌOvəɹ ðə lˈAzi dˈɔɡ, wˌIl ðə kəmˈɪti ɹəvjˈuz ɪts kwˈɔɹtəɹli bˈʌʤɪt; "
            "ænd nˈObədi ɪn ðə bˈɪldɪŋ sˈimz tə nˈOtɪs ðə ɹˈAn ðæt hæz bˌɪn fˈɔlɪŋ sˈɪns ˈɜɹli ðɪs mˈɔɹnɪŋ. ")
"""A phonemized passage (misaki's alphabet) cut to each length: no G2P cost in the client or the server."""


@dataclass(frozen=True)
class SoakOptions:
    out: Path
    cache_dir: Path
    requests: int = 2000
    lengths: int = 200
    """Distinct input lengths, in phoneme tokens: ``min_tokens`` … ``min_tokens + lengths - 1``."""
    min_tokens: int = 5
    clients: int = 2
    speed: float = 2.0
    """Speaking speed of every request: 2 halves the audio (and the time) of each request while keeping
    the shapes distinct."""
    sample_every: int = 50
    shape_caches: tuple[int, ...] = (0, -1)
    streams: int = 0
    threads_per_stream: int = 0
    seed: int = 7
    backend: str = "openvino"
    """``TTS_BACKEND`` of the soaked server: ``openvino``, ``onnxruntime`` or ``auto`` (the tuned choice found in
    ``TTS_BAKED_CACHE_DIR`` / the cache, as a deployed server resolves it). The shape cache matters to OpenVINO only."""
    duration_s: float = 0.0
    """Run for this long, going round ``requests``' schedule as often as it takes; 0: ``requests`` requests."""
    kill_every_s: float = 0.0
    """Kill the server's helper processes this often (`bench.faults.KILLS`, in turn); 0: never. With faults, every
    other request streams and every eighth is Japanese (read in a helper process)."""
    hostile_every_s: float = 0.0
    """Send a burst of hostile requests (`bench.faults.burst`) this often; 0: never."""
    max_requests: int = 64
    """``TTS_MAX_REQUESTS`` of the soaked server: the hostile burst's flood goes past it."""

    @property
    def faults(self) -> bool:
        return bool(self.kill_every_s or self.hostile_every_s)


def phonemes_of(tokens: int) -> str:
    """A phoneme input of exactly ``tokens`` characters (each one token), never ending in a space."""
    text = (PHONEMES * (tokens // len(PHONEMES) + 2))[:tokens]
    return text[:-1] + "ə" if text.endswith(" ") else text


def schedule(options: SoakOptions) -> list[int]:
    """Token lengths, request by request: every length once per pass, each pass shuffled."""
    lengths = list(range(options.min_tokens, options.min_tokens + options.lengths))
    rng = random.Random(options.seed)
    order: list[int] = []
    while len(order) < options.requests:
        rng.shuffle(lengths)
        order.extend(lengths)
    return order[:options.requests]


def _speak(http: httpx.Client, url: str, tokens: int, speed: float) -> int:
    response = http.post(f"{url}/v1/audio/speech", json={
        "input": phonemes_of(tokens), "input_format": "phonemes", "voice": "af_heart", "response_format": "pcm",
        "speed": speed, "stream": False})
    if response.status_code != 200:
        raise client.RequestFailed(f"{tokens} tokens: HTTP {response.status_code} {response.text[:200]}")
    return len(response.content)


JAPANESE = ("こんにちは、お元気ですか。", "今日はいい天気ですね。散歩に行きましょう。", "駅はどこですか。")
"""Read by the Japanese reader, a helper process the faults kill."""


def request_body(options: SoakOptions, index: int, tokens: int) -> dict[str, Any]:
    body: dict[str, Any] = {"input": phonemes_of(tokens), "input_format": "phonemes", "voice": "af_heart",
                            "response_format": "pcm", "speed": options.speed, "stream": False}
    if options.faults:
        body["stream"] = index % 2 == 1
        if index % 8 == 7:
            body.update(input=JAPANESE[index // 8 % len(JAPANESE)], input_format="text", voice="jf_alpha")
    return body


def _ask(http: httpx.Client, url: str, body: dict[str, Any]) -> tuple[str, int, str]:
    """One request: its outcome (`SoakResult.outcomes`), the audio bytes received and what went wrong, if anything."""
    received = 0
    try:
        with http.stream("POST", f"{url}/v1/audio/speech", json=body) as response:
            if response.status_code != 200:
                response.read()
                outcome = "refused" if response.status_code == 429 else "lost"
                return outcome, 0, f"HTTP {response.status_code} {response.text[:200]}"
            for piece in response.iter_raw():
                received += len(piece)
    except httpx.HTTPError as exc:
        return ("cut" if received else "lost"), received, f"{type(exc).__name__}: {exc}"
    return "served", received, ""


def inject_faults(options: SoakOptions, server: Server, result: SoakResult, started: float,
                  stop: threading.Event) -> None:
    """The faults, on their schedules, until ``stop``: kills in turn (`faults.KILLS`) and hostile bursts."""
    every = {"kill": options.kill_every_s, "burst": options.hostile_every_s}
    due = {name: period for name, period in every.items() if period > 0}
    turn = 0
    while due and not stop.wait(0.5):
        now = time.perf_counter() - started
        # A fault that fails to be injected is recorded and the schedule goes on: a soak whose faults stopped
        # would report a clean run it never had.
        if now >= due.get("kill", float("inf")):
            modules = faults.KILLS[turn % len(faults.KILLS)]
            turn += 1
            try:
                result.kills.append({"at_s": round(now, 1), "asked": list(modules),
                                     "killed": faults.kill(server.pid, modules)})
            except Exception as exc:
                result.fault_errors.append(f"kill at {now:.0f} s: {type(exc).__name__}: {exc}")
            # A whole period from now, even where the injector fell behind (a burst runs for seconds on this thread):
            # missed turns are skipped, never caught up. Two kills a moment apart would kill the process the first
            # one's retry had just started, a fault the schedule never asked for: --kill-every-s is the least time
            # between two kills.
            due["kill"] = time.perf_counter() - started + every["kill"]
        if now >= due.get("burst", float("inf")):
            try:
                result.hostile += faults.burst(server.url, MAX_INPUT_CHARS, options.max_requests)
            except Exception as exc:
                result.fault_errors.append(f"burst at {now:.0f} s: {type(exc).__name__}: {exc}")
            due["burst"] += every["burst"]


def soak_one(options: SoakOptions, shape_cache: int, progress: bool = True) -> SoakResult:
    config = ServerConfig(name=f"soak-{options.backend}-cache{shape_cache}", title="soak", backend="openvino",
                          kind="complete", streams=options.streams, threads_per_stream=options.threads_per_stream,
                          compile_cache=True, lifecycle=False)
    settings = config.env(quiet_window_s=0.0, max_requests=options.max_requests)
    settings.update({"TTS_BACKEND": options.backend, "TTS_ADMIN_TOKEN": ADMIN_TOKEN,
                     "TTS_CACHE_DIR": str(options.cache_dir),
                     **variant.launch_env(dataclasses.replace(config.options(), shape_cache=shape_cache))})
    result = SoakResult(shape_cache)
    order = schedule(options)
    # Every server reads the model and the compile cache from disk into its own cgroup, not the previous one's.
    pagecache.evict(meter.files_under(options.cache_dir))
    with Server(config, settings, options.out / "logs" / f"{config.name}.log") as server:
        server.wait_ready()
        # Largest buffers first, on every stream: as many longest requests at once as there are clients.
        longest = options.min_tokens + options.lengths - 1
        with httpx.Client(timeout=300) as http, concurrent.futures.ThreadPoolExecutor(options.clients) as pool:
            list(pool.map(lambda _: _speak(http, server.url, longest, options.speed), range(options.clients)))

        def sample(done: int) -> None:
            reading = server.meter.read()
            result.series.append({"requests": done, "billable_mb": round(reading.billable / MB, 1),
                                  "rss_mb": round((reading.rss or 0) / MB, 1)})
            _save_partial(options, result)
            if progress:
                print(f"[soak cache={shape_cache}] {done}/{len(order)} requests, billable "
                      f"{reading.billable / MB:.0f} MB", file=sys.stderr, flush=True)

        sample(0)
        cpu_before = proctree.cpu_seconds(server.pid)
        started = time.perf_counter()
        deadline = started + options.duration_s if options.duration_s else None
        jobs = enumerate(itertools.cycle(order) if deadline is not None else order)
        lock = threading.Lock()
        done = 0
        audio_bytes = 0

        def worker(http: httpx.Client) -> None:
            nonlocal done, audio_bytes
            while True:
                with lock:
                    job = None if deadline is not None and time.perf_counter() >= deadline else next(jobs, None)
                if job is None:
                    return
                index, tokens = job
                outcome, size, error = _ask(http, server.url, request_body(options, index, tokens))
                with lock:
                    result.outcomes[outcome] += 1
                    if error:
                        result.errors.append(f"request {index} ({tokens} tokens): {error}"[:300])
                    done += 1
                    audio_bytes += size
                    if done % options.sample_every == 0:
                        sample(done)

        stop = threading.Event()
        injector = threading.Thread(target=inject_faults, args=(options, server, result, started, stop),
                                    daemon=True)
        injector.start()
        # One client for all threads (httpx.Client is thread-safe), ``clients`` requests at a time.
        with httpx.Client(timeout=300) as http, concurrent.futures.ThreadPoolExecutor(options.clients) as pool:
            for future in [pool.submit(worker, http) for _ in range(options.clients)]:
                future.result()
        stop.set()
        injector.join()
        result.wall_s = time.perf_counter() - started
        result.server_cpu_s = proctree.cpu_seconds(server.pid) - cpu_before
        result.audio_s = audio_bytes / 2 / 24000
        if done % options.sample_every:
            sample(done)
        client.release(server.url, ADMIN_TOKEN)
        time.sleep(1.0)
        result.released_mb = round(server.meter.read().billable / MB, 1)
        with httpx.Client(timeout=300) as http:
            result.restored_ok = _speak(http, server.url, 40, options.speed) > 0
    return result


def partial_path(options: SoakOptions, shape_cache: int) -> Path:
    return options.out / f"soak-cache{shape_cache}.partial.json"


def _save_partial(options: SoakOptions, result: SoakResult) -> None:
    """The series so far, after every sample: a soak runs for hours, and one cut short (a session that ends, a
    killed machine) still leaves what it measured. `run` removes it once the whole record is written."""
    path = partial_path(options, result.shape_cache)
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".tmp")
    partial.write_text(json.dumps({"shape_cache": result.shape_cache, "planned_requests": options.requests,
                                   "errors": len(result.errors), "series": result.series,
                                   "error_samples": result.errors[:5]}, indent=2) + "\n")
    partial.replace(path)


def run(options: SoakOptions, progress: bool = True) -> dict[str, Any]:
    options.out.mkdir(parents=True, exist_ok=True)
    results = [soak_one(options, cache, progress) for cache in options.shape_caches]
    record = {
        "options": {k: (str(v) if isinstance(v, Path) else v) for k, v in options.__dict__.items()},
        "results": [{**r.summary(), "series": r.series, "error_samples": r.errors[:5], "kill_log": r.kills,
                     "hostile_answers": tally(r.hostile), "fault_error_samples": r.fault_errors[:5]}
                    for r in results],
    }
    (options.out / "soak.json").write_text(json.dumps(record, indent=2) + "\n")
    (options.out / "soak.md").write_text(render(record))
    for cache in options.shape_caches:
        partial_path(options, cache).unlink(missing_ok=True)
    return record


def main(argv: list[str]) -> int:
    defaults = SoakOptions(out=Path(), cache_dir=Path())
    parser = argparse.ArgumentParser(prog="python -m bench soak", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--cache-dir", type=Path, default=Path.home() / ".cache" / "kokoro-tts-bench")
    parser.add_argument("--requests", type=int, default=defaults.requests)
    parser.add_argument("--lengths", type=int, default=defaults.lengths)
    parser.add_argument("--clients", type=int, default=defaults.clients)
    parser.add_argument("--speed", type=float, default=defaults.speed)
    parser.add_argument("--sample-every", type=int, default=defaults.sample_every)
    parser.add_argument("--shape-caches", default=",".join(map(str, defaults.shape_caches)),
                        help="OpenVINO shape cache sizes to soak, one server each (default 0,-1; 0 is the server's)")
    parser.add_argument("--backend", default=defaults.backend, choices=("openvino", "onnxruntime", "auto"),
                        help="TTS_BACKEND of the soaked server (default openvino)")
    parser.add_argument("--duration-s", type=float, default=defaults.duration_s,
                        help="run this long instead of --requests requests")
    parser.add_argument("--kill-every-s", type=float, default=defaults.kill_every_s,
                        help="kill a helper process this often (inference, reader, both, in turn); 0: never")
    parser.add_argument("--hostile-every-s", type=float, default=defaults.hostile_every_s,
                        help="send a burst of hostile requests this often; 0: never")
    args = parser.parse_args(argv)
    options = SoakOptions(out=args.out, cache_dir=args.cache_dir, requests=args.requests, lengths=args.lengths,
                          clients=args.clients, speed=args.speed, sample_every=args.sample_every,
                          shape_caches=tuple(int(v) for v in args.shape_caches.split(",")), backend=args.backend,
                          duration_s=args.duration_s, kill_every_s=args.kill_every_s,
                          hostile_every_s=args.hostile_every_s)
    record = run(options)
    print(render(record))
    if options.faults:  # a cut stream is the fault's, told to its client; a lost request or an unfair answer is ours
        return 0 if all(r["lost"] == 0 and r["hostile_unfair"] == 0 and r["fault_errors"] == 0 and r["restored_ok"]
                        for r in record["results"]) else 1
    return 0 if all(r["errors"] == 0 and r["restored_ok"] for r in record["results"]) else 1
