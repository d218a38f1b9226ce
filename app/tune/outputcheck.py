"""Output checks: does a configuration say the same thing, the same way, as ONNX Runtime on the same model?

Every corpus chunk a configuration synthesizes (in process, with the server's own backend settings) is
compared with ONNX Runtime's audio for the same chunk on two measures:

- **Sample-count difference.** Kokoro decides each phoneme's duration in whole units of 600 samples (25 ms at
  24 kHz); a different runtime may round a duration that sits on a boundary the other way, so small differences
  in whole units are expected. A wrong duration model (a broken graph, a different speed, truncated output)
  shows as a large difference.
- **Log-mel distance.** The waveforms themselves cannot be compared: the decoder's harmonic source starts with
  different phases between runtimes (OpenVINO against ONNX Runtime gives a relative RMS error near 1 on audio
  that sounds the same). So both are turned into 80-band log-mel spectrograms (1024-point FFT, hop 256, within
  80 dB of the reference's peak), aligned with dynamic time warping (which absorbs the 25 ms duration steps
  above), and the distance is the mean, along the alignment, of the per-frame RMS difference in natural-log
  units. Identical audio gives 0.

Thresholds (`THRESHOLDS`), calibrated by comparing OpenVINO with ONNX Runtime over the study16 corpus, beside
negative controls (the figures: docs/performance.md, "Engine records"):

- Run to run, ONNX Runtime is bit-identical, and so is OpenVINO. There is no run-to-run noise to allow for.
- Backend to backend, lengths differ by a few duration units, and not only by rounding flips: the runtimes'
  numerical differences can reach the duration predictor and move one token by several units (not traced
  further). Their log-mel distances stay below those of the noise and voice-swap controls but one chunk.
- Negative controls (ONNX Runtime with something changed): a male voice for a female one or back, white noise,
  speed 1.1 (close once aligned, but shorter), truncated or empty output. Another *female* voice can come as
  close as the backend differences: this check finds broken, truncated, re-timed, noisy or different-speaker
  audio, and is not a test of which of two similar voices is speaking.
- So a chunk passes when its length is within ``max(10 units, 4 %)`` of the reference's and its log-mel distance
  is at most 0.70: each 1.25 x the worst backend difference measured, below every noise control; the one
  voice-swap chunk close enough on log-mel fails on length. Every control still fails as a configuration
  (speed 1.1 on length, in the longer chunks). A configuration passes when every chunk passes; one that fails
  is reported as failing and is not ranked. Re-calibrate when the model, a runtime or the CPU family changes:
  the report prints every configuration's measured differences next to the thresholds, and the run-to-run row
  shows the noise.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

SAMPLE_RATE = 24_000
DURATION_UNIT = 600
"""Samples per duration step of Kokoro's predictor (25 ms)."""
N_FFT = 1024
HOP = 256
N_MELS = 80
LOG_FLOOR = 1e-5
DYNAMIC_RANGE_DB = 80.0
"""Mel magnitudes more than this far below the reference's loudest are clamped: near-silence is not compared."""

FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True)
class Thresholds:
    """When a chunk counts as the same audio as the reference."""

    max_sample_units: int
    """Allowed length difference in whole duration units (600 samples)."""
    max_sample_fraction: float
    """Allowed length difference as a fraction of the reference length (whichever allowance is larger)."""
    max_mel_distance: float
    """Allowed DTW-aligned log-mel distance."""

    def allowed_samples(self, reference_samples: int) -> int:
        return max(self.max_sample_units * DURATION_UNIT, int(self.max_sample_fraction * reference_samples))


THRESHOLDS = Thresholds(max_sample_units=10, max_sample_fraction=0.04, max_mel_distance=0.70)


@dataclass(frozen=True)
class ChunkCheck:
    """One chunk of one configuration against the reference."""

    key: str
    """``<utterance id>/<chunk index>``."""
    reference_samples: int
    samples: int
    mel_distance: float
    passed: bool

    @property
    def sample_diff(self) -> int:
        return self.samples - self.reference_samples

    @property
    def sample_diff_ms(self) -> float:
        return 1000.0 * self.sample_diff / SAMPLE_RATE


@dataclass(frozen=True)
class Verdict:
    """A configuration's checks, summarized."""

    name: str
    reference: str
    passed: bool
    chunks: int
    failed: tuple[str, ...]
    """Keys of the chunks that failed (or are missing)."""
    max_abs_sample_diff: int
    max_mel_distance: float
    mean_mel_distance: float


