"""What the server serves, resolved before anything loads: the model file, its tuned form, the pool's shape, the
voices, and the inference process's `Spec`.

`app.services.build_engine` wires the engine from it; ``python -m app`` resolves it first (`app.runtime.early`),
before it imports the server, so the inference process it started at once can load the model while the server
imports. Both resolve the same thing from the same settings, and the engine adopts that process only when its
`Spec` is the same.
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from app.forms import modelfile, store, timed
from app.runtime import cachedir
from app.runtime.local import WarmUp
from app.runtime.spec import SERVER, Options, Spec
from app.settings import Settings, SettingsError
from app.sizing import CpuBudget, shape_for
from app.text.vocab import Vocab
from app.tune import portable
from app.tune.choice import EngineChoice, resolve_engine
from app.voices import Voice, VoiceBank

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Served:
    settings: Settings
    """With the engine choice's backend, precision and shape (`choice`): what the inference process is built from."""
    choice: EngineChoice
    spec: Spec
    voices: VoiceBank
    vocab: Vocab
    timestamps: bool
    """The served model outputs per-token durations (word timestamps)."""


def resolve(settings: Settings, budget: CpuBudget, options: Options = SERVER) -> Served:
    """Resolve the model, its tuned form and the voices (blocking I/O; loads no runtime). Raises `SettingsError`
    for settings that name what is not there. ``options``: where a test or the benchmark runs the model otherwise."""
    writable = cachedir.writable(settings.cache_dir)
    model_path, digest = served_model(settings, writable)
    timestamps = timed.digest(model_path) is not None
    if settings.backend == "auto" and not digest:
        digest = modelfile.sha256_of(model_path)
    choice = resolve_engine(settings, budget.cpus, digest, writable, shipped=options.shipped_tuning)
    settings = dataclasses.replace(settings, backend=choice.backend, precision=choice.precision,
                                   streams=choice.streams, threads_per_stream=choice.threads_per_stream)
    source_path = model_path
    read_only = [settings.baked_cache_dir, settings.cache_dir]
    if choice.source != "forced" and choice.form in store.ONNXRUNTIME_ONLY:
        # A form chosen on another machine (or on none) is checked here once before it serves; one that cannot be
        # made leaves the model file serving rather than the server down (`app.tune.portable`).
        model_path, served_form = portable.form_path(model_path, writable, digest, read_only, choice.form,
                                                     check=choice.source != "tuned")
        choice = dataclasses.replace(choice, reason=f"{choice.reason}; serving {served_form}",
                                     form=choice.form if model_path != source_path else store.ONNX)
    else:
        model_path = store.path(choice.form, model_path, writable, digest, read_only=read_only)
    shape = shape_for(budget, settings.streams, settings.threads_per_stream)
    try:
        voices = VoiceBank.load(settings.voices_path, settings.alias_table())
    except ValueError as exc:  # an alias naming a voice the file lacks: fail at start, naming the setting
        raise SettingsError(f"TTS_VOICE_ALIASES / TTS_VOICES_PATH: {exc}") from None
    vocab = Vocab.embedded()
    warm_up = _warm_up(vocab, voices.resolve(default_voice(settings, voices))) if options.warm_up else None
    spec = Spec(settings=settings, model_path=model_path, shape=shape, writable=writable, warm_up=warm_up,
                options=options)
    return Served(settings, choice, spec, voices, vocab, timestamps)


def served_model(settings: Settings, writable: Path) -> tuple[Path, str]:
    """The ONNX file the server runs, and its sha256 (the key of its tuning, forms and compile cache) where it is
    known without hashing the file (else ``""``: a user's model without ``TTS_MODEL_SHA256``).

    That is the timed copy of the model (`app.forms.timed`: the same graph with its per-token durations as a
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
"""What every slot runs once after a load (6 tokens). The first-call cost it pays is much the same whatever the
length: after 6 tokens the next request took about a warm one's time, while a longer warm-up took longer for
little more (docs/experiments.md)."""


def _warm_up(vocab: Vocab, voice: Voice) -> WarmUp:
    ids = vocab.ids(WARM_UP_PHONEMES)
    return WarmUp(tokens=np.array([[0, *ids, 0]], dtype=np.int64), style=voice.style_for(len(ids)))


def default_voice(settings: Settings, voices: VoiceBank) -> str:
    return settings.default_voice or voices.default
