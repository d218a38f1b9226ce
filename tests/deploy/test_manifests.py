"""The Cloud Run and Knative manifests against the server's settings and the figures measured from its container."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from app.http import health
from app.settings import Settings
from app.sizing import PoolShape
from app.tune import speed

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
MANIFESTS = {"cloudrun": DEPLOY / "cloudrun" / "service.yaml", "knative": DEPLOY / "knative" / "service.yaml"}
MEASURED: dict[str, Any] = json.loads((DEPLOY / "measured.json").read_text())

# The sizing rules deploy/README.md states; the tests hold the manifests to them.
MEMORY_HEADROOM = 1.25
"""Memory limit >= (the largest warm peak measured for what any CPU class serves + what it writes to the in-memory
/tmp) x this."""
STARTUP_MARGIN = 2.0
"""Startup probe window >= a start that has to compile (no matching baked cache) x this."""
TIMEOUT_MARGIN = 1.5
"""Request timeout >= the longest input synthesized at the slowest admitted rate x this."""


def load(name: str) -> dict[str, Any]:
    service: dict[str, Any] = yaml.safe_load(MANIFESTS[name].read_text())
    return service


def container(service: dict[str, Any]) -> dict[str, Any]:
    containers = service["spec"]["template"]["spec"]["containers"]
    assert len(containers) == 1
    found: dict[str, Any] = containers[0]
    return found


def env_of(service: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e["value"] for e in container(service).get("env", [])}


def settings_of(service: dict[str, Any]) -> Settings:
    return Settings.from_env(env_of(service))


def bytes_of(quantity: str) -> int:
    match = re.fullmatch(r"(\d+)(Mi|Gi)", quantity)
    assert match, f"memory {quantity!r}: use Mi or Gi"
    return int(match.group(1)) * (1 << 20 if match.group(2) == "Mi" else 1 << 30)


def concurrency(service: dict[str, Any]) -> int:
    found: int = service["spec"]["template"]["spec"]["containerConcurrency"]
    return found


@pytest.mark.parametrize("name", MANIFESTS)
def test_manifest_is_a_knative_service_with_one_container(name: str) -> None:
    service = load(name)
    assert service["apiVersion"] == "serving.knative.dev/v1" and service["kind"] == "Service"
    assert container(service)["image"]


@pytest.mark.parametrize("name", MANIFESTS)
def test_port_is_the_one_the_image_listens_on(name: str) -> None:
    ports = container(load(name))["ports"]
    assert [p["containerPort"] for p in ports] == [Settings().port]
    assert f"EXPOSE {Settings().port}" in (ROOT / "Containerfile").read_text()
    # The platform sets PORT itself (Cloud Run refuses a manifest that sets it); the server reads it.
    assert "PORT" not in env_of(load(name))


@pytest.mark.parametrize("name", MANIFESTS)
def test_every_variable_is_a_setting_with_a_valid_value(name: str) -> None:
    env = env_of(load(name))
    known = {f"TTS_{field.upper()}" for field in Settings.__dataclass_fields__}
    assert set(env) <= known, set(env) - known
    settings_of(load(name))  # raises SettingsError on a bad value


@pytest.mark.parametrize("name", MANIFESTS)
def test_probes_hit_the_servers_health_routes(name: str) -> None:
    paths = {route.path for route in health.routes}
    box = container(load(name))
    assert box["startupProbe"]["httpGet"]["path"] == "/readyz" in paths
    assert box["livenessProbe"]["httpGet"]["path"] == "/healthz" in paths
    if name == "knative":  # Knative routes traffic on readiness (the queue-proxy runs it); draining says 503
        assert box["readinessProbe"]["httpGet"]["path"] == "/readyz"
    for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
        if probe in box:
            assert box[probe]["httpGet"].get("port", Settings().port) == Settings().port


@pytest.mark.parametrize("name", MANIFESTS)
def test_concurrency_is_the_listeners_the_slowest_class_on_record_plays_in_real_time(name: str) -> None:
    """What the server itself admits on the slowest class at the manifest's shape (`app.tune.speed.pace`): the
    platform may hand out that class, and a listener beyond it would stall or wait."""
    service = load(name)
    settings = settings_of(service)
    # Pinned: sized from the CPUs the platform shows, the pool could differ from the one measured.
    assert settings.streams > 0 and settings.threads_per_stream > 0
    # The server admits by the same rule, so the platform's limit comes first.
    assert settings.max_requests == 0
    shape = PoolShape(settings.streams, settings.threads_per_stream)
    slowest = speed.slowest(shape, wide=shape.streams > 1)
    assert concurrency(service) == speed.pace(slowest, shape.streams).listeners


def test_knative_scales_out_before_an_instance_is_full() -> None:
    annotations = load("knative")["spec"]["template"]["metadata"]["annotations"]
    target = int(annotations["autoscaling.knative.dev/target"])
    utilization = int(annotations.get("autoscaling.knative.dev/target-utilization-percentage", "70"))
    assert 1 <= target <= concurrency(load("knative")) and target * utilization / 100 < concurrency(load("knative"))


@pytest.mark.parametrize("name", MANIFESTS)
def test_the_pool_fits_the_cpu_limit(name: str) -> None:
    box = container(load(name))
    settings = settings_of(load(name))
    assert settings.streams * settings.threads_per_stream == float(box["resources"]["limits"]["cpu"])


@pytest.mark.parametrize("name", MANIFESTS)
def test_memory_is_sized_from_the_measured_peak(name: str) -> None:
    box = container(load(name))
    limit = bytes_of(box["resources"]["limits"]["memory"])
    peaks = MEASURED["memory_warm_peak_bytes"]
    # Every class a shipped tuning manifest covers, and the portable default, has its peak measured.
    tuning = (ROOT / "app" / "data" / "tuning").glob("*.json")
    shipped = {json.loads(p.read_text())["key"]["cpu_class"] for p in tuning} | {"portable-default"}
    assert "portable-default" in peaks and {"intel-amx", "amd-avx512-bf16"} <= set(peaks) <= shipped
    need = (max(peaks.values()) + MEASURED["memory_tmpfs_bytes"]) * MEMORY_HEADROOM
    assert limit >= need, f"{limit / 2**30:.2f} GiB < {need / 2**30:.2f} GiB"
    # ...and not far beyond it: instance-based billing charges the configured memory every second.
    assert limit < need + (1 << 29)
    assert MEASURED["run_memory"] == box["resources"]["limits"]["memory"].replace("Gi", "g").replace("Mi", "m")


@pytest.mark.parametrize("name", MANIFESTS)
def test_startup_probe_allows_a_start_that_must_compile(name: str) -> None:
    probe = container(load(name))["startupProbe"]
    window = probe.get("initialDelaySeconds", 0) + probe["periodSeconds"] * probe["failureThreshold"]
    assert window >= MEASURED["cold_start_ready_compiling_s"] * STARTUP_MARGIN


@pytest.mark.parametrize("name", MANIFESTS)
def test_request_timeout_covers_the_longest_input(name: str) -> None:
    service = load(name)
    settings = settings_of(service)
    slowest = MEASURED["load_audio_s_per_s"] / max(MEASURED["load_concurrency"], concurrency(service))
    longest_s = settings.max_input_chars * MEASURED["audio_s_per_char"] / slowest
    assert service["spec"]["template"]["spec"]["timeoutSeconds"] >= math.ceil(longest_s * TIMEOUT_MARGIN)


@pytest.mark.parametrize("name", MANIFESTS)
def test_scale_bounds(name: str) -> None:
    annotations = load(name)["spec"]["template"]["metadata"]["annotations"]
    prefix = "autoscaling.knative.dev/"
    low, high = (int(annotations[prefix + k]) for k in (("minScale", "maxScale") if name == "cloudrun"
                                                         else ("min-scale", "max-scale")))
    assert 0 <= low <= high


def test_cloud_run_bills_by_instance_and_boosts_startup() -> None:
    annotations = load("cloudrun")["spec"]["template"]["metadata"]["annotations"]
    assert annotations["run.googleapis.com/cpu-throttling"] == "false"
    assert annotations["run.googleapis.com/startup-cpu-boost"] == "true"
    # Cloud Run kills 10 s after SIGTERM: the drain must end first.
    assert settings_of(load("cloudrun")).shutdown_grace_s < 10


def test_both_platforms_get_the_same_sizing() -> None:
    run, kn = load("cloudrun"), load("knative")
    assert env_of(run) == env_of(kn)
    assert container(run)["resources"]["limits"] == container(kn)["resources"]["limits"]
    for key in ("containerConcurrency", "timeoutSeconds"):
        assert run["spec"]["template"]["spec"][key] == kn["spec"]["template"]["spec"][key]


def test_knative_runs_it_locked_down() -> None:
    box = container(load("knative"))
    security = box["securityContext"]
    assert security["runAsNonRoot"] is True and security["readOnlyRootFilesystem"] is True
    assert security["allowPrivilegeEscalation"] is False
    # Requests equal limits: the CFS quota (what the server sizes itself from) is the CPUs it is billed for.
    assert box["resources"]["requests"] == box["resources"]["limits"]
    # The writable cache (TTS_CACHE_DIR, /tmp/tts-cache in the image) needs a writable /tmp.
    mounts = {m["mountPath"] for m in box["volumeMounts"]}
    assert "/tmp" in mounts