def _mel_filterbank(n_mels: int = N_MELS, n_fft: int = N_FFT, rate: int = SAMPLE_RATE) -> FloatArray:
    """Triangular filters evenly spaced on the HTK mel scale from 0 Hz to Nyquist."""

    def mel(hz: FloatArray) -> FloatArray:
        return 2595.0 * np.log10(1.0 + hz / 700.0)

    def hz(m: FloatArray) -> FloatArray:
        return 700.0 * (10.0 ** (m / 2595.0) - 1.0)

    bins = np.fft.rfftfreq(n_fft, 1.0 / rate)
    edges = hz(np.linspace(0.0, float(mel(np.array(rate / 2.0))), n_mels + 2))
    lower, centre, upper = edges[:-2, None], edges[1:-1, None], edges[2:, None]
    rising = (bins[None, :] - lower) / (centre - lower)
    falling = (upper - bins[None, :]) / (upper - centre)
    return np.maximum(0.0, np.minimum(rising, falling))


_FILTERS = _mel_filterbank()
_WINDOW = np.hanning(N_FFT + 1)[:-1]


def log_mel(audio: npt.NDArray[np.floating]) -> FloatArray:
    """(frames, 80) natural-log mel magnitudes; audio shorter than one frame is zero-padded."""
    signal = np.asarray(audio, dtype=np.float64).reshape(-1)
    padded = np.pad(signal, (N_FFT // 2, N_FFT // 2 + max(0, N_FFT - len(signal))), mode="constant")
    frames = 1 + (len(padded) - N_FFT) // HOP
    index = np.arange(N_FFT)[None, :] + HOP * np.arange(frames)[:, None]
    spectrum = np.abs(np.fft.rfft(padded[index] * _WINDOW, axis=1))
    mel: FloatArray = np.log(np.maximum(spectrum @ _FILTERS.T, LOG_FLOOR))
    return mel


def _frame_costs(a: FloatArray, b: FloatArray) -> FloatArray:
    """RMS difference over mel bands between every frame of ``a`` and every frame of ``b``."""
    squared = (a * a).sum(1)[:, None] + (b * b).sum(1)[None, :] - 2.0 * (a @ b.T)
    costs: FloatArray = np.sqrt(np.maximum(squared, 0.0) / a.shape[1])
    return costs


def dtw_distance(cost: FloatArray) -> float:
    """Symmetric DTW (diagonal steps weigh 2), normalized by n + m: the mean cost along the best alignment.

    Computed one anti-diagonal at a time: every cell of a diagonal depends only on the two diagonals before it,
    so each diagonal is one vectorized step.
    """
    n, m = cost.shape
    acc = np.full((n + 1, m + 1), np.inf)
    acc[0, 0] = 0.0
    for k in range(2, n + m + 1):
        i = np.arange(max(1, k - m), min(n, k - 1) + 1)
        j = k - i
        c = cost[i - 1, j - 1]
        acc[i, j] = np.minimum(np.minimum(acc[i - 1, j] + c, acc[i, j - 1] + c), acc[i - 1, j - 1] + 2.0 * c)
    return float(acc[n, m] / (n + m))


def mel_distance(reference: npt.NDArray[np.floating], audio: npt.NDArray[np.floating]) -> float:
    """DTW-aligned log-mel distance between two clips (0 for identical audio)."""
    a, b = log_mel(reference), log_mel(audio)
    # The decoder's noise floor differs between runtimes by orders of magnitude in near-silent bands; in log
    # units that would dominate the distance, while no listener hears it. Compare within 80 dB of the peak.
    floor = a.max() - DYNAMIC_RANGE_DB / 20.0 * np.log(10.0)
    return dtw_distance(_frame_costs(np.maximum(a, floor), np.maximum(b, floor)))


def check_chunk(key: str, reference: npt.NDArray[np.floating], audio: npt.NDArray[np.floating],
                thresholds: Thresholds = THRESHOLDS) -> ChunkCheck:
    distance = mel_distance(reference, audio) if len(audio) else math.inf
    diff = abs(len(audio) - len(reference))
    passed = diff <= thresholds.allowed_samples(len(reference)) and distance <= thresholds.max_mel_distance
    return ChunkCheck(key, len(reference), len(audio), distance, passed)


def compare(name: str, reference_name: str, reference: Mapping[str, npt.NDArray[np.floating]],
            audio: Mapping[str, npt.NDArray[np.floating]],
            thresholds: Thresholds = THRESHOLDS) -> tuple[Verdict, list[ChunkCheck]]:
    """Check every reference chunk; a chunk missing from ``audio`` fails."""
    checks = [check_chunk(key, reference[key], audio.get(key, np.zeros(0, np.float32)), thresholds)
              for key in sorted(reference)]
    finite = [c.mel_distance for c in checks if math.isfinite(c.mel_distance)]
    verdict = Verdict(
        name=name, reference=reference_name, passed=bool(checks) and all(c.passed for c in checks),
        chunks=len(checks), failed=tuple(c.key for c in checks if not c.passed),
        max_abs_sample_diff=max((abs(c.sample_diff) for c in checks), default=0),
        max_mel_distance=max((c.mel_distance for c in checks), default=0.0),
        mean_mel_distance=float(np.mean(finite)) if finite else math.inf,
    )
    return verdict, checks
