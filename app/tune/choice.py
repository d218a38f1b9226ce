"""The engine the server serves with: the tuned choice for this CPU or its class, the portable default, or what a
setting forces.

`resolve_engine` looks for a tuning manifest (`app.tune.manifest.find`: this CPU model first, then its class, in the
cache directories before the manifests shipped with the package) when ``TTS_BACKEND=auto`` and returns an
`EngineChoice`: the backend, precision, form and pool shape to serve with, and why. Where none applies it is the
portable default (`app.tune.portable`). The caller (`app.served`) serves with it.

Light on purpose: the server resolves this at start, before anything heavy is imported.
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from app.settings import Settings
from app.tune import portable
from app.tune.manifest import SHIPPED, TuneKey, find

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
    return EngineChoice("tuned" if found.match == "cpu" else "class", choice.backend, choice.precision, why,
                        choice.form, str(found.path), found.manifest.table, streams, threads_per_stream)
