"""Cost audit and autoscaling CLI: ``main(["cost", ...])`` and ``main(["autoscale", ...])``.

Each subcommand writes report.md, a PNG plot and a JSON of the numbers into ``--out``.
See docs/cost-audit.md.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import json
import logging
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from bench import autoscale, cost, markdown, replay

LOG = logging.getLogger(__name__)

DEFAULT_FIGURES = Path("bench/figures_example.json")
DEFAULT_COST_TRACE = Path("bench/traces/steady_day.csv")
DEFAULT_SPIKE_TRACE = Path("bench/traces/security_outage_spike.csv")
DEFAULT_START_TIMES = "2.2,6.2,26,60,120,336"
MEMORY_MODELS: tuple[cost.MemoryBilling, ...] = ("configured", "metered")


def _usd(value: float) -> str:
    if math.isnan(value):
        return "n/a"
    if abs(value) >= 100:
        return f"${value:,.2f}"
    return f"${value:.4f}" if abs(value) >= 0.01 else f"${value:.6f}"


def _out_dir(arg: str | None) -> Path:
    if arg:
        path = Path(arg)
    else:
        stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%d-%H%M%S")
        path = Path("bench/results") / f"audit-{stamp}"
    path.mkdir(parents=True, exist_ok=True)
    return path


def _billing(args: argparse.Namespace) -> cost.Billing:
    preset = cost.PRESETS[args.billing]
    rates = dataclasses.replace(
        preset.rates,
        cpu_per_vcpu_s=preset.rates.cpu_per_vcpu_s if args.cpu_rate is None else args.cpu_rate,
        memory_per_gb_s=preset.rates.memory_per_gb_s if args.memory_rate is None else args.memory_rate,
        per_request=preset.rates.per_request if args.request_rate is None else args.request_rate,
    )
    return dataclasses.replace(preset, rates=rates, cpu=args.cpu or preset.cpu, memory=args.memory or preset.memory)


def _scale_to_zero_sources(configs: Sequence[cost.Figures], name: str | None) -> list[cost.Figures]:
    """The configurations priced at scale-to-zero: the one named, else every one (each with its own cold start)."""
    if name is None:
        return list(configs)
    for fig in configs:
        if fig.name == name:
            return [fig]
    raise SystemExit(f"--scale-to-zero-from: no configuration named {name!r}")


def _scale_to_zero_after(configs: Sequence[cost.Figures], after: float | None) -> float:
    """The platform's idle time before an instance goes: one figure for every configuration, so a server without a
    lifecycle is not sent to zero sooner than one with; default the longest quiet window among them."""
    return after if after is not None else max(fig.quiet_window_s for fig in configs)


def run_cost(args: argparse.Namespace) -> Path:
    """Price every configuration: per audio-hour, and each day (the bursty day and the trace), always-on and
    scale-to-zero, under both memory models."""
    figures_path = Path(args.run) / "figures.json" if args.run else Path(args.figures)
    figures = cost.load_figures(figures_path)
    trace = autoscale.load_trace(Path(args.trace))
    billing = _billing(args)
    billings = {m: billing.with_memory(m) for m in MEMORY_MODELS}
    audio = trace.audio_seconds(args.audio_per_request).tolist()
    requests = trace.requests(args.audio_per_request).tolist()
    day_factor = 1440.0 / len(audio)
    stz_from = _scale_to_zero_sources(figures.configurations, args.scale_to_zero_from)
    after = _scale_to_zero_after(figures.configurations, args.scale_to_zero_after)

    runs = [replay.trace_usage(fig, audio, requests, "always-on") for fig in figures.configurations]
    runs += [replay.trace_usage(fig, audio, requests, "scale-to-zero", after) for fig in stz_from]

    numbers: dict[str, Any] = {"billing": dataclasses.asdict(billing), "figures": str(figures_path),
                               "trace": str(args.trace), "scale_to_zero_after_s": after, "configurations": {},
                               "trace_runs": {}}
    hour_rows, day_rows, trace_rows = [], [], []
    for fig in figures.configurations:
        hour = {m: cost.bill(cost.full_load_usage(fig, audio_per_request_s=args.audio_per_request), b)
                for m, b in billings.items()}
        day = {m: cost.bill(cost.bursty_day_usage(fig, audio_per_request_s=args.audio_per_request), b)
               for m, b in billings.items()}
        entry: dict[str, Any] = {
            "per_audio_hour": {m: h.total for m, h in hour.items()},
            "bursty_day": {m: dataclasses.asdict(d) | {"total": d.total} for m, d in day.items()},
            "cold_start_s": fig.cold_start_s,
        }
        stz_day = "-", "-"
        if fig in stz_from:
            zero = {m: cost.bill(cost.bursty_day_usage(fig, audio_per_request_s=args.audio_per_request,
                                                       policy="scale-to-zero", scale_to_zero_after_s=after), b)
                    for m, b in billings.items()}
            entry["bursty_day_scale_to_zero"] = {m: dataclasses.asdict(d) | {"total": d.total} for m, d in zero.items()}
            stz_day = _usd(zero["configured"].total), _usd(zero["metered"].total)
        numbers["configurations"][fig.name] = entry
        hour_rows.append([fig.name, f"{fig.efficiency:.2f}", f"{fig.vcpus:g}", f"{fig.configured_mb:,.0f}",
                          _usd(hour["configured"].total), _usd(hour["metered"].total)])
        released = "-" if fig.released_memory_mb is None else f"{fig.released_memory_mb:,.0f}"
        day_rows.append([fig.name, f"{fig.idle_memory_mb:,.0f}", released, _usd(day["configured"].cpu),
                         _usd(day["configured"].memory), _usd(day["configured"].total),
                         _usd(day["metered"].memory), _usd(day["metered"].total), f"{fig.cold_start_s:.1f}",
                         *stz_day])
    for run in runs:
        bills = {m: cost.bill(run.usage, b) for m, b in billings.items()}
        numbers["trace_runs"][run.name] = {
            "configuration": run.name.removeprefix("scale-to-zero (").removesuffix(")"), "policy": run.policy,
            "daily": {m: b.total * day_factor for m, b in bills.items()},
            "per_audio_hour": {m: cost.per_audio_hour(b.total, run.usage.audio_s) for m, b in bills.items()},
            "cold_starts": run.cold_starts, "wakes": run.wakes, "waiting_requests": run.waiting_requests,
            "max_instances": run.max_instances,
        }
        trace_rows.append([run.name, run.policy, _usd(bills["configured"].total * day_factor),
                           _usd(bills["metered"].total * day_factor),
                           _usd(cost.per_audio_hour(bills[billing.memory].total, run.usage.audio_s)),
                           str(run.wakes), f"{run.waiting_requests:,.0f}", str(run.max_instances)])

    out = _out_dir(args.out)
    (out / "audit.json").write_text(json.dumps(numbers, indent=2, default=str) + "\n")
    _plot_cost(out / "cost.png", numbers, billing)
    (out / "report.md").write_text(_cost_report(args, figures, trace, billing, after, hour_rows, day_rows,
                                                trace_rows, sum(audio), len(audio)))
    return out


def _cost_report(args: argparse.Namespace, figures: cost.FiguresFile, trace: autoscale.Trace,
                 billing: cost.Billing, after: float, hour_rows: list[list[str]], day_rows: list[list[str]],
                 trace_rows: list[list[str]], audio_s: float, minutes: int) -> str:
    rates = billing.rates
    cpu_text = ("allocated vCPUs x the instance's whole life" if billing.cpu == "instance"
                else "allocated vCPUs x the time spent serving or starting")
    notes = [f"- **{fig.name}**: {fig.notes}" for fig in figures.configurations if fig.notes]
    return "\n".join([
        "# Cost audit", "",
        f"- Figures: `{args.run + '/figures.json' if args.run else args.figures}`"
        + (f" ({figures.source})" if figures.source else ""),
        f"- Machine: {json.dumps(dict(figures.machine))}",
        (f"- Trace: `{args.trace}`: {minutes} minutes, {audio_s / 3600:.2f} audio-hours "
         f"({args.audio_per_request:g} audio-s per request)"),
        (f"- Billing: **{billing.name}** ({rates.source}): ${rates.cpu_per_vcpu_s:.6g} per vCPU-s, "
         f"${rates.memory_per_gb_s:.6g} per GiB-s, ${rates.per_request:.3g} per request."),
        (f"- CPU billed: {cpu_text}. The platform bills memory **{billing.memory}**; both memory models "
         "are shown: *configured* = configured size x billed time; *metered* = memory used (page cache "
         "included) over the billed time. Releasing memory lowers only the metered bill."),
        (f"- Scale-to-zero: every configuration pays its own measured cold start on every wake and is kept "
         f"{after:g} s after its last request (one figure for all: the longest quiet window among them)."), "",
        "## Cost per audio-hour at full load", "",
        "One instance busy at its throughput for the audio-hour, existing only while busy.", "",
        markdown.table(["configuration", "audio-s per CPU-s", "vCPUs", "configured MiB", "configured memory",
                "metered memory"], hour_rows), "",
        "## Bursty day", "",
        ("24 h, 2 audio-hours of demand in 8 equal bursts on one instance: always-on keeps it alive between bursts; "
         "scale-to-zero starts it for each burst."), "",
        markdown.table(["configuration", "idle MiB", "released MiB", "CPU", "memory (configured)", "day (configured)",
                "memory (metered)", "day (metered)", "cold start, s", "scale-to-zero day (configured)",
                "scale-to-zero day (metered)"], day_rows), "",
        "## The trace, per day", "",
        ("Always-on keeps one instance alive; scale-to-zero has none after the idle time above and pays the "
         f"configuration's cold start on every wake. Costs are scaled to 24 h. Per audio-hour uses the platform's "
         f"memory model ({billing.memory})."), "",
        markdown.table(["configuration", "policy", "day (configured)", "day (metered)", "per audio-hour", "wakes",
                "requests waiting on a cold start", "max instances"], trace_rows), "",
        "![cost](cost.png)", "",
        "## Notes on the figures", "", *(notes or ["- none"]), "",
        "Assumptions: docs/cost-audit.md.", "",
    ])


def _figure_pair() -> tuple[Figure, Axes, Axes]:
    # An explicit Agg canvas, not pyplot: no display, no global figure state, works in any container.
    fig = Figure(figsize=(13, 4.8))
    FigureCanvasAgg(fig)
    left, right = fig.subplots(1, 2)
    return fig, left, right


def _plot_cost(path: Path, numbers: dict[str, Any], billing: cost.Billing) -> None:
    """Both days side by side: per configuration, always-on and scale-to-zero under each memory model."""
    fig, left, right = _figure_pair()
    bursty: dict[str, dict[str, float]] = {}
    for name, c in numbers["configurations"].items():
        bursty[name] = {f"always-on, {m}": v["total"] for m, v in c["bursty_day"].items()}
        bursty[name] |= {f"scale-to-zero, {m}": v["total"] for m, v in c.get("bursty_day_scale_to_zero", {}).items()}
    trace: dict[str, dict[str, float]] = {}
    for run in numbers["trace_runs"].values():
        trace.setdefault(run["configuration"], {}).update(
            {f"{run['policy']}, {m}": v for m, v in run["daily"].items()})
    series = [f"{p}, {m}" for p in ("always-on", "scale-to-zero") for m in MEMORY_MODELS]
    width = 0.8 / len(series)
    for ax, title, table in ((left, "Bursty day (2 audio-hours in 8 bursts)", bursty),
                             (right, "Steady day (the trace)", trace)):
        names = list(table)
        for i, label in enumerate(series):
            xs = [k + (i - (len(series) - 1) / 2) * width for k in range(len(names))]
            ax.bar(xs, [table[n].get(label, 0.0) for n in names], width, label=label,
                   hatch="//" if label.startswith("scale") else None)
        ax.set_xticks(range(len(names)), names, rotation=25, ha="right", fontsize=8)
        ax.set_ylabel("dollars per day")
        ax.set_title(f"{title}, {billing.rates.name} rates", fontsize=9)
        ax.legend(fontsize=7)
        ax.grid(True, axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def run_autoscale(args: argparse.Namespace) -> Path:
    """Replay the trace on an autoscaled fleet for each start time."""
    trace = autoscale.load_trace(Path(args.trace))
    rpm = trace.requests(args.audio_per_request)
    load = autoscale.load_per_step(rpm.tolist(), args.step, args.interpolation)
    base = autoscale.FleetParams(args.capacity_rpm, args.buffer, 0.0, args.step, args.scale_down_window,
                                 args.min_instances)
    starts = [float(s) for s in args.start_times.split(",") if s.strip()]
    rows = autoscale.sweep(load, base, starts)
    out = _out_dir(args.out)
    demand = float(rpm.sum())
    table = []
    for row in rows:
        res = row.result
        worst = "-" if res.worst_minute is None else f"{res.worst_minute} ({res.worst_minute_turned_away:,.0f})"
        needed = "> 100 %" if row.buffer_needed is None else f"{row.buffer_needed * 100:.1f} %"
        table.append([f"{row.start_time_s:g} s", f"{res.turned_away:,.0f}",
                      f"{res.turned_away / demand * 100 if demand else 0:.3f} %", worst, needed,
                      str(res.max_instances)])
    numbers = {"trace": str(args.trace), "params": dataclasses.asdict(base), "demand": demand,
               "rows": [{"start_time_s": r.start_time_s, "buffer_needed": r.buffer_needed,
                         "turned_away": r.result.turned_away, "worst_minute": r.result.worst_minute,
                         "worst_minute_turned_away": r.result.worst_minute_turned_away,
                         "max_instances": r.result.max_instances} for r in rows]}
    (out / "audit.json").write_text(json.dumps(numbers, indent=2) + "\n")
    _plot_autoscale(out / "autoscale.png", rpm.tolist(), rows, args.buffer)
    (out / "report.md").write_text("\n".join([
        "# Autoscaling audit", "",
        f"- Trace: `{args.trace}`: {len(rpm)} minutes, {demand:,.0f} requests, peak {rpm.max():,.0f} per minute.",
        (f"- Instance capacity {args.capacity_rpm:g} requests/min; autoscaler buffer {args.buffer * 100:g} % "
         f"of the current load; scale-down stabilization {args.scale_down_window:g} s; step {args.step:g} s "
         f"({args.interpolation} interpolation of the per-minute trace); min instances {args.min_instances}."),
        ("- A new instance takes calls only after its start time; demand above the ready capacity is turned "
         "away."), "",
        markdown.table(["start time", f"turned away at {args.buffer * 100:g} %", "share of demand", "worst minute",
                "spare capacity to turn none away", "max instances"], table), "",
        "![autoscale](autoscale.png)", "",
        "Method and calibration: docs/cost-audit.md.", "",
    ]))
    return out


def _plot_autoscale(path: Path, rpm: list[float], rows: list[autoscale.SweepRow], buffer: float) -> None:
    fig, left, right = _figure_pair()
    found = [r for r in rows if r.buffer_needed is not None]
    left.plot([r.start_time_s for r in found], [100 * (r.buffer_needed or 0.0) for r in found], "o-")
    for r in found:
        left.annotate(f"{100 * (r.buffer_needed or 0.0):.1f} %", (r.start_time_s, 100 * (r.buffer_needed or 0.0)),
                      textcoords="offset points", xytext=(-10, 8), fontsize=8)
    left.set_xscale("log")
    left.set_xlabel("instance start time (s)")
    left.set_ylabel("spare capacity needed to turn none away (%)")
    left.grid(True, which="both", alpha=0.3)
    right.plot(rpm, color="black", label="demand (requests/min)")
    twin = right.twinx()
    for r in rows:
        twin.plot(r.result.turned_away_per_minute, label=f"turned away, start {r.start_time_s:g} s")
    right.set_ylim(bottom=0)
    right.set_xlabel("minute")
    right.set_ylabel("requests per minute")
    twin.set_ylabel(f"turned away per minute at {buffer * 100:g} % buffer")
    right.legend(loc="upper left", fontsize=8)
    twin.legend(loc="upper right", fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m bench", description="Cost and autoscaling audit.")
    parser.add_argument("-v", "--verbose", action="store_true", help="log progress")
    sub = parser.add_subparsers(dest="command", required=True)

    c = sub.add_parser("cost", help="daily cost and cost per audio-hour per configuration")
    c.add_argument("--trace", default=str(DEFAULT_COST_TRACE), help="CSV minute,requests or minute,audio_seconds")
    source = c.add_mutually_exclusive_group()
    source.add_argument("--figures", default=str(DEFAULT_FIGURES), help="figures JSON")
    source.add_argument("--run", help="benchmark run folder; reads RUN/figures.json")
    c.add_argument("--billing", choices=sorted(cost.PRESETS), default="cloudrun-instance", help="rates preset")
    c.add_argument("--cpu", choices=["instance", "request"], help="override: CPU billed for life or per request")
    c.add_argument("--memory", choices=list(MEMORY_MODELS), help="override the platform's memory model")
    c.add_argument("--cpu-rate", type=float, help="override: $ per vCPU-second")
    c.add_argument("--memory-rate", type=float, help="override: $ per GiB-second")
    c.add_argument("--request-rate", type=float, help="override: $ per request")
    c.add_argument("--audio-per-request", type=float, default=cost.DEFAULT_AUDIO_PER_REQUEST_S,
                   help="mean audio-seconds per request (default 6)")
    c.add_argument("--scale-to-zero-from", help="configuration whose figures scale-to-zero uses")
    c.add_argument("--scale-to-zero-after", type=float, help="idle seconds before zero (default: quiet window)")
    c.add_argument("--out", help="output folder (default bench/results/audit-<timestamp>)")

    a = sub.add_parser("autoscale", help="requests turned away and spare capacity needed against start time")
    a.add_argument("--trace", default=str(DEFAULT_SPIKE_TRACE), help="CSV minute,requests or minute,audio_seconds")
    a.add_argument("--start-times", default=DEFAULT_START_TIMES, help="comma-separated seconds")
    a.add_argument("--capacity-rpm", type=float, default=100.0, help="requests per minute one instance serves")
    a.add_argument("--buffer", type=float, default=0.05, help="autoscaler spare capacity, fraction of load")
    a.add_argument("--step", type=float, default=1.0, help="simulation step in seconds (divides 60)")
    a.add_argument("--scale-down-window", type=float, default=300.0, help="stabilization window in seconds")
    a.add_argument("--min-instances", type=int, default=0)
    a.add_argument("--interpolation", choices=["linear", "step"], default="linear")
    a.add_argument("--audio-per-request", type=float, default=cost.DEFAULT_AUDIO_PER_REQUEST_S,
                   help="converts an audio_seconds trace to requests")
    a.add_argument("--out", help="output folder (default bench/results/audit-<timestamp>)")
    return parser


def main(argv: list[str]) -> int:
    """Entry point for ``python -m bench cost|autoscale``; returns the exit status."""
    args = _parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s")
    out = run_cost(args) if args.command == "cost" else run_autoscale(args)
    print(out / "report.md")
    return 0
