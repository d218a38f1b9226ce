"""How and where a run was made, for its report (`bench.report`): the method, the machine and settings, the container
image's figures, the engine's tuning and the problems seen."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from bench.markdown import num, table


def method(results: Mapping[str, Any]) -> str:
    o = results["run"]["options"]
    corpus = results["corpus"]
    return "\n".join([
        f"- **Corpus**: `{corpus['name']}` v{corpus['version']} ({corpus['path']}, sha256 "
        f"`{corpus['sha256'][:16]}...`): {len(corpus['utterances'])} utterances "
        f"({', '.join(f'{n} {k}' for k, n in corpus['counts'].items())}), {min(corpus['chars'])} to "
        f"{max(corpus['chars'])} characters. Short request (cold start, after release): `{corpus['short_request']}`.",
        f"- **Load**: closed loop; each client sends its next request when the previous response has fully "
        f"arrived, cycling through the corpus from its own offset; streamed 16-bit PCM (no encoder cost). "
        f"{o['ramp_s']:g} s of ramp-up excluded, then a {o['window_s']:g} s steady-state window. The clients run "
        f"in a separate process (bench/load.py), which reads the server's CPU time (user + system time of "
        f"all the threads of its process tree, the inference process included) at the window's two edges. Audio "
        f"is credited to the time it was made in: each "
        f"arrival's bytes are spread over the time since that client's previous arrival (or its request), and the "
        f"window gets the overlapping share; clients run on past the window until every one has received something "
        f"after it. First audio: from sending a request to its first audio bytes, over the requests whose first "
        f"audio arrived in the window.",
        "- **Efficiency** = audio-seconds made in the window / server CPU-seconds in the window; "
        "**throughput** = audio-seconds / window seconds. Client CPU is recorded separately (levels/*.json).",
        f"- **Memory**: each server runs in a memory cgroup of its own; billable = the cgroup's usage, page cache "
        f"included, plus the server's resident file pages (shared libraries) that another process had already "
        f"charged to its own group: in a fresh container those would be the server's too (bench/meter.py). Model "
        f"and compile-cache files are dropped from the page cache before each server starts. Idle "
        f"period: {o['idle_s']:g} s after the last load window (the issue's 10 minutes is `--idle-s 600`). Peak: "
        f"the cgroup's high-water mark over the server's life.",
        "- **In process** (bench/inprocess.py): the same backend code and settings in a process of its own, every "
        "corpus chunk once, with 4 threads sharing the slots; audio-s per CPU-s of that process. This is the "
        "ceiling for the serving-overhead target and the audio for the output checks. These jobs run while an "
        "earlier configuration's server idles (idle memory does not depend on the CPU); the complete system idles "
        "alone.",
        f"- **Release cycles** (complete system): manual release with the admin token, wait for `released`, read "
        f"memory, time the short request's first audio; {o['growth_cycles']} cycles, first audio over the first "
        f"{o['release_cycles']}. Quiet window {o['quiet_window_s']:g} s.",
        f"- **Cold starts**: {o['cold_starts']} process starts with the compile cache warm and "
        f"{o['cold_starts']} without it (`bench.variant`), both with the model assembled already "
        "(`TTS_MODEL_PATH`), so only compilation differs.",
    ])


def machine(results: Mapping[str, Any]) -> str:
    m = results["machine"]
    lines = [
        f"- CPU: {m['cpu_model']} ({', '.join(m['cpu_flags'])}); {m['logical_cpus']} logical CPUs; budget the "
        f"server sees: {m['budget']['cpus']} CPUs, {m['budget']['cores']} cores (quota {m['budget']['quota']}).",
        f"- Memory {m['memory_total_mb']:,} MiB; kernel {m['kernel']}; {m['platform']}.",
        f"- Commit `{m['commit'][:12]}`" + (" (with uncommitted changes in app/, lifecycle/ or bench/)"
                                            if m["commit_dirty"] else "") + ".",
        "- Versions: " + ", ".join(f"{k} {v}" for k, v in m["versions"].items()) + ".",
        "", "Server settings per configuration (plus `TTS_MODEL_PATH`, `TTS_CACHE_DIR`, `TTS_ADMIN_TOKEN`):", "",
    ]
    rows = []
    for name, record in results.get("configs", {}).items():
        settings = {k: v for k, v in record.get("settings", {}).items()
                    if k not in ("TTS_MODEL_PATH", "TTS_CACHE_DIR", "TTS_LOG_LEVEL")}
        resolved = (record.get("info") or {}).get("resolved") or {}
        rows.append([f"`{name}`", " ".join(f"{k.removeprefix('TTS_')}={v}" for k, v in settings.items()),
                     json.dumps({k: resolved.get(k) for k in ("slots", "streams", "threads", "precision",
                                                              "from_cache")})])
    lines.append(table(["configuration", "TTS_* settings", "resolved by the runtime"], rows))
    return "\n".join(lines)


def problems(results: Mapping[str, Any], derived: Mapping[str, Any]) -> str:
    lines = []
    for name, record in results.get("configs", {}).items():
        for error in record.get("errors", []):
            lines.append(f"- `{name}`: {error}")
        errors = sum(lv.get("errors", 0) for lv in record.get("levels", []))
        if errors:
            lines.append(f"- `{name}`: {errors} failed requests under load (see levels/{name}-c*.json).")
    for name in derived.get("excluded", []):
        lines.append(f"- `{name}` is not ranked and not in figures.json: it failed the output checks or produced "
                     "no load figures.")
    return "\n".join(lines) if lines else "None."


CONTAINER_FIGURES = Path(__file__).resolve().parents[1] / "deploy" / "measured.json"


def container(path: Path = CONTAINER_FIGURES) -> str:
    """The image's figures, measured from the running container by tests/deploy/test_container.py."""
    try:
        m = json.loads(path.read_text())
    except (OSError, ValueError):
        return "No container figures recorded (`deploy/measured.json`; run `tests/deploy/test_container.py`)."
    gib = 1024**3
    rows = [
        ["image size", f"{m['image_size_bytes'] / 1e9:.2f} GB"],
        ["cold start to ready (baked compile cache)", f"{m['cold_start_ready_s']:.1f} s"],
        ["cold start to first audio", f"{m['cold_start_to_first_audio_s']:.1f} s"],
        ["cold start to ready when it must compile", f"{m['cold_start_ready_compiling_s']:.1f} s"],
        ["first audio after a release", f"{m['first_audio_after_release_s']:.1f} s"],
        ["container memory warm", f"{m['memory_warm_bytes'] / gib:.2f} GiB"],
        ["container memory released", f"{m['memory_released_bytes'] / gib:.2f} GiB"],
        *[[f"warm peak at full concurrency, {name}", f"{peak / gib:.2f} GiB"]
          for name, peak in m.get("memory_warm_peak_bytes", {}).items()],
    ]
    return (f"From `deploy/measured.json` ({m['_measured']}; {m['_source']}).\n\n"
            + table(["figure", "value"], rows))


