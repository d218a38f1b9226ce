"""The engine the server serves with: the tuned choice for this CPU or its class, the portable default, or what a
setting forces.

`resolve_engine` looks for a tuning manifest (`app.tune.manifest.find`: this CPU model first, then its class, in the
cache directories before the manifests shipped with the package) when ``TTS_BACKEND=auto`` and returns an
`EngineChoice`: the backend, precision, form and pool shape to serve with, why, and the form the ONNX Runtime bridge
runs. Where none applies it is the portable default (`app.tune.portable`). The caller (`app.served`) serves with it.

Light on purpose: the server resolves this at start, before anything heavy is imported.
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from app.forms.store import ONNXRUNTIME_ONLY as ONNXRUNTIME_FORMS
from app.settings import Settings
from app.tune import portable
from app.tune.manifest import SHIPPED, Candidate, TuneKey, find

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class EngineChoice:
    """Which form the server runs, and why (shown by ``/v1/info`` and logged at start)."""

    source: str
    """``tuned`` (a manifest made on this CPU model), ``class`` (one made on another CPU of its class), ``default``
    (auto, none found: the portable default) or ``forced`` (TTS_BACKEND named one)."""
    backend: str
    precision: str
    reason: str
    form: str = "onnx"
    """The model form served (`app.forms.store`)."""
    manifest: str | None = None
    """Path of the manifest used."""
    table: list[dict[str, Any]] = field(default_factory=list)
    """The tuner's figures behind the choice."""
    bridge_form: str = ""
    """The form the ONNX Runtime bridge runs under this choice (`bridge_choice`); ``""``: the served form where ONNX
    Runtime runs it, else the ONNX file as shipped."""
    bridge: str = ""
    """The figures behind ``bridge_form``, or ``""``."""
    streams: int = 0
    """Concurrent inferences to serve with: the setting where one is set, else the tuned shape's; 0: sized from
    the CPU budget (`app.sizing.shape_for`)."""
    threads_per_stream: int = 0
    """Likewise for the threads of each stream."""

    def public(self) -> dict[str, Any]:
        """What ``/v1/info`` shows as ``engine``; the shape served is its ``pool``."""
        shown = asdict(self)
        del shown["streams"], shown["threads_per_stream"]
        return shown


def resolve_engine(settings: Settings, cpus: int, model_sha256: str, writable: Path, *,
                   shipped: bool = True) -> EngineChoice:
    """What to serve with under ``settings``: for ``backend=auto`` the tuned backend, precision, form and shape of the
    manifest found for this CPU or its class (streams or threads set explicitly stay), else the portable default;
    otherwise the backend the settings name. ``shipped``: look at the manifests shipped with the package too (the
    benchmark's foreign instance looks at none)."""
    if settings.backend != "auto":
        return EngineChoice("forced", settings.backend, settings.precision, f"TTS_BACKEND={settings.backend}",
                            streams=settings.streams, threads_per_stream=settings.threads_per_stream)
    key = TuneKey.here(cpus, model_sha256)
    directories = [d for d in (settings.baked_cache_dir, writable) if d is not None] + ([SHIPPED] if shipped else [])
    found = find(list(dict.fromkeys(directories)), key)
    if found.manifest is None:
        default = portable.candidate(cpus)
        why = f"{found.reason}; serving the portable default ({default.name})"
        log.info("engine: %s", why)
        return EngineChoice("default", default.backend, default.precision, why, default.form,
                            streams=settings.streams or default.streams,
                            threads_per_stream=settings.threads_per_stream or default.threads_per_stream)
    choice = found.manifest.choice
    # A manifest made for another budget keeps its threads per stream and fills this one with streams.
    threads_per_stream = settings.threads_per_stream or min(choice.threads_per_stream, cpus)
    streams = settings.streams or (choice.streams if found.manifest.key.cpus == cpus
                                   else max(1, cpus // threads_per_stream))
    why = f"{found.reason}: {found.manifest.why}"
    log.info("engine: %s (%d x %d): %s", choice.name, streams, threads_per_stream, why)
    # Only an OpenVINO primary has a bridge (`app.runtime.spec.Spec.has_bridge`).
    bridge_form, bridge = (bridge_choice(choice, found.manifest.table, streams * threads_per_stream)
                           if choice.backend == "openvino" else ("", ""))
    if bridge:
        log.info("engine: the bridge runs the %s form: %s", bridge_form, bridge)
    return EngineChoice("tuned" if found.match == "cpu" else "class", choice.backend, choice.precision, why,
                        choice.form, str(found.path), found.manifest.table, bridge_form, bridge, streams,
                        threads_per_stream)


def _throughputs(table: list[dict[str, Any]]) -> dict[tuple[Any, ...], float]:
    """Audio-s per s of each row that ran and passed the output check, by (backend, form, precision, streams,
    threads per stream)."""
    return {(r.get("backend"), r.get("form", "onnx"), r.get("precision"), r.get("streams"),
             r.get("threads_per_stream")): float(r.get("throughput") or 0.0) for r in table
            if not r.get("error") and (r.get("check") or {}).get("passed", True)}


def bridge_choice(choice: Candidate, table: list[dict[str, Any]], threads: int) -> tuple[str, str]:
    """The form the ONNX Runtime bridge runs under ``choice``, and the figures behind it (``""`` where nothing was
    compared). The bridge is one session on all ``threads``: under an OpenVINO primary it serves the first requests
    after a start or a restore. Under a form only ONNX Runtime runs it runs that
    form (one file for both); otherwise the ONNX Runtime form (`ONNXRUNTIME_FORMS`, or the file as shipped) that
    made the most audio per second as one session of ``threads`` threads in the tuning run, where one of those
    forms beat the file as shipped. That is how an OpenVINO primary gets a faster bridge: the tuner measures
    ``convgemm`` 1 x N on every CPU, which beat the file as shipped where it was measured (docs/experiments.md)."""
    if choice.form in ONNXRUNTIME_FORMS:
        return choice.form, ""
    rows = _throughputs(table)
    speeds = {form: rows.get(("onnxruntime", form, "f32", 1, threads), 0.0)
              for form in ("onnx", *sorted(ONNXRUNTIME_FORMS))}
    best = max(speeds, key=lambda form: speeds[form])
    if best == "onnx" or not speeds["onnx"]:
        return "onnx", ""
    measured = ", ".join(f"{form} {speed:.2f}" for form, speed in speeds.items() if speed)
    return best, f"audio-s per s in the tuning run as one ONNX Runtime session of {threads} threads: {measured}"
