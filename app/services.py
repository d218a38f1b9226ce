"""Everything a request needs, built once in the app's lifespan (no module globals)."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from app.engine import Engine
from app.metrics import Metrics
from app.pool import StreamPool
from app.runtime import cachedir, forms, modelfile, timed, tuning
from app.runtime.local import WarmUp
from app.runtime.protocol import Runtime
from app.runtime.proxy import ProcessRuntime
from app.runtime.spec import Spec, build_runtime
from app.settings import Settings, SettingsError
from app.sizing import CpuBudget, PoolShape, shape_for
from app.text.frontend import Frontend
from app.text.vocab import Vocab
from app.voices import Voice, VoiceBank
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
    writable = cachedir.writable(settings.cache_dir)
    model_path, digest = served_model(settings, writable)
    timestamps = timed.digest(model_path) is not None
    if settings.backend == "auto" and not digest:
        digest = modelfile.sha256_of(model_path)
    settings, choice = tuning.resolve(settings, budget.cpus, digest, writable)
    source_path = model_path
    model_path = forms.path(choice.form, model_path, writable, digest,
                            read_only=[settings.baked_cache_dir, settings.cache_dir])
    shape = shape_for(budget, settings.streams, settings.threads_per_stream)
    try:
        voices = VoiceBank.load(settings.voices_path, settings.alias_table())
    except ValueError as exc:  # an alias naming a voice the file lacks: fail at start, naming the setting
        raise SettingsError(f"TTS_VOICE_ALIASES / TTS_VOICES_PATH: {exc}") from None
    vocab = Vocab.embedded()
    queue = settings.queue_size or 2 * shape.streams
    warm_up = _warm_up(vocab, voices.resolve(default_voice(settings, voices))) if settings.warm_up else None
    spec = Spec(settings=settings, model_path=model_path, shape=shape, writable=writable, warm_up=warm_up,
                source_path=source_path if model_path != source_path else None)
    runtime: Runtime
    if settings.inference_process:
        runtime = process = ProcessRuntime(spec)
        process.prestart()
    else:
        runtime = build_runtime(spec)
    baked = settings.baked_cache_dir
    frontend = Frontend(writable / "frontend", baked / "frontend" if baked is not None else None)
    pool = StreamPool(shape.streams, queue, scheduler=settings.scheduler, margin_s=settings.deadline_margin_s,
                      realtime_factor=settings.realtime_factor, slack_headroom=settings.slack_headroom)
    engine = Engine(runtime, pool, frontend, voices, vocab,
                    default_lang=settings.lang, first_chunk_tokens=settings.first_chunk_tokens,
                    max_chunk_tokens=settings.max_chunk_tokens, slack_chunks=settings.slack_chunks,
                    release_frontend=settings.release_frontend,
                    choice=choice, timestamps=timestamps, start_bridge=settings.start_bridge,
                    wide_chunk_tokens=settings.wide_chunk_tokens,
                    idle_first_chunk_tokens=settings.idle_first_chunk_tokens,
                    quick_frontend=settings.quick_frontend)
    log.info("cpu budget %s -> pool %d streams x %d threads, queue %d", budget, shape.streams,
             shape.threads_per_stream, queue)
    return engine, shape


def served_model(settings: Settings, writable: Path) -> tuple[Path, str]:
    """The ONNX file the server runs, and its sha256 (the key of its tuning, forms and compile cache) where it is
    known without hashing the file (else ``""``: a user's model without ``TTS_MODEL_SHA256``).

    That is the timed copy of the model (`app.runtime.timed`: the same graph with its per-token durations as a
    second output, for word timestamps) wherever the model has the known duration tensor, else the model
    itself. A copy already made next to the model or in the configured cache directory (the image's, read-only)
    is used from there; else it is made once in the writable cache directory. The tuner resolves the same file.
    """
    models = list(dict.fromkeys([settings.cache_dir / "models", writable / "models"]))
    source = modelfile.resolve(settings.model_path, models, settings.model_sha256)
    copy = timed.find(source, list(dict.fromkeys([source.parent, *models])), writable / "models")
    if copy is not None:
        return copy, timed.digest(copy) or ""
    return source, modelfile.expected_sha256() if settings.model_path is None else settings.model_sha256.lower()


WARM_UP_PHONEMES = "wˈɔɹm."
"""What every slot runs once after a load (6 tokens). The first-call cost it pays is about 1-1.5 s a slot whatever
the length: after 6 tokens the next request took 1.04x a warm one's time, after 20 tokens 0.95x, without a
warm-up 1.28x, for a warm-up of 2.95 s instead of 4.51 s over two slots (bench/results/warmup-20261201)."""


def _warm_up(vocab: Vocab, voice: Voice) -> WarmUp:
    ids = vocab.ids(WARM_UP_PHONEMES)
    return WarmUp(tokens=np.array([[0, *ids, 0]], dtype=np.int64), style=voice.style_for(len(ids)))


def default_voice(settings: Settings, voices: VoiceBank) -> str:
    return settings.default_voice or voices.names[0]