def tuning(results: Mapping[str, Any]) -> str:
    """The tuner's table (``python -m app tune``): what the complete system serves with, and why."""
    tuned = results.get("tuning")
    if not tuned:
        return "Not tuned in this run (`--no-tune` or no complete system): the complete system served untuned."
    rows = []
    for row in tuned.get("table", []):
        check = row.get("check") or {}
        verdict = ("reference" if row.get("reference") else "error: " + str(row["error"])[:60] if row.get("error")
                   else "pass" if check.get("passed") else f"FAIL (log-mel {check.get('max_mel_distance', 0):.2f})")
        rows.append([f"`{row['candidate']}`" + (" **chosen**" if row.get("chosen") else ""),
                     num(row.get("efficiency"), 3), num(row.get("throughput")), num(row.get("peak_rss_mb"), 0),
                     num(row.get("score"), 3), verdict])
    return "\n".join([
        f"`python -m app tune` on this machine ({tuned['key']['cpu']}, {tuned['key']['cpus']} CPUs, "
        f"{tuned['key']['isa']}): {tuned['why']}.", "",
        "Median over interleaved rounds on the tuning corpus (not the benchmark's), at full pool load, each "
        "candidate in a process of its own; the output check is the one below, against ONNX Runtime. The score "
        "is the efficiency priced as an instance bills (`python -m app tune --memory-price`): the choice"
        " is the highest.", "",
        table(["candidate", "audio-s per CPU-s", "x realtime", "peak RSS MB", "score", "output check"], rows)])
