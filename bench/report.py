"""The Markdown report of a run: headline, targets, figures, checks, cost, method, machine."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

from bench import checks, peers, provenance
from bench import cost as cost_mod
from bench.figures import MEMORY_MODELS, PRESETS
from bench.markdown import num, table, usd


def status_of(summary: Mapping[str, Any]) -> str:
    if not summary.get("checks_run", True):
        return "not run (the run ended before its checks)"
    if summary.get("check_error"):
        return "FAIL (no audio)"
    if not summary.get("checks_passed"):
        return "FAIL"
    if not summary.get("usable"):
        return "pass, no load figures"
    return "pass"


def headline(results: Mapping[str, Any]) -> str:
    """The headline table (also what the README quotes)."""
    derived = results["derived"]
    summaries = derived["summaries"]
    at = next(iter(summaries.values()))["at_clients"] if summaries else 4
    rows = []
    order = sorted(summaries.values(), key=lambda s: (s.get("rank") is None, s.get("rank") or 0))
    for s in order:
        release = s.get("release") or {}
        rows.append([
            str(s.get("rank", "-")), f"`{s['name']}`", str(s["shape"]), status_of(s),
            num(s["efficiency_at"]), num(s["throughput_at"]),
            f"{num(s['first_audio_p50'])} / {num(s['first_audio_p90'])}",
            num(s["warm_memory_mb"], 0), num(s["idle_memory_mb"], 0),
            num(release.get("released_median_mb"), 0) if release else "-", num(s["peak_memory_mb"], 0),
            num(s["cold_start_s"]),
        ])
    return table(["rank", "configuration", "streams x threads", "output check",
                   f"audio-s / CPU-s ({at} clients)", f"audio-s / s ({at} clients)",
                   f"first audio p50 / p90, s ({at} clients)", "warm MiB", "idle MiB", "released MiB", "peak MiB",
                   "cold start to first audio, s"], rows)


def _targets(derived: Mapping[str, Any]) -> str:
    rows = []
    for t in derived["targets"]:
        if t["met"] is None:
            verdict = "not tested"
        elif t["met"]:
            verdict = "met"
        else:
            verdict = f"**MISSED** ({t['missed_by']})"
        measured = num(t["measured"], 3) if t["measured"] is not None else "-"
        limit = num(t["limit"], 2) if t["limit"] is not None else "-"
        rows.append([t["target"], measured, limit, verdict, t["text"]])
    return table(["target", "measured", "limit", "result", "what is compared"], rows)


def _per_level(results: Mapping[str, Any], cell: Callable[[Mapping[str, Any]], str]) -> str:
    """One row per configuration, one column per client count, ``cell`` of each load level ("n/a" if none)."""
    clients = list(results["run"]["options"]["clients"])
    rows = []
    for name, record in results.get("configs", {}).items():
        by = {lv["clients"]: lv for lv in record.get("levels", [])}
        rows.append([f"`{name}`", *["n/a" if by.get(c) is None else cell(by[c]) for c in clients]])
    return table(["configuration", *[f"{c} clients" for c in clients]], rows)


def _levels(results: Mapping[str, Any]) -> str:
    return _per_level(results, lambda lv: f"{num(lv['efficiency'])} / {num(lv['throughput'])}"
                      + (f" ({lv['errors']} err)" if lv.get("errors") else ""))


def _first_audio(results: Mapping[str, Any], at: int) -> str:
    rows = []
    for name, record in results.get("configs", {}).items():
        lv = next((lv for lv in record.get("levels", []) if lv["clients"] == at), None)
        if lv is None:
            continue
        rows.append([f"`{name}`", num(lv["first_audio_p50"]), num(lv["first_audio_p90"]),
                     num(lv["first_audio_mean"]), num(lv["first_audio_max"]), str(lv["first_audio_n"]),
                     str(lv["requests_completed"])])
    return table(["configuration", "p50 s", "p90 s", "mean s", "max s", "requests", "completed in window"], rows)


def latency(results: Mapping[str, Any]) -> str:
    """First audio p50 / p90 and stalls per audio-minute, per configuration and client count."""
    return _per_level(results, lambda lv: f"{num(lv['first_audio_p50'])} / {num(lv['first_audio_p90'])}"
                      f" / {num(lv.get('stall_s_per_audio_min'))}")


def _inprocess(results: Mapping[str, Any]) -> str:
    rows = []
    for name, job in results.get("inprocess", {}).items():
        if "error" in job:
            rows.append([f"`{name}`", "failed", "-", "-", "-", job["error"][:160]])
            continue
        resolved = job.get("resolved", {})
        sent = job.get("delivered_audio_s")
        rows.append([f"`{name}`", num(job.get("delivered_efficiency") or None), num(job["efficiency"]),
                     num(job["throughput"]), str(job["concurrency"]),
                     f"{resolved.get('streams')} streams, {resolved.get('threads')} threads, "
                     f"{resolved.get('precision')}", f"{job['chunks']} chunks, {num(job['audio_s'], 1)} audio-s made"
                     + (f", {num(sent, 1)} sent" if sent else "")])
    return table(["in-process job", "audio-s / CPU-s as sent", "as made", "audio-s / s (made)", "threads",
                   "runtime resolved", "work"], rows)


def _memory(results: Mapping[str, Any]) -> str:
    rows = []
    for name, record in results.get("configs", {}).items():
        idle = record.get("idle", {})
        load = record.get("memory_load", [])
        rows.append([f"`{name}`", ", ".join(f"{m['clients']}: {m['mean_mb']:.0f}" for m in load) or "n/a",
                     num(idle.get("warm_idle_mb"), 0), num(idle.get("end_mb"), 0), num(record.get("peak_mb"), 0),
                     str(record.get("memory_source", "n/a"))])
    return table(["configuration", "under load, MiB (clients: mean)", "idle (before any release)", "idle, at the end",
                   "peak", "meter"], rows)


def _lifecycle(results: Mapping[str, Any], derived: Mapping[str, Any]) -> str:
    parts: list[str] = []
    cold = results.get("cold_start", {})
    if cold:
        rows = []
        for label in ("with_cache", "without_cache"):
            for n, sample in enumerate(cold.get(label, []), 1):
                rows.append([label.replace("_", " "), str(n),
                             sample.get("error") or num(sample.get("cold_start_s")), num(sample.get("ready_s")),
                             str(sample.get("from_cache", "-")), num(sample.get("peak_mb"), 0)])
        parts += [f"Process cold start to first audio of the short request (`{cold.get('request')}`), model and "
                  "compile-cache files dropped from the page cache first (a new container reads them from disk):",
                  "", table(["compile cache", "start", "to first audio, s", "to ready, s", "imported from cache",
                              "peak MiB"], rows), ""]
    complete = derived["summaries"].get("complete", {})
    release = complete.get("release")
    if release:
        parts += [
            f"First audio of the same short request after a release: median "
            f"**{num(release['first_audio_median'])} s**, range {num(release['first_audio_min'])}-"
            f"{num(release['first_audio_max'])} s over {release['first_audio_cycles']} cycles. Billable memory "
            f"after release: median {num(release['released_median_mb'], 0)} MiB; first "
            f"{num(release['released_first_mb'], 0)}, last {num(release['released_last_mb'], 0)}, highest "
            f"{num(release['released_max_mb'], 0)} MiB over {release['cycles']} cycles "
            f"(growth {num(release['growth_pct'], 1)} %, last {release['growth_span']} against first "
            f"{release['growth_span']}).", ""]
        record = results["configs"]["complete"]["release_cycles"]
        if record.get("inferences_by_backend"):
            parts += [f"Inferences by backend over the complete system's life (`/v1/info`): "
                      f"{json.dumps(record['inferences_by_backend'])}; serving with `{record.get('active_backend')}` "
                      "after the last cycle.", ""]
        cycles = record["cycles"]
        shown = cycles if len(cycles) <= 12 else cycles[:10] + cycles[-2:]
        parts += [table(["cycle", "billable after release, MiB", "of which cgroup", "of which shared libraries",
                          "RSS, MiB", "page cache, MiB", "first audio, s", "restore, s", "release, s"],
                         [[str(c["cycle"]), num(c["released_mb"], 0), num(c.get("released_cgroup_mb"), 0),
                           num(c.get("released_uncharged_file_mb"), 0), num(c.get("released_rss_mb"), 0),
                           num(c.get("released_file_mb"), 0), num(c["first_audio_s"]), num(c.get("restore_s")),
                           num(c.get("release_s"))] for c in shown]), ""]
        if len(cycles) > 12:
            parts += [f"(cycles 11 to {len(cycles) - 2} are in results.json)", ""]
    return "\n".join(parts) if parts else "The complete system was not measured in this run."


def _checks(results: Mapping[str, Any]) -> str:
    found = results.get("checks", {})
    th = checks.THRESHOLDS
    reasoning = (checks.__doc__ or "").split("Thresholds (`THRESHOLDS`)", 1)[-1]
    lines = [
        f"Every corpus chunk of each configuration (synthesized in process with that configuration's backend "
        f"settings) against ONNX Runtime defaults on the same model. A chunk passes when its length is within "
        f"max({th.max_sample_units} duration units of {checks.DURATION_UNIT} samples, "
        f"{th.max_sample_fraction:.0%}) of the reference and its DTW-aligned log-mel distance is at most "
        f"{th.max_mel_distance}. Thresholds{reasoning}", ""]
    if "error" in found:
        return "\n".join([*lines, f"Checks did not run: {found['error']}"])
    rows = []
    for name, v in found.get("configs", {}).items():
        label = "run to run (ONNX Runtime again)" if name == "ort-defaults-rerun" else f"`{name}`"
        if "error" in v:
            rows.append([label, "**FAIL**", "-", "-", "-", v["error"]])
            continue
        rows.append([label, "pass" if v["passed"] else "**FAIL**", str(v["chunks"]), str(v["max_abs_sample_diff"]),
                     f"{num(v['mean_mel_distance'], 3)} / {num(v['max_mel_distance'], 3)}",
                     ", ".join(v["failed"][:8]) + (" ..." if len(v["failed"]) > 8 else "")])
    lines += ["Measured in this run (run-to-run is the calibration of noise; each backend row is a "
              "backend-to-backend difference):", "",
              table(["configuration", "result", "chunks", "max sample difference", "log-mel distance mean / max",
                      "failing chunks"], rows)]
    return "\n".join(lines)


def _cost(derived: Mapping[str, Any], audits: Mapping[str, str]) -> str:
    costs = derived.get("cost", {})
    parts = [
        "Two billing models, side by side: **metered** bills the memory used (the cgroup's figure, page cache "
        "included) for the instance's whole life; **configured** bills the configured memory size (Cloud Run "
        "instance-based billing: peak rounded up to 512 MiB) for the whole life. CPU is billed as the allocated "
        "vCPUs for the whole life in both. Releasing memory lowers only the metered bill. Cost per audio-hour: one "
        "instance busy at its highest measured throughput. Bursty day: 24 h, 2 audio-hours of demand in 8 equal "
        "bursts, the instance kept alive between bursts, or (scale-to-zero) started for each burst with its own "
        "measured cold start and kept as long as the longest quiet window (bench/cost.py).", ""]
    for preset in PRESETS:
        rates = cost_mod.PRESETS[preset].rates
        rows = []
        for name, row in costs.get(preset, {}).items():
            rows.append([f"`{name}`", *[usd(row[m]["per_audio_hour"]) for m in MEMORY_MODELS],
                         *[usd(row[m]["day_total"]) for m in MEMORY_MODELS],
                         *[usd(row[m].get("day_total_scale_to_zero")) for m in MEMORY_MODELS],
                         usd(row["metered"]["day_memory"]), usd(row["configured"]["day_memory"])])
        parts += [f"### {preset} rates ({rates.source}: ${rates.cpu_per_vcpu_s:.6g} per vCPU-s, "
                  f"${rates.memory_per_gb_s:.6g} per GiB-s)", "",
                  table(["configuration", "per audio-hour, metered", "per audio-hour, configured",
                          "bursty day, metered", "bursty day, configured", "scale-to-zero, metered",
                          "scale-to-zero, configured", "day's memory, metered",
                          "day's memory, configured"], rows), ""]
        if preset in audits:
            parts += [f"Full cost audit with these rates (traces, scale-to-zero): [{audits[preset]}]"
                      f"({audits[preset]}).", ""]
    parts += ["![daily bill](daily_bill.png)"]
    return "\n".join(parts)


def render(results: Mapping[str, Any], audits: Mapping[str, str]) -> str:
    derived = results["derived"]
    run = results["run"]
    at = next(iter(derived["summaries"].values()))["at_clients"] if derived["summaries"] else 4
    quick = ("\n> **Quick run**: it proves the harness works end to end; its short windows, corpus subset and "
             "few cycles make the numbers indicative only.\n" if run.get("quick") else "")
    ceiling = derived["ceiling"]
    cpus = results["machine"]["budget"]["cpus"]
    return "\n".join([
        f"# Benchmark run `{run['id']}`", quick,
        f"- Measured {run.get('started', '?')} to {run.get('finished', '?')} ({num(run.get('duration_s'), 0)} s) "
        f"on {results['machine']['cpu_model']}, {cpus} CPUs.",
        f"- Command: `{run.get('command') or 'python -m bench run'}`",
        "- Everything measured: `results.json`; per-request records: `levels/`; figures for the cost model: "
        "`figures.json` (`python -m bench cost --run <this folder>`).", "",
        f"## Headline ({at} clients)", "",
        "Ranked by efficiency; a configuration that fails the output checks is not ranked.", "",
        headline(results), "",
        "## Targets", "", _targets(derived), "",
        "## Engine tuning", "", provenance.tuning(results), "",
        (f"On {cpus} CPUs the study's pool gain cannot show, and no 16-core machine was available for this run: "
         "the efficiency grid on 16 cores remains to be run (`python -m bench run` there).") if cpus < 16 else "",
        "",
        "## Efficiency and throughput", "",
        "audio-s per CPU-s / audio-s per s, per client count:", "", _levels(results), "",
        "In process, the audio is counted twice: as the model made it, and as a server sends it (each chunk's edge "
        "silence trimmed at its joins, `app.silence`): a server's figures compare with the second.", "",
        f"In-process ceiling (the raw runtime, no HTTP): {num(ceiling.get('sized_efficiency'))} audio-s per CPU-s "
        f"for the complete system's shape ({ceiling.get('sized_shape')}, {ceiling.get('sized_concurrency')} "
        f"threads), {num(ceiling.get('one_by_one_efficiency'))} for OpenVINO 1 stream x 1 thread.", "",
        _inprocess(results), "",
        "![efficiency](efficiency.png)", "",
        f"## First audio at {at} clients", "", _first_audio(results, at), "",
        "## Latency per load level", "",
        "First audio p50 / p90 (s) / stalls: seconds a 1x player starting at the first byte waits for data, per "
        "audio-minute:", "", latency(results), "",
        "## Memory", "", _memory(results), "", "![memory over idle time](memory_idle.png)", "",
        "## Cold start and the released state", "", _lifecycle(results, derived), "",
        "## Output checks", "", _checks(results), "",
        *(["## The peers and the foreign instance", "", section, ""] if (section := peers.section(results)) else []),
        "## The container image", "", provenance.container(), "",
        "## Cost", "", _cost(derived, audits), "",
        "## Method", "", provenance.method(results), "",
        "## Machine, versions, settings", "", provenance.machine(results), "",
        "## Problems seen in this run", "", provenance.problems(results, derived), "",
    ]).replace("\n\n\n", "\n\n")


def readme_snippet(results: Mapping[str, Any]) -> str:
    """The headline table with one line of context, for the README."""
    m = results["machine"]
    lines = []
    for t in results["derived"]["targets"]:
        verdict = "not tested" if t["met"] is None else "met" if t["met"] else f"missed ({t['missed_by']})"
        measured = "" if t["measured"] is None else f": {t['measured']:.3g} against {t['limit']:g}"
        lines.append(f"- {t['target']}{measured}, {verdict}.")
    return (f"Measured by `python -m bench run` on {m['cpu_model']} ({m['budget']['cpus']} CPUs), run "
            f"`{results['run']['id']}` (full report: bench/results/{results['run']['id']}/report.md):\n\n"
            f"{headline(results)}\n\nTargets:\n\n" + "\n".join(lines) + "\n")
