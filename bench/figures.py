"""From raw measurements to figures: per-configuration summaries, ranking, targets, cost, and figures.json.

Everything here is a pure function of ``results.json``, so a report can be rebuilt from a committed run
(``python -m bench report RUN``) without measuring again.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from statistics import median
from typing import Any

from bench import cost

PRESETS: tuple[str, ...] = ("study", "cloudrun-instance")
MEMORY_MODELS: tuple[cost.MemoryBilling, ...] = ("metered", "configured")
TARGET_CLIENTS = 4
POOL_CPUS = 16
"""The pool target is stated for a 16-core machine."""


def finite(value: Any) -> bool:
    return isinstance(value, int | float) and math.isfinite(value)


def level_at(record: Mapping[str, Any], clients: int) -> dict[str, Any] | None:
    for level in record.get("levels", []):
        if level.get("clients") == clients:
            found: dict[str, Any] = level
            return found
    return None


def target_clients(results: Mapping[str, Any]) -> int:
    """4 when measured; otherwise the largest client count at or under 4 (quick runs)."""
    counts = [int(c) for c in results["run"]["options"]["clients"]]
    if TARGET_CLIENTS in counts:
        return TARGET_CLIENTS
    under = [c for c in counts if c <= TARGET_CLIENTS]
    return max(under) if under else min(counts)


def _median(values: Sequence[float]) -> float | None:
    kept = [v for v in values if finite(v)]
    return median(kept) if kept else None


def summarize(name: str, record: Mapping[str, Any], results: Mapping[str, Any]) -> dict[str, Any]:
    """The figures of one configuration the report and the cost model use."""
    at = target_clients(results)
    level = level_at(record, at) or {}
    levels = [lv for lv in record.get("levels", []) if finite(lv.get("throughput"))]
    full = max(levels, key=lambda lv: lv["throughput"]) if levels else {}
    memory_load = {m["clients"]: m for m in record.get("memory_load", [])}
    found = results.get("checks", {})
    # The foreign instance and the peers are checked on what they served (`bench.peers.check_takes`).
    check = found.get("configs", {}).get(name) or found.get("served", {}).get(name) or {}
    out: dict[str, Any] = {
        "name": name,
        "kind": record["config"]["kind"],
        "shape": record["config"].get("shape"),
        "at_clients": at,
        "efficiency": {lv["clients"]: lv["efficiency"] for lv in record.get("levels", [])},
        "throughput": {lv["clients"]: lv["throughput"] for lv in record.get("levels", [])},
        "errors": sum(lv.get("errors", 0) for lv in record.get("levels", [])),
        "efficiency_at": level.get("efficiency"),
        "throughput_at": level.get("throughput"),
        "first_audio_p50": level.get("first_audio_p50"),
        "first_audio_p90": level.get("first_audio_p90"),
        "full_load_clients": full.get("clients"),
        "full_load_efficiency": full.get("efficiency"),
        "full_load_throughput": full.get("throughput"),
        "warm_memory_mb": memory_load.get(full.get("clients"), {}).get("mean_mb"),
        "idle_memory_mb": record.get("idle", {}).get("warm_idle_mb"),
        "idle_end_mb": record.get("idle", {}).get("end_mb"),
        "peak_memory_mb": record.get("peak_mb"),
        "peak_at_mb": memory_load.get(at, {}).get("max_mb"),
        "cold_start_s": record.get("start", {}).get("cold_start_s"),
        "checks_run": "checks" in results,
        "checks_passed": bool(check.get("passed")),
        "check_error": check.get("error"),
        "run_errors": record.get("errors", []),
        "inprocess_efficiency": delivered(results.get("inprocess", {}).get(name, {})),
    }
    cycles = record.get("release_cycles", {}).get("cycles", [])
    if cycles:
        first_n = int(record["release_cycles"].get("first_audio_cycles", len(cycles)))
        first_audio = [c["first_audio_s"] for c in cycles[:first_n]]
        released = [c["released_mb"] for c in cycles]
        # Five cycles at each end smooth single-reading noise; short runs compare their halves.
        span = max(1, min(5, len(released) // 2))
        head, tail = released[:span], released[-span:]
        out["release"] = {
            "cycles": len(cycles), "first_audio_cycles": len(first_audio),
            "first_audio_median": _median(first_audio), "first_audio_min": min(first_audio),
            "first_audio_max": max(first_audio), "released_median_mb": _median(released),
            "released_first_mb": released[0], "released_last_mb": released[-1], "released_max_mb": max(released),
            "growth_span": span,
            "growth_pct": 100.0 * ((_median(tail) or 0.0) - (_median(head) or 0.0)) / (_median(head) or math.nan),
        }
    idle = record.get("idle", {})
    if not cycles and idle.get("released"):
        # A lifecycle without release cycles (the foreign instance): what it held at the end of the idle period,
        # after its quiet window.
        out["release"] = {"released_median_mb": idle.get("end_mb"), "first_audio_median": None, "from_idle": True}
    measured = (finite(out["full_load_efficiency"]) and out["full_load_efficiency"] > 0
                and finite(out["full_load_throughput"]) and out["full_load_throughput"] > 0)
    out["usable"] = bool(out["checks_passed"] and measured)
    # Another server (or this one untuned) is priced on what it measured, whatever its check of whole responses
    # says: the check is reported beside it, and such a server is not ranked with this one's configurations.
    out["priced"] = bool(measured and (out["usable"] or out["kind"] in ("foreign", "peer")))
    return out


def _cold(results: Mapping[str, Any], label: str) -> list[float]:
    return [s["cold_start_s"] for s in results.get("cold_start", {}).get(label, []) if finite(s.get("cold_start_s"))]


def to_figures(summary: Mapping[str, Any], results: Mapping[str, Any]) -> cost.Figures | None:
    """The `bench.cost.Figures` of a priced configuration (None for one that failed)."""
    if not summary.get("priced", summary["usable"]):
        return None
    options = results["run"]["options"]
    release = summary.get("release")
    lifecycle = release is not None
    cold = _median(_cold(results, "with_cache")) if release is not None and not release.get("from_idle") else None
    warm = summary["warm_memory_mb"] or summary["peak_memory_mb"]
    peak = max(summary["peak_memory_mb"] or 0.0, warm or 0.0)
    notes = (f"Measured by python -m bench run ({results['run']['id']}): efficiency and throughput at "
             f"{summary['full_load_clients']} clients (the highest throughput measured); warm memory is the mean "
             f"billable memory during that window; idle memory the mean over the idle period before any release; "
             f"peak the cgroup's high-water mark.")
    if lifecycle:
        notes += (" Released memory is the median after the release cycles; restore_s the median first audio "
                  "after a release; cold start the median with the compile cache.")
    return cost.Figures(
        name=summary["name"],
        efficiency=float(summary["full_load_efficiency"]),
        throughput_audio_s_per_s=float(summary["full_load_throughput"]),
        vcpus=float(results["machine"]["budget"]["cpus"]),
        warm_memory_mb=float(warm),
        idle_memory_mb=float(summary["idle_memory_mb"] or warm),
        released_memory_mb=float(release["released_median_mb"]) if release else None,
        peak_memory_mb=float(peak),
        quiet_window_s=float(options["quiet_window_s"]) if lifecycle else 0.0,
        cold_start_s=float(cold if cold is not None else (summary["cold_start_s"] or 0.0)),
        restore_s=float(release["first_audio_median"]) if release and release.get("first_audio_median") else None,
        notes=notes,
    )


def cost_table(figs: Sequence[cost.Figures]) -> dict[str, dict[str, dict[str, dict[str, float]]]]:
    """preset -> configuration -> memory model -> {per_audio_hour, day_total, day_cpu, day_memory}."""
    table: dict[str, dict[str, dict[str, dict[str, float]]]] = {}
    # Scale-to-zero keeps every instance as long as the longest quiet window (as `bench.audit` does).
    after = max((fig.quiet_window_s for fig in figs), default=0.0)
    for preset in PRESETS:
        base = cost.PRESETS[preset]
        table[preset] = {}
        for fig in figs:
            row: dict[str, dict[str, float]] = {}
            for memory in MEMORY_MODELS:
                billing = base.with_memory(memory)
                hour = cost.bill(cost.full_load_usage(fig), billing)
                day = cost.bill(cost.bursty_day_usage(fig), billing)
                zero = cost.bill(cost.bursty_day_usage(fig, policy="scale-to-zero", scale_to_zero_after_s=after),
                                 billing)
                row[memory] = {"per_audio_hour": hour.total, "day_total": day.total, "day_cpu": day.cpu,
                               "day_memory": day.memory, "day_total_scale_to_zero": zero.total}
            table[preset][fig.name] = row
    return table


def _target(name: str, measured: float | None, limit: float | None, met: bool | None, text: str,
            missed: str = "") -> dict[str, Any]:
    return {"target": name, "measured": measured, "limit": limit, "met": met, "text": text, "missed_by": missed}


def _ratio_target(name: str, value: float | None, limit: float, text: str, *, at_most: bool) -> dict[str, Any]:
    if value is None or not finite(value):
        return _target(name, None, limit, None, text + " Not measured (a figure is missing).")
    met = value <= limit if at_most else value >= limit
    missed = ""
    if not met:
        missed = (f"{value / limit - 1:.0%} over the limit" if at_most else f"{1 - value / limit:.0%} under the limit")
    return _target(name, value, limit, met, text, missed)


def targets(summaries: Mapping[str, Mapping[str, Any]], results: Mapping[str, Any],
            ceiling: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The issue's targets, each with the measured value, the limit, and by how much it is missed."""
    out: list[dict[str, Any]] = []
    at = target_clients(results)
    complete = summaries.get("complete")
    baseline = summaries.get("ort-defaults")
    cpus = int(results["machine"]["budget"]["cpus"])
    if complete is None:
        return [_target("all", None, None, None, "The complete system was not measured in this run.")]
    eff = complete.get("efficiency_at")
    sized = ceiling.get("sized_efficiency")
    out.append(_ratio_target(
        "Serving overhead under 5 %", eff / sized if finite(eff) and finite(sized) and sized else None, 0.95,
        f"Complete system's efficiency at {at} clients over the raw runtime's in-process efficiency "
        f"(same shape, {ceiling.get('sized_concurrency')} threads, same corpus, same run; both count the audio a "
        "client receives, the model's edge silence trimmed at chunk joins).", at_most=False))
    ort_loop = results.get("inprocess", {}).get("ort-sized", {})
    loop: Any = delivered(ort_loop)
    out.append(_ratio_target(
        "Default server >= 1.0 x the in-process ONNX Runtime loop",
        eff / loop if finite(eff) and finite(loop) and loop else None, 1.0,
        f"Complete system (default settings, tuned) at {at} clients over ONNX Runtime in process on the shipped "
        f"model ({ort_loop.get('resolved', {}).get('streams', '?')} sessions x "
        f"{ort_loop.get('resolved', {}).get('threads', '?')} threads in all, same corpus, same run; the loop's "
        "audio counted as a client receives it, edge silence trimmed).",
        at_most=False))
    peak_at = complete.get("peak_at_mb")
    out.append(_ratio_target(
        f"Warm peak <= 1.5 GiB at {at} clients", peak_at, 1536.0,
        f"Highest billable memory of the complete system while {at} clients were served, MiB.", at_most=True))
    p50, base_p50 = complete.get("first_audio_p50"), (baseline or {}).get("first_audio_p50")
    out.append(_ratio_target(
        "First-audio p50", p50 / base_p50 if finite(p50) and finite(base_p50) and base_p50 else None, 0.6,
        f"Complete system's first-audio p50 at {at} clients over the ONNX Runtime-defaults server's.",
        at_most=True))
    ov_defaults = summaries.get("ov-defaults", {})
    ratios = []
    for clients in (4, 8):
        mine = complete.get("efficiency", {}).get(clients)
        for other, label, limit in ((baseline or {}, "ONNX Runtime defaults", 2.0), (ov_defaults, "OpenVINO defaults",
                                                                                       1.5)):
            theirs = other.get("efficiency", {}).get(clients)
            if finite(mine) and finite(theirs) and theirs:
                ratios.append(f"{mine / theirs:.2f} x {label} at {clients} clients (target {limit:g} x)")
    pool_text = ("Where the pool matters: complete system >= 2 x ONNX Runtime defaults and >= 1.5 x OpenVINO "
                 "defaults at 4 and 8 clients, on a 16-core machine. ")
    if cpus < POOL_CPUS:
        out.append(_target("Pool gain (16 cores)", None, None, None, pool_text + (
            f"Not tested: this machine has {cpus} CPUs and no 16-core machine was available for this run; on "
            f"{cpus} cores the published 3 x gain over ONNX Runtime defaults cannot show. For information: "
            + ("; ".join(ratios) if ratios else "no ratios measured") + ".")))
    else:
        met = all(float(r.split(" x ")[0]) >= float(r.split("target ")[1].split(" x")[0]) for r in ratios) \
            if ratios else None
        out.append(_target("Pool gain (16 cores)", None, None, met, pool_text + "; ".join(ratios) + "."))
    release = complete.get("release")
    warm = complete.get("idle_memory_mb")
    if release:
        released = release["released_median_mb"]
        out.append(_ratio_target("Released memory <= 10 % of warm",
                                 released / warm if finite(warm) and warm else None, 0.10,
                                 f"Median billable memory after release ({released:.0f} MB) over warm idle memory "
                                 f"({warm:.0f} MB).", at_most=True))
        out.append(_ratio_target("Released memory <= 200 MB", released, 200.0,
                                 "Median billable memory after release, MiB (cgroup, page cache included; MB read "
                                 "as MiB, as bench/cost.py does).", at_most=True))
        cold = _median(_cold(results, "with_cache"))
        first = release["first_audio_median"]
        out.append(_ratio_target(
            "First audio after release <= 30 % of cold start", first / cold if cold and finite(first) else None,
            0.30, f"Median first audio of the short request after a release ({first:.2f} s, range "
                  f"{release['first_audio_min']:.2f}-{release['first_audio_max']:.2f} s over "
                  f"{release['first_audio_cycles']} cycles) over the median process cold start to first audio "
                  f"with the compile cache ({'n/a' if cold is None else f'{cold:.2f} s'}), same request.",
            at_most=True))
        out.append(_ratio_target(
            f"No growth across {release['cycles']} release/restore cycles", release["growth_pct"], 5.0,
            f"Change in memory after release, median of the last {release['growth_span']} cycles against the first "
            f"{release['growth_span']}, % "
            f"({release['released_first_mb']:.0f} MB first, {release['released_last_mb']:.0f} MB last, "
            f"{release['released_max_mb']:.0f} MB highest).", at_most=True))
    else:
        out.append(_target("Released state", None, None, None, "No release cycles were measured."))
    return out


