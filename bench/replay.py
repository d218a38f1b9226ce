"""A per-minute traffic trace replayed against one configuration's figures (`bench.cost.Figures`): what its
instances would have used under a policy, always-on or scale-to-zero, for `bench.cost.bill` to price."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from bench.cost import Figures, Policy, Usage, idle_memory_mb_s


@dataclass(frozen=True)
class TraceUsage:
    """Usage of one configuration replaying a per-minute trace, with what the policy did."""

    name: str
    """Row label."""
    policy: Policy
    """``always-on`` (one instance kept alive) or ``scale-to-zero``."""
    usage: Usage
    """What was consumed."""
    cold_starts: int
    """Instances started (wakes from zero plus extra instances for peaks)."""
    wakes: int
    """Starts from zero instances."""
    waiting_requests: float
    """Requests that arrived while the fleet was waking from zero (approximate: uniform within the minute)."""
    max_instances: int
    """Largest fleet in any minute."""
    minutes: int
    """Trace length."""


def trace_usage(fig: Figures, audio_per_minute: Sequence[float], requests_per_minute: Sequence[float],
                policy: Policy, scale_to_zero_after_s: float | None = None, name: str | None = None) -> TraceUsage:
    """Replay a trace minute by minute.

    Within a busy minute traffic is taken as spread over the minute: the ``n = ceil(busy / 60 s)`` instances
    exist the whole minute, busy time at warm memory, the rest at warm-idle; the idle clock starts at the
    minute's end. Extra instances retire at the end of the minute. Every started instance pays its cold start
    (billed time at warm memory, counted busy for request billing). Always-on keeps one instance through idle
    minutes; scale-to-zero keeps it ``scale_to_zero_after_s`` (default: the quiet window) and then has none.
    """
    after = fig.quiet_window_s if scale_to_zero_after_s is None else scale_to_zero_after_s
    always_on = policy == "always-on"
    life = busy = used = busy_used = waiting = 0.0
    cold_starts = wakes = max_n = 0
    prev_n = 1 if always_on else 0  # an always-on instance is already running when the trace starts
    idle_clock = math.inf if not always_on else 0.0
    for audio, requests in zip(audio_per_minute, requests_per_minute, strict=True):
        work = audio / fig.throughput_audio_s_per_s
        if work > 0:
            n = max(1, math.ceil(work / 60.0 - 1e-9))
            started = max(0, n - prev_n)
            if started:
                cold_starts += started
                start_s = started * fig.cold_start_s
                life += start_s
                busy += start_s
                used += start_s * fig.warm_memory_mb
                busy_used += start_s * fig.warm_memory_mb
                if prev_n == 0:
                    wakes += 1
                    waiting += requests * min(1.0, fig.cold_start_s / 60.0)
            life += n * 60.0
            busy += work
            used += work * fig.warm_memory_mb + (n * 60.0 - work) * fig.idle_memory_mb
            busy_used += work * fig.warm_memory_mb
            idle_clock = 0.0
        elif always_on:
            n = 1
            life += 60.0
            used += idle_memory_mb_s(fig, idle_clock, 60.0)
            idle_clock += 60.0
        else:
            stay = max(0.0, min(60.0, after - idle_clock))
            life += stay
            used += idle_memory_mb_s(fig, idle_clock, stay)
            idle_clock += 60.0
            n = 1 if idle_clock < after else 0
        max_n = max(max_n, n)
        prev_n = n
    usage = Usage(life, busy, used, busy_used, float(sum(requests_per_minute)), float(sum(audio_per_minute)),
                  fig.vcpus, fig.configured_mb)
    label = name if name is not None else (fig.name if always_on else f"scale-to-zero ({fig.name})")
    return TraceUsage(label, policy, usage, cold_starts, wakes, waiting, max_n, len(audio_per_minute))
