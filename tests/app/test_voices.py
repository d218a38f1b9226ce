"""Voice names and blends (Kokoro-FastAPI syntax) against the installed voices."""

from __future__ import annotations

import numpy as np
import pytest

from app.errors import InvalidInput
from app.voices import VoiceBank


@pytest.fixture(scope="module")
def bank() -> VoiceBank:
    return VoiceBank.load(None)


def test_installed_voices_load(bank: VoiceBank) -> None:
    assert {"jf_alpha", "jm_kumo"} <= set(bank.names)


def test_equal_blend_is_the_mean(bank: VoiceBank) -> None:
    a, b = bank.resolve("jf_alpha"), bank.resolve("jm_kumo")
    blend = bank.resolve("jf_alpha+jm_kumo")
    assert np.allclose(blend.style_for(20), (a.style_for(20) + b.style_for(20)) / 2, atol=1e-6)


def test_weighted_blend_is_normalized(bank: VoiceBank) -> None:
    a, b = bank.resolve("jf_alpha"), bank.resolve("jm_kumo")
    blend = bank.resolve("jf_alpha(3)+jm_kumo(1)")
    assert np.allclose(blend.style_for(7), 0.75 * a.style_for(7) + 0.25 * b.style_for(7), atol=1e-6)


def test_style_row_follows_token_count(bank: VoiceBank) -> None:
    voice = bank.resolve("jf_alpha")
    assert voice.style_for(1).shape == (1, 256)
    assert not np.allclose(voice.style_for(5), voice.style_for(300))
    assert np.allclose(voice.style_for(10_000), voice.style_for(510))


@pytest.mark.parametrize("expression", ["nobody", "jf_alpha+nobody", "../../etc/passwd", "jf_alpha(0)",
                                        "jf_alpha(-1)", "", "+", "JF_ALPHA", "a" * 500, "+".join(["jf_alpha"] * 20)])
def test_bad_voices_are_refused_clearly(bank: VoiceBank, expression: str) -> None:
    with pytest.raises(InvalidInput) as info:
        bank.resolve(expression)
    assert info.value.param == "voice"
