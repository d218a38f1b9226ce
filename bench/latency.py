"""``python -m bench latency``: first audio and stalls of server variants, side by side, interleaved.

Every variant is a full server (``python -m app`` with its own defaults: the backend ``auto`` chooses, sized by the
server's rule; compile cache on, lifecycle off) that differs only in the ``TTS_*`` settings the variant names
(`server_env`): where no tuning matches, that is OpenVINO, and a variant that names a tuned cache
(``TTS_BAKED_CACHE_DIR``) serves its tuned choice. The report's "served" column says what each one ran. All of
them start first (one after another, so their starts do not compete), and each measures its *first request after
start* against the same request once warm. Then, per client count, every variant runs the same closed-loop
level (`bench.load`), in alternating order from one level to the next (A B, B A, ...), so drift of this shared
machine falls on both alike. Idle servers use no CPU; each level's CPU time is read from its own server's process tree.

Per variant and level: first audio p50 / p90, stalls per audio-minute (a 1x player starting at the first byte),
audio-seconds per CPU-second and per second. Writes ``results.json``, ``levels/`` and ``report.md``.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import json
import logging
import shlex
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx

from app.forms import modelfile
from app.sizing import read_budget, shape_for
from bench import client, load, machine
from bench import corpus as corpus_mod
from bench.configs import ServerConfig
from bench.meter import files_under
from bench.quota import Emulation
from bench.server import CHECKOUT, Server, with_checkout
from bench.server import progress as _progress
from lifecycle.pagecache import evict

log = logging.getLogger(__name__)

VARIANTS: dict[str, dict[str, str]] = {"deadline": {}}
"""Named variants: ``deadline`` is the server's defaults."""

OLD_POOL: dict[str, str] = {
    "TTS_SCHEDULER": "fifo", "TTS_FIRST_CHUNK_TOKENS": "100", "TTS_SECOND_CHUNK_TOKENS": "0",
    "TTS_IDLE_FIRST_CHUNK_TOKENS": "0", "TTS_LONE_FIRST_CHUNK_TOKENS": "0", "TTS_MAX_CHUNK_TOKENS": "250",
    "TTS_SLACK_CHUNKS": "0", "TTS_BUSY_MAX_CHUNK_TOKENS": "0", "TTS_EXPRESS_SLOTS": "0", "TTS_WARM_UP": "0",
    "TTS_REALTIME_FACTOR": "0"}
"""``fifo@DIR``: the server as it was before the deadline scheduler (first come, first served, chunks of at most 100,
then 200, then 250 tokens, no warm-up, no real-time admission), the reference of the latency targets. Those switches
are settings no more (docs/experiments.md): DIR must be a checkout that still has them (before 2026-12-06)."""


def parse_variant(text: str) -> tuple[str, dict[str, str]]:
    """``name`` (a known variant) or ``name:TTS_X=1,TTS_Y=2`` (settings on top of the defaults), either with
    ``@DIR`` after the name: the server runs from the checkout in DIR, to compare code before and after a change
    in one interleaved run (as `bench.coldstart`)."""
    head, colon, rest = text.partition(":")
    settings = dict(pair.split("=", 1) for pair in rest.split(",") if pair)
    if not all(key.startswith("TTS_") for key in settings):
        raise argparse.ArgumentTypeError(f"settings must be TTS_* variables: {rest!r}")
    name = with_checkout(head, settings)
    if not colon and name == "fifo":
        if CHECKOUT not in settings:
            raise argparse.ArgumentTypeError("fifo needs @DIR: a checkout whose settings still have the old pool's "
                                             "switches (`OLD_POOL`)")
        settings.update(OLD_POOL)
    elif not colon:
        if name not in VARIANTS and CHECKOUT not in settings:
            raise argparse.ArgumentTypeError(f"unknown variant {name!r}; known: {', '.join(VARIANTS)}, fifo@DIR")
        settings.update(VARIANTS.get(name, {}))
    return name, settings


