"""Cost model for a TTS configuration under instance-billed and request-billed serverless platforms.

Everything reduces to a `Usage` (how long instances existed, how long they were busy, how much memory they
used over time) which `bill` prices under a `Billing` (CPU billed for the instance's life or only while
serving; memory billed at the configured size or metered as used). Scenarios build usages: a steady
full-load audio-hour and the bursty day here; a per-minute traffic trace (always-on or scale-to-zero) in
`bench.replay`.

Units: memory figures are MB meaning MiB (2**20 bytes); rates are per GiB-second, which is what Cloud Run
and Fargate call "GiB" / "GB" (both bill task memory in units of 1024 MiB).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

LOG = logging.getLogger(__name__)

MB_PER_GB = 1024.0
CLOUD_RUN_MEMORY_STEP_MB = 512.0
DAY_S = 86_400.0
DEFAULT_AUDIO_PER_REQUEST_S = 6.0

CpuBilling = Literal["instance", "request"]
MemoryBilling = Literal["metered", "configured"]
Policy = Literal["always-on", "scale-to-zero"]


@dataclass(frozen=True)
class Figures:
    """Measured figures of one server configuration (one instance)."""

    name: str
    """Configuration label, e.g. ``openvino-sized``."""
    efficiency: float
    """Audio-seconds produced per CPU-second consumed at load."""
    throughput_audio_s_per_s: float
    """Audio-seconds produced per wall-second by one instance at full load."""
    vcpus: float
    """vCPUs allocated to the instance (what instance-based billing charges for)."""
    warm_memory_mb: float
    """Memory used (cgroup, page cache included) while serving at load."""
    idle_memory_mb: float
    """Memory used while warm and idle, before any release."""
    released_memory_mb: float | None
    """Memory used after the lifecycle released memory; None if the configuration has no lifecycle."""
    peak_memory_mb: float
    """Highest memory observed; sets the default configured size."""
    quiet_window_s: float
    """Idle seconds before the lifecycle releases memory."""
    cold_start_s: float
    """Process start to first audio."""
    restore_s: float | None = None
    """Released state to first audio; None without a lifecycle."""
    configured_memory_mb: float | None = None
    """Memory size configured on the platform; None means peak rounded up to Cloud Run's 512 MiB step."""
    notes: str = ""
    """Free text: where the figures come from, which are assumed."""

    def __post_init__(self) -> None:
        for label in ("efficiency", "throughput_audio_s_per_s", "vcpus", "warm_memory_mb", "peak_memory_mb"):
            if not getattr(self, label) > 0:
                raise ValueError(f"{self.name}: {label} must be positive")
        if self.idle_memory_mb < 0 or self.quiet_window_s < 0 or self.cold_start_s < 0:
            raise ValueError(f"{self.name}: idle memory, quiet window and cold start must be non-negative")
        # An instance cannot burn more CPU than it is allocated; a small excess is measurement noise.
        if self.throughput_audio_s_per_s > self.efficiency * self.vcpus * 1.05:
            LOG.warning("%s: throughput %.2f exceeds efficiency x vCPUs %.2f", self.name,
                        self.throughput_audio_s_per_s, self.efficiency * self.vcpus)

    @property
    def has_lifecycle(self) -> bool:
        """Whether the configuration releases memory after its quiet window."""
        return self.released_memory_mb is not None

    @property
    def configured_mb(self) -> float:
        """Memory billed under configured-size billing."""
        if self.configured_memory_mb is not None:
            return self.configured_memory_mb
        return math.ceil(self.peak_memory_mb / CLOUD_RUN_MEMORY_STEP_MB) * CLOUD_RUN_MEMORY_STEP_MB

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Figures:
        """Build from a JSON object; unknown keys are ignored (logged) so newer writers stay readable."""
        known = {f.name for f in dataclasses.fields(cls)}
        extra = sorted(set(data) - known)
        if extra:
            LOG.info("figures %s: ignoring keys %s", data.get("name"), extra)
        return cls(**{k: v for k, v in data.items() if k in known})