def delivered(job: Mapping[str, Any]) -> float | None:
    """An in-process job's audio-s per CPU-s as a server's clients would receive it (edge silence trimmed:
    `bench.inprocess`); runs from before that figure existed have only the model's raw one."""
    value = job.get("delivered_efficiency") or job.get("efficiency")
    return None if value is None else float(value)


def derive(results: Mapping[str, Any]) -> dict[str, Any]:
    """Summaries, ranking, ceiling, targets, cost and the figures file of a run."""
    summaries = {name: summarize(name, record, results) for name, record in results.get("configs", {}).items()}
    ranked = sorted((s for s in summaries.values() if s["usable"] and finite(s["efficiency_at"])),
                    key=lambda s: -s["efficiency_at"])
    for rank, summary in enumerate(ranked, 1):
        summary["rank"] = rank
    complete_record = results.get("configs", {}).get("complete", {})
    jobs = results.get("inprocess", {})
    sized = jobs.get("complete", {})
    one: Mapping[str, Any] = jobs.get("ov-1x1", {})
    ceiling = {"sized_efficiency": delivered(sized), "sized_raw_efficiency": sized.get("efficiency"),
               "sized_concurrency": sized.get("concurrency"),
               "sized_shape": complete_record.get("config", {}).get("shape"),
               "one_by_one_efficiency": delivered(one), "one_by_one_concurrency": one.get("concurrency")}
    figs = [f for f in (to_figures(s, results) for s in summaries.values()) if f is not None]
    machine = results["machine"]
    figures_file = {
        "source": f"python -m bench run: {results['run']['id']} ({results['run'].get('started', '')})",
        "machine": {"description": f"{machine['cpu_model']}, {machine['budget']['cpus']} CPUs",
                    "vcpus": machine["budget"]["cpus"], "memory_total_mb": machine["memory_total_mb"]},
        "configurations": [
            dataclasses.asdict(f) for f in figs],
    }
    return {"summaries": summaries, "ceiling": ceiling, "targets": targets(summaries, results, ceiling),
            "cost": cost_table(figs), "figures_file": figures_file,
            "excluded": [s["name"] for s in summaries.values() if not s["usable"]]}
