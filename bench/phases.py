"""What one running server is put through in a benchmark run (`bench.runner`), phase by phase: its first request,
the load levels, idle memory, and (the complete system only) release/restore cycles. Each phase returns the record
the run stores in results.json.
"""

from __future__ import annotations

import dataclasses
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench import client, load, peers
from bench.configs import ServerConfig
from bench.corpus import Utterance
from bench.meter import MB, Reading, Sampler
from bench.runoptions import Options
from bench.server import Server


def mb(value: float | int | None) -> float | None:
    return None if value is None else value / MB


def reading(r: Reading, t0: float) -> dict[str, Any]:
    return {"t": round(r.t - t0, 2), "billable_mb": mb(r.billable), "cgroup_mb": mb(r.cgroup),
            "uncharged_file_mb": mb(r.uncharged_file), "anon_mb": mb(r.anon), "file_mb": mb(r.file),
            "mapped_mb": mb(r.mapped), "rss_mb": mb(r.rss)}


@dataclass(frozen=True)
class Context:
    """What the phases take from the run."""

    options: Options
    short: Utterance
    """The corpus's shortest request: the one timed to first audio."""
    takes_dir: Path
    """Where the load generator keeps the first complete response to each utterance (`bench.peers`)."""
    admin_token: str
    """The servers' ``TTS_ADMIN_TOKEN``, for the manual releases of the cycles."""
    progress: Callable[[str], None]


def first_request(server: Server, short: Utterance) -> dict[str, Any]:
    """Wait for readiness, then time ``short``'s first audio: spawn to first audio is the process cold start."""
    ready = server.wait_ready()
    sent = time.perf_counter()
    peer = peers.PEERS.get(server.config.name) if server.config.peer else None
    speech = client.speak(server.url, short.text, short.voice, api=peer.api if peer else "openai")
    return {"ready_s": ready, "cold_start_s": sent - server.spawned_at + speech.first_audio_s,
            "first_request_first_audio_s": speech.first_audio_s, "audio_s": speech.audio_s}


def quiesce(server: Server, timeout_s: float = 300.0) -> float:
    """Wait until no request is in flight; returns the seconds waited.

    Clients hang up at the end of a window, but the server finishes the chunk it is synthesizing for each of
    them first: idle time and the next level start only once that work is done.
    """
    if server.config.peer:
        return peers.quiesce(server.pid, timeout_s=timeout_s)
    started = time.monotonic()
    while client.get_json(server.url, "/v1/lifecycle").get("in_flight", 0) and \
            time.monotonic() - started < timeout_s:
        time.sleep(0.1)
    return time.monotonic() - started


def level(ctx: Context, server: Server, config: ServerConfig, clients: int) -> dict[str, Any]:
    """``clients`` closed-loop clients (`bench.load`, in a process of its own) with memory sampled meanwhile; the
    summary keeps that memory under ``_memory`` for the caller to move out."""
    o = ctx.options
    quiesce(server)
    path = o.out / "levels" / f"{config.name}-c{clients}.json"
    argv = [sys.executable, "-m", "bench.load", "--url", server.url, "--pid", str(server.pid), "--clients",
            str(clients), "--ramp-s", str(o.ramp_s), "--window-s", str(o.window_s), "--drain-s", str(o.drain_s),
            "--corpus", str(o.corpus), "--out", str(path), "--voice", o.voice,
            "--takes", str(ctx.takes_dir / f"{config.name}-c{clients}.npz")]
    if config.peer:
        argv += ["--api", peers.PEERS[config.name].api]
    if o.items:
        argv += ["--items", ",".join(o.items)]
    ctx.progress(f"    {clients} clients: {o.ramp_s:g} s ramp + {o.window_s:g} s window")
    launched = time.monotonic()
    with Sampler(server.meter, 1.0) as sampler:
        subprocess.run(argv, check=True, timeout=o.ramp_s + o.window_s + 300)
        readings = sampler.stop()
    result = load.read(path)
    steady = [r.billable for r in readings if r.t >= launched + o.ramp_s + 1.0] or [r.billable for r in readings]
    summary = {k: v for k, v in dataclasses.asdict(result).items() if k != "records"}
    summary["_memory"] = {"clients": clients, "mean_mb": sum(steady) / len(steady) / MB, "max_mb": max(steady) / MB}
    ctx.progress(f"    {clients} clients: {result.efficiency:.2f} audio-s per CPU-s, "
                 f"{result.throughput:.2f} audio-s per s, first audio p50 {result.first_audio_p50:.2f} s, "
                 f"stalls {result.stall_s_per_audio_min:.2f} s per audio-min, {result.errors} errors")
    if not server.alive():
        raise RuntimeError(f"the server exited during the {clients}-client level; see {server.log_path}")
    return summary


