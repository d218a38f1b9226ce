"""Output checks: the log-mel distance and its thresholds separate equal audio from different audio."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest

from app.forms import modelfile
from app.runtime.backends.onnxruntime import OnnxRuntimeBackend
from app.sizing import PoolShape
from app.text.frontend import Frontend
from app.text.vocab import Vocab
from app.voices import VoiceBank
from bench import checks

RATE = checks.SAMPLE_RATE


def voiced(seconds: float, pitch: float, *, phase: float = 0.0, seed: int = 0) -> npt.NDArray[np.float32]:
    """A speech-like test signal: harmonics of ``pitch`` under a syllable-rate envelope, plus a little noise."""
    t = np.arange(int(seconds * RATE)) / RATE
    envelope = 0.5 * (1.0 - np.cos(2 * np.pi * 3.0 * t))
    signal = sum(np.sin(2 * np.pi * pitch * k * t + phase * k) / k for k in range(1, 12))
    noise = np.random.default_rng(seed).normal(0.0, 0.01, len(t))
    return (0.2 * envelope * signal + noise).astype(np.float32)


def test_log_mel_has_80_bands_and_one_frame_per_hop() -> None:
    mel = checks.log_mel(np.zeros(RATE, np.float32))
    assert mel.shape == (1 + RATE // checks.HOP, checks.N_MELS)
    assert checks.log_mel(np.zeros(10, np.float32)).shape[1] == checks.N_MELS


def test_identical_audio_is_distance_zero() -> None:
    audio = voiced(1.0, 180.0)
    assert checks.mel_distance(audio, audio) == pytest.approx(0.0, abs=1e-6)
    assert checks.check_chunk("a/0", audio, audio).passed


def test_a_different_phase_is_close_and_passes() -> None:
    # Runtimes start the harmonic source with different phases: the waveform differs, the sound does not.
    a, b = voiced(1.5, 180.0), voiced(1.5, 180.0, phase=1.0, seed=1)
    assert float(np.sqrt(np.mean((a - b) ** 2)) / np.sqrt(np.mean(a**2))) > 0.5
    check = checks.check_chunk("a/0", a, b)
    assert check.mel_distance < checks.THRESHOLDS.max_mel_distance / 2
    assert check.passed


def test_duration_steps_are_absorbed_by_the_alignment() -> None:
    a = voiced(2.0, 180.0)
    shifted = np.concatenate([a[: RATE // 2], np.zeros(2 * checks.DURATION_UNIT, np.float32), a[RATE // 2:]])
    check = checks.check_chunk("a/0", a, shifted)
    assert check.sample_diff == 2 * checks.DURATION_UNIT
    assert check.passed


def test_another_pitch_fails() -> None:
    assert not checks.check_chunk("a/0", voiced(1.5, 180.0), voiced(1.5, 260.0)).passed


def test_truncated_or_missing_audio_fails() -> None:
    a = voiced(2.0, 180.0)
    truncated = checks.check_chunk("a/0", a, a[: len(a) // 2])
    assert not truncated.passed and truncated.sample_diff == -(len(a) - len(a) // 2)
    empty = checks.check_chunk("a/0", a, np.zeros(0, np.float32))
    assert not empty.passed and math.isinf(empty.mel_distance)
    verdict, found = checks.compare("x", "ref", {"a/0": a, "a/1": a}, {"a/0": a})
    assert not verdict.passed and verdict.failed == ("a/1",)
    assert [c.key for c in found] == ["a/0", "a/1"]


def test_the_sample_allowance_is_units_or_a_fraction_whichever_is_larger() -> None:
    th = checks.Thresholds(max_sample_units=4, max_sample_fraction=0.03, max_mel_distance=0.6)
    assert th.allowed_samples(24_000) == 4 * checks.DURATION_UNIT
    assert th.allowed_samples(240_000) == 7_200


def test_dtw_follows_the_cheapest_alignment() -> None:
    cost = np.array([[0.0, 1.0, 1.0], [1.0, 0.0, 0.0], [1.0, 1.0, 0.0]])
    assert checks.dtw_distance(cost) == pytest.approx(0.0)
    assert checks.dtw_distance(np.ones((2, 3))) == pytest.approx(1.0)


@pytest.fixture(scope="module")
def ort(tmp_path_factory: pytest.TempPathFactory) -> tuple[OnnxRuntimeBackend, Frontend, Vocab, VoiceBank]:
    model = modelfile.assemble(Path(tmp_path_factory.mktemp("model")))
    backend = OnnxRuntimeBackend(model, PoolShape(1, 2), runtime_defaults=False)
    backend.load()
    frontend = Frontend()
    frontend.load(("en-us",))
    return backend, frontend, Vocab.embedded(), VoiceBank.load(None)


def test_on_the_real_model_a_rerun_passes_and_another_voice_or_speed_fails(
        ort: tuple[OnnxRuntimeBackend, Frontend, Vocab, VoiceBank]) -> None:
    backend, frontend, vocab, voices = ort
    phonemes = frontend.phonemize("Your package arrives today.", "en-us")
    tokens, n = vocab.tokens(phonemes), len(vocab.ids(phonemes))

    def speak(voice: str, speed: float = 1.0) -> npt.NDArray[np.float32]:
        return backend.infer(0, tokens, voices.resolve(voice).style_for(n), speed)

    reference = speak("af_heart")
    rerun = checks.check_chunk("s7/0", reference, speak("af_heart"))
    assert rerun.passed and rerun.sample_diff == 0 and rerun.mel_distance < 1e-6
    assert not checks.check_chunk("s7/0", reference, speak("am_michael")).passed
    assert not checks.check_chunk("s7/0", reference, speak("af_heart", 1.25)).passed
