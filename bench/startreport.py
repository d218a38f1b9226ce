"""The cold-start benchmark's summary and report.md (`bench.coldstart`): medians per variant against the plain
script, and the targets they are read against."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any

TARGET_RATIO = 1.2
"""Process start → first audio, server over the plain script (issue 16)."""
TARGET_RELEASED_S = 0.6
"""Released → first audio for a short request (issue 16)."""


def _waited(info: dict[str, Any]) -> str:
    wait = info.get("released_wait_s", 0.0)
    return f", each request sent {wait:g} s after the release's answer" if wait else ""


def summarize(results: dict[str, Any]) -> dict[str, Any]:
    """Medians per variant and their ratios to the plain script's median."""
    script = statistics.median(r["first_audio_s"] for r in results["script"])
    summary: dict[str, Any] = {"script_first_audio_s": script}
    contained = results.get("container_script", {}).get("runs", [])
    if contained:
        summary["container_script_first_audio_s"] = statistics.median(r["first_audio_s"] for r in contained)
    for name, variant in results["variants"].items():
        runs = variant["runs"]
        ready = statistics.median(r["ready_s"] for r in runs)
        first = statistics.median(r["first_audio_s"] for r in runs)
        released = [c["first_audio_s"] for r in runs for c in r["released"]]
        # Run k of a variant against run k of the script: the two ran next to each other.
        paired = [r["first_audio_s"] / p["first_audio_s"] for r, p in zip(runs, results["script"], strict=False)]
        summary[name] = {
            "ready_s": ready, "first_audio_s": first, "ready_ratio": ready / script,
            "first_audio_ratio": first / script, "paired_ratios": paired,
            "paired_ratio_median": statistics.median(paired) if paired else None,
            "released_first_audio_s": statistics.median(released) if released else None,
            "released_range_s": [min(released), max(released)] if released else None,
            "first_audio_range_s": [min(r["first_audio_s"] for r in runs), max(r["first_audio_s"] for r in runs)],
        }
    return summary


def _seconds(values: Sequence[float]) -> str:
    return ", ".join(f"{v:.2f}" for v in values)


def _parts(parts: dict[str, float]) -> str:
    return ", ".join(f"{k} {v:.2f}" for k, v in parts.items())


def _container_script_lines(results: dict[str, Any]) -> list[str]:
    contained = results.get("container_script", {})
    if not contained.get("runs"):
        return []
    median = results["summary"]["container_script_first_audio_s"]
    return [f"The same script in the container (`{contained['image']}`, spawn of `podman run` to audio): median "
            f"**{median:.2f} s** (runs: {_seconds([r['first_audio_s'] for r in contained['runs']])}; the container "
            f"variants' yardstick).", ""]


def render(results: dict[str, Any]) -> str:
    info, summary = results["run"], results["summary"]
    script = summary["script_first_audio_s"]
    opened = statistics.median(r["opened_s"] for r in results["script"])
    lines = [f"# Cold start run `{info['id']}`", "",
             f"- {info.get('started')} to {info.get('finished')}, {results['machine'].get('cpu_model')}, "
             f"{results['machine'].get('logical_cpus')} CPUs; the request `{info['text']}` ({info['voice']}), "
             f"{info['runs']} runs alternating, {info['release_cycles']} release cycles per server run"
             f"{_waited(info)}.",
             f"- Command: `{info['command']}`", "",
             f"Plain kokoro-onnx script, spawn to audio: median **{script:.2f} s** (runs: "
             f"{_seconds([r['first_audio_s'] for r in results['script']])}; model opened at {opened:.2f} s).", "",
             *_container_script_lines(results),
             "| variant | settings | spawn → ready s | spawn → first audio s | x script (medians) | x script, run by "
             f"run (median) | released → first audio s (target {TARGET_RELEASED_S}) | first request served by |",
             "|---|---|---|---|---|---|---|---|"]
    for name, variant in results["variants"].items():
        s = summary[name]
        lo, hi = s["first_audio_range_s"]
        released = "n/a" if s["released_first_audio_s"] is None else (
            f"{s['released_first_audio_s']:.2f} ({s['released_range_s'][0]:.2f}–{s['released_range_s'][1]:.2f})")
        served = ", ".join(sorted({k for r in variant["runs"] for k in r["first_served_by"]}))
        settings = ", ".join(f"`{k}={v}`" for k, v in variant["settings"].items()) or "defaults"
        lines.append(f"| `{name}` | {settings} | {s['ready_s']:.2f} ({s['ready_ratio']:.2f} x) | "
                     f"{s['first_audio_s']:.2f} ({lo:.2f}–{hi:.2f}) | **{s['first_audio_ratio']:.2f}** "
                     f"(target {TARGET_RATIO}) | {_seconds(s['paired_ratios'])} ({s['paired_ratio_median']:.2f}) | "
                     f"{released} | {served} |")
    lines += ["", "Per run (the parts of each load as `/v1/lifecycle` reports them):", ""]
    for name, variant in results["variants"].items():
        for index, r in enumerate(variant["runs"]):
            cycles = "; ".join(f"{c['first_audio_s']:.2f} s ({_parts(c['parts'])})" for c in r["released"])
            lines.append(f"- `{name}` run {index + 1}: ready {r['ready_s']:.2f} s, first audio "
                         f"{r['first_audio_s']:.2f} s [{_parts(r['start_parts'])}]; released → first audio "
                         f"{cycles or 'n/a'}")
    return "\n".join(lines) + "\n"