def idle(ctx: Context, server: Server, config: ServerConfig, meanwhile: Callable[[], None],
         doing: str = "") -> dict[str, Any]:
    """Billable memory sampled for ``idle_s`` with no requests; ``meanwhile`` (the in-process jobs, named in
    ``doing``) runs while it is sampled, in processes of its own."""
    o = ctx.options
    interval = max(o.memory_interval_s, min(5.0, o.idle_s / 60.0))
    ctx.progress(f"    idle {o.idle_s:g} s, memory every {interval:g} s"
                 + (f", in-process jobs meanwhile: {doing}" if doing else ""))
    waited = quiesce(server)
    t0 = time.monotonic()
    with Sampler(server.meter, interval) as sampler:
        meanwhile()
        time.sleep(max(0.0, t0 + o.idle_s - time.monotonic()))
        readings = [r for r in sampler.stop() if r.t <= t0 + o.idle_s + interval / 2]
    snapshot = {} if config.peer else client.get_json(server.url, "/v1/lifecycle")
    series = [reading(r, t0) for r in readings]
    out: dict[str, Any] = {"interval_s": interval, "series": series, "lifecycle": snapshot,
                           "waited_for_in_flight_s": waited}
    values = [s["billable_mb"] for s in series]
    out["mean_mb"] = sum(values) / len(values)
    out["end_mb"] = values[-1]
    if config.lifecycle:
        release_at = o.quiet_window_s
        warm = [s["billable_mb"] for s in series if s["t"] < release_at] or values[:1]
        out["warm_idle_mb"] = sum(warm) / len(warm)
        out["released"] = snapshot.get("state") == "released"
    else:
        out["warm_idle_mb"] = out["mean_mb"]
    ctx.progress(f"    idle memory {out['warm_idle_mb']:.0f} MB warm, {out['end_mb']:.0f} MB at the end")
    return out


def cycles(ctx: Context, server: Server) -> dict[str, Any]:
    """Release, then time a short request's first audio; memory after each release from the cgroup."""
    o, short = ctx.options, ctx.short
    done: list[dict[str, Any]] = []
    total = max(o.release_cycles, o.growth_cycles)
    ctx.progress(f"    {total} release/restore cycles")
    for n in range(1, total + 1):
        state = client.get_json(server.url, "/v1/lifecycle").get("state")
        if state != "released":
            client.release(server.url, ctx.admin_token)
            client.wait_for_state(server.url, "released")
        time.sleep(0.2)  # the release has returned; let the reading settle
        released = server.meter.read()
        speech = client.speak(server.url, short.text, short.voice)
        snapshot = client.get_json(server.url, "/v1/lifecycle")
        done.append({"cycle": n, "released_mb": released.billable / MB, "released_cgroup_mb": mb(released.cgroup),
                     "released_uncharged_file_mb": mb(released.uncharged_file), "released_rss_mb": mb(released.rss),
                     "released_file_mb": mb(released.file), "first_audio_s": speech.first_audio_s,
                     "restore_s": snapshot.get("last_restore_s"), "release_s": snapshot.get("last_release_s")})
        if n % 10 == 0 or n == total:
            ctx.progress(f"    cycle {n}/{total}: released {released.billable / MB:.0f} MB, "
                         f"first audio {speech.first_audio_s:.2f} s")
    info = client.get_json(server.url, "/v1/info")
    return {"cycles": done, "first_audio_cycles": o.release_cycles, "growth_cycles": o.growth_cycles,
            "active_backend": info.get("active_backend"), "inferences_by_backend": info.get("inferences_by_backend")}