@dataclass(frozen=True)
class FiguresFile:
    """A figures file: the machine the figures were measured on and one entry per configuration."""

    machine: Mapping[str, Any]
    """Free-form description of the machine."""
    configurations: tuple[Figures, ...]
    """Measured configurations, in file order."""
    source: str = ""
    """Where the figures come from (a benchmark run, or the published study)."""


def load_figures(path: Path) -> FiguresFile:
    """Read ``{"machine": {...}, "configurations": [{Figures fields}, ...]}``."""
    data = json.loads(path.read_text())
    configs = tuple(Figures.from_dict(c) for c in data["configurations"])
    if not configs:
        raise ValueError(f"{path}: no configurations")
    return FiguresFile(machine=data.get("machine", {}), configurations=configs, source=str(data.get("source", "")))


@dataclass(frozen=True)
class Rates:
    """Prices of one platform."""

    name: str
    """Preset label."""
    cpu_per_vcpu_s: float
    """Dollars per vCPU-second billed."""
    memory_per_gb_s: float
    """Dollars per GiB-second billed."""
    per_request: float = 0.0
    """Dollars per request (request-based billing)."""
    source: str = ""
    """Where the rates come from."""


@dataclass(frozen=True)
class Billing:
    """How a platform turns usage into a bill."""

    name: str
    """Preset label."""
    rates: Rates
    """Prices."""
    cpu: CpuBilling
    """``instance``: allocated vCPUs for the instance's whole life; ``request``: only while serving or starting."""
    memory: MemoryBilling
    """``configured``: configured size for the billed time; ``metered``: memory used (page cache included)."""

    def with_memory(self, memory: MemoryBilling) -> Billing:
        """Same platform with the other memory model, for side-by-side reports."""
        return dataclasses.replace(self, memory=memory, name=f"{self.name} ({memory} memory)")


CLOUD_RUN_INSTANCE = Rates("cloudrun-instance", 0.000018, 0.000002, 0.0,
                           "Cloud Run tier 1, instance-based billing")
CLOUD_RUN_REQUEST = Rates("cloudrun-request", 0.000024, 0.0000025, 0.40e-6,
                          "Cloud Run tier 1, request-based billing ($0.40 per million requests)")
FARGATE = Rates("fargate", 0.04048 / 3600, 0.004445 / 3600, 0.0,
                "AWS Fargate Linux x86 us-east-1: $0.04048 per vCPU-hour, $0.004445 per GB-hour")
STUDY = Rates("study", 7.71605e-6, 3.85802e-6, 0.0,
              "published study: alpha per CPU-second, beta per GB-second")

PRESETS: dict[str, Billing] = {
    "cloudrun-instance": Billing("cloudrun-instance", CLOUD_RUN_INSTANCE, "instance", "configured"),
    "cloudrun-request": Billing("cloudrun-request", CLOUD_RUN_REQUEST, "request", "configured"),
    "fargate": Billing("fargate", FARGATE, "instance", "configured"),
    # The study's $0.0153 per audio-hour is reproduced with 32 GB configured (see docs/cost-audit.md).
    "study": Billing("study", STUDY, "instance", "configured"),
}


@dataclass(frozen=True)
class Usage:
    """What one scenario consumed, before any prices."""

    life_instance_s: float
    """Instance-seconds the instances existed (cold starts included)."""
    busy_instance_s: float
    """Instance-seconds spent serving or starting: what request-based billing charges."""
    used_memory_mb_s: float
    """Integral of memory used over the instances' life."""
    busy_used_memory_mb_s: float
    """Integral of memory used while busy."""
    requests: float
    """Requests served."""
    audio_s: float
    """Audio-seconds produced."""
    vcpus: float
    """vCPUs per instance."""
    configured_memory_mb: float
    """Configured memory per instance."""


@dataclass(frozen=True)
class Bill:
    """A priced usage."""

    cpu: float
    """Dollars for CPU."""
    memory: float
    """Dollars for memory."""
    requests: float
    """Dollars for request fees."""
    vcpu_s: float
    """vCPU-seconds billed."""
    gb_s: float
    """GiB-seconds billed."""

    @property
    def total(self) -> float:
        """Dollars in all."""
        return self.cpu + self.memory + self.requests