def _first_request(server: Server, text: str, voice: str, repeats: int = 3) -> dict[str, Any]:
    """First audio of the first request after start, and of the same request warm (the median of ``repeats``)."""
    first = client.speak(server.url, text, voice)
    warm = sorted(client.speak(server.url, text, voice).first_audio_s for _ in range(repeats))
    median = warm[len(warm) // 2]
    return {"first_s": first.first_audio_s, "warm_s": median, "ratio": first.first_audio_s / median}


def summarize_starts(samples: Sequence[dict[str, float]]) -> dict[str, Any]:
    """The medians of several starts' `_first_request` samples (each with ``ready_s``), the ratios' range, and the
    samples: one start is one draw of a noisy figure (0.97-1.73 x in single samples on one machine and day, against
    1.05-1.27 x over five starts: bench/results/floor-20261204)."""
    def median(key: str) -> float:
        return statistics.median_high(sample[key] for sample in samples)

    ratios = [sample["ratio"] for sample in samples]
    return {"ready_s": median("ready_s"), "first_s": median("first_s"), "warm_s": median("warm_s"),
            "ratio": median("ratio"), "ratio_min": min(ratios), "ratio_max": max(ratios), "starts": len(samples),
            "samples": list(samples)}


def _first_audio_s(url: str, text: str, voice: str) -> float:
    """Seconds to the first audio bytes of a streamed request, hanging up as soon as they arrive."""
    body = {"model": "kokoro", "input": text, "voice": voice, "response_format": "pcm", "stream": True}
    sent = time.perf_counter()
    with httpx.Client(base_url=url, timeout=300) as http, \
            http.stream("POST", "/v1/audio/speech", json=body) as response:
        if response.status_code != 200:
            raise client.RequestFailed(f"speech: {response.status_code}")
        for part in response.iter_raw():
            if part:
                return time.perf_counter() - sent
    raise client.RequestFailed("speech: the response carried no audio")


def _alone(server: Server, corpus: corpus_mod.Corpus) -> dict[str, Any]:
    """First audio of every corpus utterance sent alone. The client hangs up at the first audio; the chunk the
    server had started meanwhile finishes first, so the next request finds the pool idle: nothing running and
    nothing waiting, as a request alone on an idle server does (until 2026-12-02 it waited only for one free
    stream, which on a pool of several streams left it beside the hung-up chunk and off the wide session)."""
    found: dict[str, float] = {}
    for utterance in corpus.utterances:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            pool = client.get_json(server.url, "/v1/info")["pool"]
            if pool["busy"] == 0 and pool["waiting"] == 0:
                break
            time.sleep(0.05)
        found[utterance.id] = _first_audio_s(server.url, utterance.text, utterance.voice)
    values = list(found.values())
    return {"first_audio_s": found, "p50": load.percentile(values, 50), "p90": load.percentile(values, 90),
            "mean": sum(values) / len(values)}


def server_env(config: ServerConfig, settings: dict[str, str], *, model: Path, cache_dir: Path) -> dict[str, str]:
    """A variant's ``TTS_*`` settings: the server's own defaults (its backend choice, ``auto``, and its sizing rule),
    with the compile cache on, lifecycle off and the server's own admission (its refusals are part of a level), then
    the variant's settings.

    So a variant that names a tuned cache (``TTS_BAKED_CACHE_DIR``) serves what its tuning chose, as a server
    started with that setting does. Until 2026-12-04 the base forced ``TTS_BACKEND=openvino`` and sized streams:
    such a variant served OpenVINO 2 x 1 on the AMD EPYC of that day, whose tuned choice was ONNX Runtime
    (``latency-20261204-*`` say so in their "served" column and their NOTE.md)."""
    env = config.env(quiet_window_s=0, max_requests=0)  # the server's own admission: refusals are part of a level
    env.update({"TTS_BACKEND": "auto", "TTS_STREAMS": "0", "TTS_THREADS_PER_STREAM": "0"})
    env.update({"TTS_MODEL_PATH": str(model), "TTS_CACHE_DIR": str(cache_dir), "TTS_LOG_LEVEL": "info", **settings})
    return env


def run(out: Path, cache_dir: Path, variants: Sequence[tuple[str, dict[str, str]]], clients: Sequence[int],
        ramp_s: float, window_s: float, drain_s: float, corpus_path: Path, command: str,
        alone: bool = True, client_nice: int | None = None, starts: int = 3,
        emulation: Emulation | None = None) -> dict[str, Any]:
    out.mkdir(parents=True, exist_ok=True)
    (out / "levels").mkdir(exist_ok=True)
    work = cache_dir / "latency" / out.name
    model = modelfile.assemble(cache_dir / "models")
    corpus = corpus_mod.load(corpus_path)
    shape = shape_for(read_budget())
    config = ServerConfig("sized", "the server's defaults, sized by the rule", "openvino", "sized", shape.streams,
                          shape.threads_per_stream, compile_cache=True)
    results: dict[str, Any] = {
        "run": {"id": out.name, "command": command, "started": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
                "clients": list(clients), "ramp_s": ramp_s, "window_s": window_s, "shape": config.shape,
                "client_nice": client_nice, "emulated": emulation.describe() if emulation is not None else None},
        "machine": machine.describe(), "corpus": {"name": corpus.name, "sha256": corpus.sha256},
        "variants": {name: {"settings": settings, "levels": []} for name, settings in variants},
    }
    servers: dict[str, Server] = {}
    try:
        for name, settings in variants:
            env = server_env(config, settings, model=model, cache_dir=work / "server-cache")
            evict([model, *files_under(work / "server-cache")])
            checkout = env.pop(CHECKOUT, None)
            if emulation is not None:
                env.update(emulation.settings(work / "emulated" / name))
            server = Server(config, env, work / "logs" / f"{name}.log", label=f"latency-{name}",
                            cwd=Path(checkout) if checkout else None,
                            cpu_quota=emulation.quota_cpus if emulation is not None else None)
            server.start()
            servers[name] = server
            ready_s = server.wait_ready()
            info = client.get_json(server.url, "/v1/info")
            results["variants"][name]["served"] = (
                f"{(info.get('engine') or {}).get('backend') or info.get('backend')} "
                f"{info['pool']['streams']}x{info['pool']['threads_per_stream']}")
            shortest = corpus.shortest()
            samples = []
            for index in range(starts):
                if index:  # the same server started again, from the same evicted cache
                    server.stop()
                    evict([model, *files_under(work / "server-cache")])
                    server.start()
                    ready_s = server.wait_ready()
                samples.append({"ready_s": ready_s, **_first_request(server, shortest.text, shortest.voice)})
            results["variants"][name]["start"] = first = summarize_starts(samples)
            _progress(f"{name}: ready {first['ready_s']:.1f} s; first request after start {first['first_s']:.2f} s, "
                      f"warm {first['warm_s']:.2f} s ({first['ratio']:.2f} x, {first['ratio_min']:.2f}-"
                      f"{first['ratio_max']:.2f} over {first['starts']} starts)")
            if alone:
                results["variants"][name]["alone"] = found = _alone(server, corpus)
                _progress(f"{name}: alone over the corpus, first audio p50 {found['p50']:.2f} s, "
                          f"p90 {found['p90']:.2f} s")
        for index, count in enumerate(clients):
            order = list(variants) if index % 2 == 0 else list(reversed(variants))
            for name, _ in order:
                results["variants"][name]["levels"].append(
                    _level(servers[name], name, count, out, ramp_s, window_s, drain_s, corpus_path, client_nice))
                (out / "results.json").write_text(json.dumps(results, indent=1, default=str) + "\n")
    finally:
        for server in servers.values():
            server.stop()
    results["run"]["finished"] = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    (out / "results.json").write_text(json.dumps(results, indent=1, default=str) + "\n")
    (out / "report.md").write_text(render(results))
    return results


def _level(server: Server, name: str, clients: int, out: Path, ramp_s: float, window_s: float, drain_s: float,
           corpus_path: Path, client_nice: int | None = None) -> dict[str, Any]:
    deadline = time.monotonic() + 120
    while client.get_json(server.url, "/v1/lifecycle").get("in_flight", 0) and time.monotonic() < deadline:
        time.sleep(0.1)  # the previous level's hung-up chunks finish first
    path = out / "levels" / f"{name}-c{clients}.json"
    prefix = ["nice", "-n", str(client_nice)] if client_nice is not None else []
    argv = [*prefix, sys.executable, "-m", "bench.load", "--url", server.url, "--pid", str(server.pid), "--clients",
            str(clients), "--ramp-s", str(ramp_s), "--window-s", str(window_s), "--drain-s", str(drain_s),
            "--corpus", str(corpus_path), "--out", str(path)]
    subprocess.run(argv, check=True, timeout=ramp_s + window_s + 300)
    result = load.read(path)
    summary = {k: v for k, v in dataclasses.asdict(result).items() if k != "records"}
    _progress(f"{name}, {clients} clients: first audio p50 {result.first_audio_p50:.2f} s, p90 "
              f"{result.first_audio_p90:.2f} s, stalls {result.stall_s_per_audio_min:.2f} s per audio-min, "
              f"{result.efficiency:.2f} audio-s per CPU-s, {result.errors} errors")
    return summary


def render(results: dict[str, Any]) -> str:
    run_info = results["run"]
    names = list(results["variants"])
    lines = [f"# Latency run `{run_info['id']}`", "",
             f"- {run_info.get('started')} to {run_info.get('finished')}, {results['machine'].get('cpu_model')}, "
             f"sized shape {run_info['shape']} unless a variant serves another, corpus {results['corpus']['name']}; "
             f"{run_info['ramp_s']:g} s ramp + "
             f"{run_info['window_s']:g} s window per level, variants interleaved.",
             f"- Command: `{run_info['command']}`", ""]
    if run_info.get("emulated"):
        lines[-1:-1] = [f"- **Emulated**: {run_info['emulated']} (bench/quota.py)."]
    lines += ["| variant | settings | served (streams x threads) |", "|---|---|---|"]
    lines += [f"| `{n}` | {', '.join(f'`{k}={v}`' for k, v in v['settings'].items()) or 'defaults'} | "
              f"{v.get('served', '')} |" for n, v in results["variants"].items()]
    lines += ["", "## First request after start", "", "Medians over the starts (each a fresh server, its files evicted "
              "from the page cache); the ratio's range in brackets.", "",
              "| variant | ready s | first request s | same request warm s | ratio | starts |",
              "|---|---|---|---|---|---|"]
    for name in names:
        start = results["variants"][name].get("start", {})
        spread = (f" ({_f(start.get('ratio_min'))}-{_f(start.get('ratio_max'))})"
                  if start.get("starts", 1) > 1 else "")
        lines.append(f"| `{name}` | {_f(start.get('ready_s'))} | {_f(start.get('first_s'))} | "
                     f"{_f(start.get('warm_s'))} | {_f(start.get('ratio'))}{spread} | {start.get('starts', 1)} |")
    lines += ["", "## Alone", "", "First audio of every corpus utterance sent on its own (the client hangs up at "
              "the first audio).", "", "| variant | p50 s | p90 s | mean s |", "|---|---|---|---|"]
    for name in names:
        found = results["variants"][name].get("alone", {})
        lines.append(f"| `{name}` | {_f(found.get('p50'))} | {_f(found.get('p90'))} | {_f(found.get('mean'))} |")
    lines += ["", "## Per load level", "",
              "First audio over the requests whose first audio arrived in the window; stalls: seconds a 1x player "
              "starting at the first byte waits for data, per audio-minute, over the window's completed requests.",
              "", "| clients | variant | first audio p50 s | p90 s | stalls s / audio-min | stalled requests | "
              "audio-s / CPU-s | audio-s / s | requests | errors | refused (429) | refusal p90 s |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for index, count in enumerate(run_info["clients"]):  # a client count may repeat: one row per level run
        base: dict[str, Any] | None = None
        for name in names:
            levels = results["variants"][name]["levels"]
            level = levels[index] if index < len(levels) else None
            if level is None or level["clients"] != count:
                continue
            base = base or level
            ratio = level["efficiency"] / base["efficiency"] if base["efficiency"] else float("nan")
            lines.append(f"| {count} | `{name}` | {_f(level['first_audio_p50'])} | {_f(level['first_audio_p90'])} | "
                         f"{_f(level['stall_s_per_audio_min'])} | {level['stalled_requests']}/"
                         f"{level['stall_requests_n']} | {_f(level['efficiency'])} ({ratio:.2f} x) | "
                         f"{_f(level['throughput'])} | {level['first_audio_n']} | {level['errors']} | "
                         f"{level.get('refused', 0)}{_bare(level)} | {_f(level.get('refused_p90_s'))} |")
    return "\n".join(lines) + "\n"


def _bare(level: dict[str, Any]) -> str:
    """How many refusals said nothing of when to come back, where any did not."""
    missing = level.get("refused_without_retry_after", 0)
    return f" ({missing} without Retry-After)" if missing else ""


def _f(value: Any) -> str:
    return "n/a" if not isinstance(value, (int, float)) or value != value else f"{value:.2f}"


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench latency", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--variants", default="deadline",
                        help="comma-separated; a name (deadline, fifo@DIR) or name:TTS_X=v;... (settings separated "
                             "by ';'), either with @DIR after the name to run the server from the checkout in DIR")
    parser.add_argument("--clients", default="1,2,4",
                        help="client counts, in the order run (default 1,2,4); a count may repeat")
    parser.add_argument("--ramp-s", type=float, default=4.0)
    parser.add_argument("--window-s", type=float, default=30.0)
    parser.add_argument("--drain-s", type=float, default=6.0)
    parser.add_argument("--corpus", type=Path, default=corpus_mod.DEFAULT)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--no-alone", action="store_true", help="skip the first audio of each utterance alone")
    parser.add_argument("--client-nice", type=int, default=None,
                        help="run the load generator under `nice -n N`: a negative N (root only) keeps the client's "
                             "own scheduling on this machine out of the servers' first-audio figures, as a remote "
                             "client's would be")
    parser.add_argument("--cache-dir", type=Path, default=Path.home() / ".cache" / "kokoro-tts-bench")
    parser.add_argument("--starts", type=int, default=3,
                        help="fresh starts per variant for the first request after start (default 3; medians "
                             "reported, with the ratio's range)")
    parser.add_argument("--emulate", metavar="CLASS",
                        help="run every server under a CPU quota scaled to CLASS, a slower class on record (amd-avx2: "
                             "the slowest), with its tuning and shape (bench/quota.py; root, cgroups)")
    args = parser.parse_args(argv)
    if args.starts < 1:
        parser.error("--starts must be at least 1")
    try:
        emulation = Emulation.of(args.emulate) if args.emulate else None
    except ValueError as exc:
        parser.error(f"--emulate {args.emulate}: {exc}")
    variants = [parse_variant(text.replace(";", ",")) for text in args.variants.split(",") if text]
    clients = [int(c) for c in args.clients.split(",") if c]
    run(args.out, args.cache_dir, variants, clients, args.ramp_s, args.window_s, args.drain_s, args.corpus,
        "python -m bench latency " + shlex.join(argv), alone=not args.no_alone,
        client_nice=args.client_nice, starts=args.starts, emulation=emulation)
    print(args.out / "report.md")
    return 0
