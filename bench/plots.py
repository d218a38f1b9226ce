"""The report's PNG plots: efficiency against clients, memory over idle time, the bursty day's bill."""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from bench.figures import MEMORY_MODELS, PRESETS


def _pair(width: float = 13.0) -> tuple[Figure, Axes, Axes]:
    # An explicit Agg canvas, not pyplot: no display and no global figure state (as bench.audit does).
    fig = Figure(figsize=(width, 4.8))
    FigureCanvasAgg(fig)
    left, right = fig.subplots(1, 2)
    return fig, left, right


def _finite(value: Any) -> bool:
    return isinstance(value, int | float) and math.isfinite(value)


def efficiency(path: Path, results: Mapping[str, Any]) -> None:
    """Audio-s per CPU-s and audio-s per s against client count, one line per configuration."""
    fig, left, right = _pair()
    for name, record in results.get("configs", {}).items():
        levels = [lv for lv in record.get("levels", []) if _finite(lv.get("efficiency"))]
        if not levels:
            continue
        width = 2.6 if record["config"]["kind"] == "complete" else 1.4
        clients = [lv["clients"] for lv in levels]
        left.plot(clients, [lv["efficiency"] for lv in levels], marker="o", linewidth=width, label=name)
        right.plot(clients, [lv["throughput"] for lv in levels], marker="o", linewidth=width, label=name)
    ceiling = results.get("derived", {}).get("ceiling", {})
    if _finite(ceiling.get("sized_efficiency")):
        left.axhline(ceiling["sized_efficiency"], color="black", linestyle="--", linewidth=1,
                     label=f"in process, {ceiling.get('sized_shape')} ({ceiling.get('sized_concurrency')} threads)")
    if _finite(ceiling.get("one_by_one_efficiency")):
        left.axhline(ceiling["one_by_one_efficiency"], color="grey", linestyle=":", linewidth=1,
                     label="in process, 1x1")
    counts = [int(c) for c in results.get("run", {}).get("options", {}).get("clients", [])]
    for ax, label in ((left, "audio-s per CPU-s (server process)"), (right, "audio-s per s")):
        ax.set_xscale("log", base=2)
        if counts:
            ax.set_xticks(counts, [str(c) for c in counts])
        ax.set_xlabel("closed-loop clients")
        ax.set_ylabel(label)
        ax.set_ylim(bottom=0)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7)
    left.set_title("Efficiency")
    right.set_title("Throughput")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def idle_memory(path: Path, results: Mapping[str, Any]) -> None:
    """Billable memory against seconds since the last request, one line per configuration."""
    fig = Figure(figsize=(9, 4.8))
    FigureCanvasAgg(fig)
    ax = fig.subplots()
    source = ""
    for name, record in results.get("configs", {}).items():
        series = record.get("idle", {}).get("series", [])
        if not series:
            continue
        source = record.get("memory_source", source)
        width = 2.6 if record["config"]["kind"] == "complete" else 1.4
        ax.plot([s["t"] for s in series], [s["billable_mb"] for s in series], linewidth=width, label=name)
    ax.set_xlabel("seconds idle (after the last load window)")
    ax.set_ylabel("billable memory, MiB")
    ax.set_ylim(bottom=0)
    ax.set_title("Memory over an idle period" + ("" if "cgroup" in source else " (RSS: page cache not included)"))
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def daily_bill(path: Path, derived: Mapping[str, Any]) -> None:
    """The bursty day's bill per configuration, both memory models, one panel per rates preset."""
    fig, *axes = _pair()
    table = derived.get("cost", {})
    series = [(key, policy, memory) for key, policy in (("day_total", "always-on"),
                                                          ("day_total_scale_to_zero", "scale-to-zero"))
              for memory in MEMORY_MODELS]
    width = 0.8 / len(series)
    for ax, preset in zip(axes, PRESETS, strict=True):
        rows = table.get(preset, {})
        names = list(rows)
        for i, (key, policy, memory) in enumerate(series):
            xs = [k + (i - (len(series) - 1) / 2) * width for k in range(len(names))]
            # Runs from before scale-to-zero was priced have no such figure: 0 (no bar).
            ax.bar(xs, [rows[n][memory].get(key, 0.0) for n in names], width, label=f"{policy}, memory {memory}",
                   hatch="//" if policy == "scale-to-zero" else None)
        ax.set_xticks(range(len(names)), names, rotation=25, ha="right", fontsize=8)
        ax.set_ylabel("dollars per day")
        ax.set_title(f"Bursty day (2 audio-hours in 8 bursts), {preset} rates", fontsize=9)
        ax.legend(fontsize=8)
        ax.grid(True, axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
