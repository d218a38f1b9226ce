"""What a soak records (`bench.soak`): each server's `SoakResult`, the hostile answers tallied, and soak.md."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from bench import faults


@dataclass
class SoakResult:
    shape_cache: int
    series: list[dict[str, float]] = field(default_factory=list)
    """``{"requests", "billable_mb", "rss_mb"}`` every ``sample_every`` requests (0 = after the warm-up)."""
    errors: list[str] = field(default_factory=list)
    audio_s: float = 0.0
    server_cpu_s: float = 0.0
    wall_s: float = 0.0
    released_mb: float = 0.0
    restored_ok: bool = False
    outcomes: dict[str, int] = field(default_factory=lambda: {"served": 0, "refused": 0, "lost": 0, "cut": 0})
    """``served``: 200 and the whole body; ``refused``: 429, admission full (a hostile burst's flood); ``lost``: no
    audio for any other reason (an error status, the connection broken before the first byte); ``cut``: a stream
    broken after its first bytes."""
    kills: list[dict[str, Any]] = field(default_factory=list)
    hostile: list[faults.Answer] = field(default_factory=list)
    fault_errors: list[str] = field(default_factory=list)
    """Faults the soak failed to inject (the run does not count as a soak with faults)."""

    def summary(self) -> dict[str, Any]:
        billable = [s["billable_mb"] for s in self.series]
        half = billable[len(billable) // 2] if billable else 0.0
        return {
            "shape_cache": self.shape_cache,
            "requests": self.series[-1]["requests"] if self.series else 0,
            "errors": len(self.errors),
            "after_warmup_mb": billable[0] if billable else None,
            "halfway_mb": half,
            "final_mb": billable[-1] if billable else None,
            "peak_mb": max(billable) if billable else None,
            "second_half_growth_pct": round(100 * (max(billable[len(billable) // 2:]) / half - 1), 1) if half else None,
            "released_mb": self.released_mb,
            "restored_ok": self.restored_ok,
            **self.outcomes,
            "kills": len(self.kills),
            "hostile": len(self.hostile),
            "hostile_unfair": sum(not a.fair for a in self.hostile),
            "fault_errors": len(self.fault_errors),
            "efficiency": round(self.audio_s / self.server_cpu_s, 3) if self.server_cpu_s else None,
            "wall_s": round(self.wall_s, 1),
        }


def tally(answers: list[faults.Answer]) -> dict[str, dict[str, int]]:
    """How often each hostile request got each answer."""
    tally: dict[str, dict[str, int]] = {}
    for answer in answers:
        by_status = tally.setdefault(answer.name, {})
        by_status[str(answer.status)] = by_status.get(str(answer.status), 0) + 1
    return tally


def render(record: dict[str, Any]) -> str:
    o = record["options"]
    lines = [
        "# Shape-churn soak", "",
        f"`TTS_BACKEND={o.get('backend', 'openvino')}`: "
        + (f"{o['duration_s']:.0f} s of requests" if o.get("duration_s") else f"{o['requests']} requests")
        + f", {o['lengths']} distinct input "
        f"lengths ({o['min_tokens']}–"
        f"{o['min_tokens'] + o['lengths'] - 1} phoneme tokens, speed {o['speed']}), {o['clients']} clients, "
        "after a warm-up with the longest input; billable memory from the server's own memory cgroup.", "",
        "| shape cache | errors | after warm-up MB | halfway MB | final MB | peak MB | 2nd-half growth "
        "| released MB | restore ok | audio-s / CPU-s | wall s |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in record["results"]:
        lines.append(f"| {r['shape_cache']} | {r['errors']} | {r['after_warmup_mb']} | {r['halfway_mb']} | "
                     f"{r['final_mb']} | {r['peak_mb']} | {r['second_half_growth_pct']} % | {r['released_mb']} | "
                     f"{r['restored_ok']} | {r['efficiency']} | {r['wall_s']} |")
    if o.get("kill_every_s") or o.get("hostile_every_s"):
        lines += ["", f"Faults: a helper process killed every {o['kill_every_s']} s (the inference process, the "
                  f"Japanese reader, both, in turn), a hostile burst every {o['hostile_every_s']} s; every other "
                  "request streamed, every eighth Japanese.", "",
                  "| requests | served | refused (429) | lost (no audio) | cut mid-stream | kills | hostile "
                  "| hostile not a 4xx |",
                  "|---|---|---|---|---|---|---|---|"]
        for r in record["results"]:
            lines.append(f"| {r['requests']} | {r['served']} | {r['refused']} | {r['lost']} | {r['cut']} | "
                         f"{r['kills']} | {r['hostile']} | {r['hostile_unfair']} |")
    lines += ["", "Series (requests: billable MB):", ""]
    for r in record["results"]:
        points = ", ".join(f"{int(s['requests'])}: {s['billable_mb']:.0f}" for s in r["series"])
        lines.append(f"- shape cache `{r['shape_cache']}`: {points}")
    return "\n".join(lines) + "\n"
