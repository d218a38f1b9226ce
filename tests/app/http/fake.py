"""A fake runtime and front end for fast routing and error tests: the real engine, pool, voices and
vocabulary around them, no model. Audio is a tone of 600 samples (25 ms, the model's unit) per token."""

from __future__ import annotations

import threading
from collections import Counter
from pathlib import Path

import numpy as np
import numpy.typing as npt

from app.engine import Engine
from app.pool import StreamPool
from app.runtime.backends.base import Inference, Resolved
from app.settings import Settings
from app.text import normalize, words
from app.text.vocab import Vocab
from app.voices import VoiceBank

SAMPLES_PER_TOKEN = 600
FAIL_SPEED = 3.0
"""Inferences at this speed raise, as a runtime error would."""


class FakeRuntime:
    """An `app.runtime.protocol.Runtime` that makes a tone; ``gate`` (when set) holds each inference."""

    def __init__(self, slots: int) -> None:
        self.slots = slots
        self.resolved: Resolved | None = None
        self.served: Counter[str] = Counter()
        self.loads = 0
        self.gate: threading.Event | None = None
        self.started = threading.Event()
        """Set when an inference begins (so a test knows a request holds its slot)."""
        self._loaded = False
        self.timed = True
        """Whether it returns durations, as a timed model does (`app.forms.timed`)."""

    @property
    def loaded(self) -> bool:
        return self._loaded

    @property
    def active_name(self) -> str | None:
        return "fake" if self._loaded else None

    def load(self) -> Resolved:
        self.loads += 1
        self._loaded = True
        self.resolved = Resolved(backend="fake", slots=self.slots, streams=self.slots, threads=self.slots,
                                 precision="f32", load_s=0.0, from_cache=None)
        return self.resolved

    def infer(self, slot: int, tokens: npt.NDArray[np.int64], style: npt.NDArray[np.float32],
              speed: float) -> npt.NDArray[np.float32]:
        return self.infer_timed(slot, tokens, style, speed).audio

    def infer_timed(self, slot: int, tokens: npt.NDArray[np.int64], style: npt.NDArray[np.float32],
                    speed: float) -> Inference:
        """The tone, and (with ``timed``) one 25 ms frame per token as its durations, none for the pads."""
        self.started.set()
        if self.gate is not None:
            self.gate.wait(30)
        if speed == FAIL_SPEED:
            raise RuntimeError("injected fault")
        self.served["fake"] += 1
        n = (tokens.shape[1] - 2) * SAMPLES_PER_TOKEN
        audio = (0.3 * np.sin(np.arange(n, dtype=np.float32) * 0.05)).astype(np.float32)
        durations = np.array([0] + [1] * (tokens.shape[1] - 2) + [0], dtype=np.int64) if self.timed else None
        return Inference(audio, durations)

    def intact(self) -> bool:
        return True

    def unload(self) -> None:
        self._loaded = False

    def files(self) -> list[Path]:
        return []


class FakeFrontend:
    """Text in, the same text out as "phonemes" (letters are in the model's vocabulary)."""

    def __init__(self) -> None:
        self.loaded = False
        self.reader_retries = 0

    def load(self, langs: tuple[str, ...] = ("en-us",)) -> float:
        self.loaded = True
        return 0.0

    def release_languages(self) -> None:
        pass

    @property
    def languages_loaded(self) -> list[str]:
        return ["en-us"] if self.loaded else []

    @property
    def serving(self) -> str:
        return "misaki" if self.loaded else "none"

    def files(self) -> list[Path]:
        return []

    def phonemize(self, text: str, lang: str) -> str:
        return " ".join(text.split())

    def phonemize_words(self, text: str, lang: str, normalization: normalize.Normalization = normalize.DEFAULT
                        ) -> tuple[str, list[words.Word]]:
        if lang in ("en-us", "en-gb"):  # as the real front end: the request's options reach the text
            text = normalize.english(text, normalization)
        phonemes = self.phonemize(text, lang)
        return phonemes, words.of_phonemes(phonemes)


def fake_engine(settings: Settings, *, timed: bool = True) -> Engine:
    """The engine `app.services.build_engine` would wire, on the fakes (``timed``: whether the model gives word
    timestamps)."""
    streams = settings.streams or 1
    runtime = FakeRuntime(streams)
    runtime.timed = timed
    return Engine(runtime, StreamPool(streams, max_requests=settings.max_requests), FakeFrontend(),  # type: ignore[arg-type]
                  VoiceBank.load(None), Vocab.embedded(), default_lang=settings.lang, timestamps=timed)