def bill(usage: Usage, billing: Billing) -> Bill:
    """Price a usage: the billed seconds follow the CPU model, the memory quantity follows the memory model."""
    billed_s = usage.life_instance_s if billing.cpu == "instance" else usage.busy_instance_s
    vcpu_s = usage.vcpus * billed_s
    if billing.memory == "configured":
        gb_s = usage.configured_memory_mb / MB_PER_GB * billed_s
    else:
        used = usage.used_memory_mb_s if billing.cpu == "instance" else usage.busy_used_memory_mb_s
        gb_s = used / MB_PER_GB
    rates = billing.rates
    return Bill(cpu=vcpu_s * rates.cpu_per_vcpu_s, memory=gb_s * rates.memory_per_gb_s,
                requests=usage.requests * rates.per_request, vcpu_s=vcpu_s, gb_s=gb_s)


def idle_memory_mb_s(fig: Figures, idle_since_s: float, duration_s: float) -> float:
    """Memory-seconds of an idle stretch that starts ``idle_since_s`` after the last request.

    Memory stays at warm-idle for the quiet window, then drops to the released level if the configuration
    has a lifecycle (otherwise it stays warm-idle).
    """
    end = idle_since_s + duration_s
    warm_part = max(0.0, min(end, fig.quiet_window_s) - idle_since_s)
    after = fig.released_memory_mb if fig.released_memory_mb is not None else fig.idle_memory_mb
    return warm_part * fig.idle_memory_mb + (duration_s - warm_part) * after


def full_load_usage(fig: Figures, audio_s: float = 3600.0,
                    audio_per_request_s: float = DEFAULT_AUDIO_PER_REQUEST_S) -> Usage:
    """One instance busy at its throughput, existing only while busy: the per-audio-hour cost."""
    busy = audio_s / fig.throughput_audio_s_per_s
    return Usage(busy, busy, busy * fig.warm_memory_mb, busy * fig.warm_memory_mb,
                 audio_s / audio_per_request_s, audio_s, fig.vcpus, fig.configured_mb)


def bursty_day_usage(fig: Figures, audio_s: float = 7200.0, bursts: int = 8, day_s: float = DAY_S,
                     audio_per_request_s: float = DEFAULT_AUDIO_PER_REQUEST_S, policy: Policy = "always-on",
                     scale_to_zero_after_s: float | None = None) -> Usage:
    """A day of ``bursts`` equal, equally spaced bursts on one instance.

    Each period is a burst at full throughput followed by idle until the next burst: warm-idle memory for
    the quiet window, then released memory if the configuration has a lifecycle. Always-on keeps the instance
    alive all day; scale-to-zero starts it for every burst (its cold start billed at warm memory, counted busy)
    and keeps it ``scale_to_zero_after_s`` (default: the quiet window) after the burst.
    """
    busy = audio_s / bursts / fig.throughput_audio_s_per_s
    idle = day_s / bursts - busy
    if idle < 0:
        raise ValueError(f"{fig.name}: {audio_s} audio-s do not fit in {day_s} s on one instance")
    requests = audio_s / audio_per_request_s
    if policy == "always-on":
        used = bursts * (busy * fig.warm_memory_mb + idle_memory_mb_s(fig, 0.0, idle))
        return Usage(day_s, bursts * busy, used, bursts * busy * fig.warm_memory_mb, requests, audio_s, fig.vcpus,
                     fig.configured_mb)
    after = fig.quiet_window_s if scale_to_zero_after_s is None else scale_to_zero_after_s
    stay = min(max(0.0, after), max(0.0, idle - fig.cold_start_s))
    working = fig.cold_start_s + busy
    used = bursts * (working * fig.warm_memory_mb + idle_memory_mb_s(fig, 0.0, stay))
    return Usage(bursts * (working + stay), bursts * working, used, bursts * working * fig.warm_memory_mb, requests,
                 audio_s, fig.vcpus, fig.configured_mb)


def per_audio_hour(total: float, audio_s: float) -> float:
    """Dollars per audio-hour; NaN when nothing was produced."""
    return total / (audio_s / 3600.0) if audio_s > 0 else math.nan
