"""Everything a request needs, built once in the app's lifespan (no module globals)."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path

from app import backends, cachedir, modelfile
from app.engine import Engine
from app.frontend import Frontend
from app.inference_process import Spec
from app.metrics import Metrics
from app.pool import StreamPool
from app.process_runtime import ProcessRuntime
from app.runtime import Runtime
from app.settings import Settings
from app.sizing import CpuBudget, PoolShape, shape_for
from app.vocab import Vocab
from app.voices import VoiceBank
from lifecycle.manager import LifecycleManager

log = logging.getLogger(__name__)


@dataclass
class Services:
    settings: Settings
    engine: Engine
    lifecycle: LifecycleManager
    metrics: Metrics
    budget: CpuBudget
    shape: PoolShape
    draining: bool = field(default=False)

    @property
    def pool(self) -> StreamPool:
        return self.engine.pool


def build_engine(settings: Settings, budget: CpuBudget) -> tuple[Engine, PoolShape]:
    """Resolve the model and voices and wire the engine; loads nothing heavy yet (blocking I/O)."""
    shape = shape_for(budget, settings.streams, settings.threads_per_stream)
    writable = cachedir.writable(settings.cache_dir)
    # A read-only cache directory may still hold an assembled model: use it rather than assemble another.
    models = list(dict.fromkeys([settings.cache_dir / "models", writable / "models"]))
    model_path = modelfile.resolve(settings.model_path, models, settings.model_sha256)
    voices = VoiceBank.load(settings.voices_path)
    queue = settings.queue_size or 2 * shape.streams
    spec = Spec(settings=settings, model_path=model_path, shape=shape, writable=writable)
    runtime = ProcessRuntime(spec) if settings.inference_process else build_runtime(spec)
    engine = Engine(runtime, StreamPool(shape.streams, queue), Frontend(), voices, Vocab.embedded(),
                    default_lang=settings.lang, first_chunk_tokens=settings.first_chunk_tokens,
                    max_chunk_tokens=settings.max_chunk_tokens, release_frontend=settings.release_frontend)
    log.info("cpu budget %s -> pool %d streams x %d threads, queue %d", budget, shape.streams,
             shape.threads_per_stream, queue)
    return engine, shape


def build_runtime(spec: Spec) -> Runtime:
    """The backends, unloaded: run by the inference process, or by the server itself when
    ``TTS_INFERENCE_PROCESS=0`` (the compile-cache choice imports OpenVINO, so it happens here)."""
    settings = spec.settings
    cache = _compile_cache(settings, spec.model_path, spec.writable)
    fallback = spec.writable / "openvino" / cache.name if cache else None
    backend = backends.create(settings.backend, spec.model_path, spec.shape, runtime_defaults=settings.runtime_defaults,
                              precision=settings.precision, cache_dir=cache, fallback_cache_dir=fallback,
                              shape_cache=settings.shape_cache)
    bridge = (backends.bridge(spec.model_path, spec.shape, spec.writable / "onnxruntime")
              if spec.has_bridge else None)
    return Runtime(backend, bridge)


def _compile_cache(settings: Settings, model_path: Path, writable: Path) -> Path | None:
    """OpenVINO's CACHE_DIR: the cache baked into the image when its key matches, else the writable one
    (or, when the configured cache directory is read-only, what it already holds)."""
    if not settings.compile_cache or settings.backend != "openvino":
        return None
    from app import compile_cache

    digest = modelfile.expected_sha256() if settings.model_path is None else None
    directory, why = compile_cache.choose(settings.baked_cache_dir, writable / "openvino", model_path, digest)
    readonly = settings.cache_dir / "openvino" / directory.name
    if writable != settings.cache_dir and directory.parent == writable / "openvino" and readonly.is_dir():
        # What a read-only cache directory already compiled is imported from there; when OpenVINO
        # cannot use it, the backend compiles into the writable fallback.
        directory, why = readonly, f"{why}; importing what the read-only {readonly} holds first"
    log.info("compile cache: %s", why)
    return directory


def default_voice(settings: Settings, voices: VoiceBank) -> str:
    return settings.default_voice or voices.names[0]

