"""Edge silence is cut to a short lead-in and a boundary's pause, with fades, never into the sound."""

from __future__ import annotations

import numpy as np
import pytest

from app import silence

RATE = silence.SAMPLE_RATE


def _chunk(lead_s: float, sound_s: float, tail_s: float) -> np.ndarray:
    noise = np.random.default_rng(0).normal(0, 0.001, round((lead_s + sound_s + tail_s) * RATE)).astype(np.float32)
    start = round(lead_s * RATE)
    noise[start:start + round(sound_s * RATE)] += 0.3 * np.sin(np.arange(round(sound_s * RATE)) / 7.0)
    return noise


def _quiet_runs(audio: np.ndarray) -> tuple[float, float]:
    loud = np.flatnonzero(np.abs(audio) > silence.QUIET)
    return loud[0] / RATE, (len(audio) - 1 - loud[-1]) / RATE


def test_a_join_keeps_a_short_lead_in_and_the_pause_of_its_boundary() -> None:
    audio = _chunk(0.27, 2.0, 0.7)
    trimmed = silence.trim(audio, pause_s=0.15)
    lead, tail = _quiet_runs(trimmed)
    assert lead == pytest.approx(silence.LEAD_S, abs=0.002)
    assert tail == pytest.approx(0.15, abs=0.002)
    assert len(trimmed) / RATE == pytest.approx(2.0 + silence.LEAD_S + 0.15, abs=0.005)


def test_cuts_fade_so_the_edges_start_and_end_at_zero() -> None:
    trimmed = silence.trim(_chunk(0.27, 1.0, 0.7), pause_s=0.05)
    assert trimmed[0] == 0.0 and trimmed[-1] == 0.0
    assert np.abs(np.diff(trimmed[:silence.FADE])).max() < 0.01


def test_the_end_of_a_response_keeps_its_tail_and_silence_alone_is_kept() -> None:
    audio = _chunk(0.27, 1.0, 0.7)
    kept = silence.trim(audio, pause_s=None)
    lead, tail = _quiet_runs(kept)
    assert lead == pytest.approx(silence.LEAD_S, abs=0.002)
    assert tail == pytest.approx(0.7, abs=0.002)
    quiet = np.zeros(2400, dtype=np.float32)
    assert silence.trim(quiet, pause_s=0.1) is quiet


def test_boundaries() -> None:
    assert silence.boundary("hˈI.") == "sentence"
    assert silence.boundary("wˈɛl,") == "clause"
    assert silence.boundary("ðə kwˈɪk") == "word"
