"""Cost model checks against the published study and hand-computed bills."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import pytest

from bench import cost, replay

REPO = Path(__file__).resolve().parents[2]

# The study's complete system on its 32-vCPU Xeon: 2.71 audio-s per CPU-s with all 32 vCPUs busy,
# 12.1 GB warm, 1331 MB released, 32 GB configured (1 GB per vCPU).
STUDY_COMPLETE = cost.Figures(
    name="complete", efficiency=2.71, throughput_audio_s_per_s=2.71 * 32, vcpus=32, warm_memory_mb=12.1 * 1024,
    idle_memory_mb=12.1 * 1024, released_memory_mb=1331, peak_memory_mb=12.1 * 1024, quiet_window_s=60,
    cold_start_s=6.2, restore_s=2.2, configured_memory_mb=32 * 1024,
)

# A tiny configuration whose bills are easy by hand: 1 vCPU, 1 audio-s per s, 1 GiB warm, 0.5 GiB idle,
# 0.1 GiB released after 60 s, 2 GiB configured.
TINY = cost.Figures(
    name="tiny", efficiency=1.0, throughput_audio_s_per_s=1.0, vcpus=1, warm_memory_mb=1024, idle_memory_mb=512,
    released_memory_mb=102.4, peak_memory_mb=1024, quiet_window_s=60, cold_start_s=5, restore_s=1,
    configured_memory_mb=2048,
)
TINY_RATES = cost.Rates("tiny", cpu_per_vcpu_s=1e-5, memory_per_gb_s=1e-6, per_request=1e-4)


def _billing(cpu: cost.CpuBilling, memory: cost.MemoryBilling) -> cost.Billing:
    return cost.Billing("tiny", TINY_RATES, cpu, memory)


def test_study_published_cost_per_audio_hour() -> None:
    result = cost.bill(cost.full_load_usage(STUDY_COMPLETE), cost.PRESETS["study"])
    # CPU: 3600 / 2.71 CPU-s x alpha; memory: 3600 / (2.71 x 32) wall-s x 32 GB x beta.
    assert result.cpu == pytest.approx(3600 / 2.71 * 7.71605e-6, rel=1e-12)
    assert result.cpu == pytest.approx(0.01025, abs=5e-6)
    assert result.memory == pytest.approx(0.00513, abs=5e-6)
    # The model gives $0.015375; the study publishes $0.0153: equal to its last published digit when
    # truncated, within one unit of that digit either way (docs/cost-audit.md discusses the 0.00008).
    assert int(result.total * 1e4) == 153
    assert abs(result.total - 0.0153) < 1e-4


def test_bursty_day_by_hand() -> None:
    usage = cost.bursty_day_usage(TINY)
    # 7200 audio-s in 8 bursts = 900 busy s each at 1 audio-s/s; each 10800 s period idles 9900 s.
    # Instance CPU: 1 vCPU x 86400 s x 1e-5 = 0.864.
    # Configured memory: 2 GiB x 86400 s x 1e-6 = 0.1728.
    # Metered memory per period: 900 s x 1 GiB + 60 s x 0.5 GiB + 9840 s x 0.1 GiB = 1914 GiB-s;
    #   x 8 = 15312 GiB-s x 1e-6 = 0.015312.
    configured = cost.bill(usage, _billing("instance", "configured"))
    metered = cost.bill(usage, _billing("instance", "metered"))
    assert configured.cpu == pytest.approx(0.864)
    assert configured.memory == pytest.approx(0.1728)
    assert configured.requests == pytest.approx(1200 * 1e-4)  # fees apply whatever the CPU model
    assert configured.cpu + configured.memory == pytest.approx(1.0368)
    assert metered.gb_s == pytest.approx(15312)
    assert metered.cpu + metered.memory == pytest.approx(0.879312)
    # Request-based: only the 7200 busy s are billed: CPU 0.072, configured memory 2 x 7200 x 1e-6 = 0.0144,
    # metered memory 7200 GiB-s x 1e-6 = 0.0072; 1200 requests (6 audio-s each) x 1e-4 = 0.12.
    req_configured = cost.bill(usage, _billing("request", "configured"))
    req_metered = cost.bill(usage, _billing("request", "metered"))
    assert req_configured.total == pytest.approx(0.072 + 0.0144 + 0.12)
    assert req_metered.total == pytest.approx(0.072 + 0.0072 + 0.12)


def test_release_lowers_only_the_metered_bill() -> None:
    no_lifecycle = dataclasses.replace(TINY, name="no-lifecycle", released_memory_mb=None, restore_s=None)
    with_release = cost.bursty_day_usage(TINY)
    without = cost.bursty_day_usage(no_lifecycle)
    # Without release the 9900 idle s stay at 0.5 GiB: (900 + 4950) x 8 = 46800 GiB-s.
    assert cost.bill(without, _billing("instance", "metered")).gb_s == pytest.approx(46800)
    assert cost.bill(with_release, _billing("instance", "metered")).total < cost.bill(
        without, _billing("instance", "metered")).total
    assert cost.bill(with_release, _billing("instance", "configured")) == cost.bill(
        without, _billing("instance", "configured"))
    # Request billing never bills idle time, so release changes nothing there either.
    for memory in ("configured", "metered"):
        assert cost.bill(with_release, _billing("request", memory)) == cost.bill(without, _billing("request", memory))
    # At full load nothing is idle: same cost with or without a lifecycle.
    assert cost.full_load_usage(TINY) == cost.full_load_usage(no_lifecycle)


def test_presets_carry_the_published_rates() -> None:
    run_i, run_r = cost.PRESETS["cloudrun-instance"], cost.PRESETS["cloudrun-request"]
    assert (run_i.cpu, run_i.memory) == ("instance", "configured")
    assert (run_i.rates.cpu_per_vcpu_s, run_i.rates.memory_per_gb_s, run_i.rates.per_request) == (0.000018, 0.000002, 0)
    assert (run_r.cpu, run_r.memory) == ("request", "configured")
    assert (run_r.rates.cpu_per_vcpu_s, run_r.rates.memory_per_gb_s) == (0.000024, 0.0000025)
    assert run_r.rates.per_request * 1e6 == pytest.approx(0.40)
    fargate = cost.PRESETS["fargate"]
    assert fargate.cpu == "instance"
    assert fargate.rates.cpu_per_vcpu_s * 3600 == pytest.approx(0.04048)
    assert fargate.rates.memory_per_gb_s * 3600 == pytest.approx(0.004445)
    study = cost.PRESETS["study"].rates
    assert (study.cpu_per_vcpu_s, study.memory_per_gb_s) == (7.71605e-6, 3.85802e-6)


def test_default_configured_memory_rounds_peak_up_to_half_gib() -> None:
    def configured(peak: float) -> float:
        return dataclasses.replace(TINY, peak_memory_mb=peak, configured_memory_mb=None).configured_mb

    assert configured(1000) == 1024
    assert configured(1024) == 1024
    assert configured(1025) == 1536
    assert TINY.configured_mb == 2048


def test_trace_usage_by_hand() -> None:
    audio, requests = [30.0, 0.0, 0.0, 30.0], [5.0, 0.0, 0.0, 5.0]
    always = replay.trace_usage(TINY, audio, requests, "always-on")
    # Minutes 0 and 3: 30 s busy at 1024 MiB + 30 s warm-idle at 512; minute 1: 60 s warm-idle (quiet window);
    # minute 2: 60 s released at 102.4. Never cold-starts: the instance was already up.
    assert always.usage.life_instance_s == 240
    assert always.usage.busy_instance_s == 60
    assert always.usage.used_memory_mb_s == pytest.approx(2 * (30 * 1024 + 30 * 512) + 60 * 512 + 60 * 102.4)
    assert (always.cold_starts, always.wakes) == (0, 0)
    zero = replay.trace_usage(TINY, audio, requests, "scale-to-zero")
    # Wakes at minutes 0 and 3 (5 s cold start each at warm memory); after minute 0 it stays the 60 s quiet
    # window at 512 MiB, then is gone for minute 2.
    assert zero.usage.life_instance_s == 5 + 60 + 60 + 0 + 5 + 60
    assert zero.usage.busy_instance_s == 5 + 30 + 5 + 30
    assert zero.usage.used_memory_mb_s == pytest.approx(2 * (5 * 1024 + 30 * 1024 + 30 * 512) + 60 * 512)
    assert (zero.cold_starts, zero.wakes, zero.max_instances) == (2, 2, 1)
    assert zero.waiting_requests == pytest.approx(2 * 5 * 5 / 60)


def test_trace_usage_adds_instances_for_peaks() -> None:
    # 150 s of work in one minute needs 3 instances; 2 extra start (cold start each), then retire.
    peak = replay.trace_usage(TINY, [150.0, 0.0], [25.0, 0.0], "always-on")
    assert (peak.max_instances, peak.cold_starts) == (3, 2)
    assert peak.usage.life_instance_s == 2 * 5 + 3 * 60 + 60


def test_example_figures_load() -> None:
    figures = cost.load_figures(REPO / "bench" / "figures_example.json")
    names = [f.name for f in figures.configurations]
    assert names == ["pytorch", "onnxruntime-defaults", "openvino-defaults", "openvino-sized", "complete"]
    assert "STUDY" in figures.source
    complete = figures.configurations[-1]
    assert complete.has_lifecycle and not figures.configurations[3].has_lifecycle
    assert math.isclose(cost.bill(cost.full_load_usage(complete), cost.PRESETS["study"]).total, 0.015375, abs_tol=1e-5)
