"""Voice names and blends (Kokoro-FastAPI syntax) against the installed voices."""

from __future__ import annotations

import numpy as np
import pytest

from app.errors import InvalidInput
from app.settings import Settings, SettingsError
from app.voices import ALIASES, OPENAI_VOICES, VoiceBank, builtin_aliases


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


def test_subtraction_counts_the_weight_negative(bank: VoiceBank) -> None:
    a, b = bank.resolve("jf_alpha"), bank.resolve("jm_kumo")
    assert np.allclose(bank.resolve("jf_alpha(2)-jm_kumo(1)").style_for(9), 2 * a.style_for(9) - b.style_for(9),
                       atol=1e-5)
    three = bank.resolve("jf_alpha+jf_nezumi-jm_kumo").style_for(9)
    assert np.allclose(three, a.style_for(9) + bank.resolve("jf_nezumi").style_for(9) - b.style_for(9), atol=1e-5)


@pytest.mark.parametrize("expression", ["jf_alpha-jm_kumo", "jf_alpha-jm_kumo(2)", "jf_alpha(1)-jm_kumo(1.5)",
                                        "-jf_alpha", "jf_alpha--jm_kumo", "jf_alpha-"])
def test_weights_that_sum_to_zero_or_less_are_refused(bank: VoiceBank, expression: str) -> None:
    with pytest.raises(InvalidInput) as info:
        bank.resolve(expression)
    assert info.value.param == "voice"
    if expression.count("-") == 1 and not expression.startswith("-") and not expression.endswith("-"):
        assert "sum to" in info.value.message


def test_embedded_voices_get_the_embedded_alias_table(bank: VoiceBank) -> None:
    assert set(bank.aliases) == set(OPENAI_VOICES) and bank.aliases == ALIASES["embedded"]
    assert np.array_equal(bank.resolve("shimmer").style_for(30), bank.resolve("jf_alpha(3)+jf_nezumi(1)").style_for(30))
    assert bank.resolve("onyx").name == "jm_kumo"


def _styles(names: list[str]) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    return {n: rng.standard_normal((510, 1, 256)).astype(np.float32) for n in names}


def test_the_official_voices_get_the_official_alias_table() -> None:
    official = sorted({v for v in ALIASES["official"].values()} | {"af_sky", "zf_xiaobei"})
    bank = VoiceBank(_styles(official), builtin_aliases(set(official)))
    assert bank.aliases == ALIASES["official"]
    assert bank.resolve("fable").british and bank.resolve("echo").name == "am_echo"


def test_other_voices_files_have_no_aliases_and_say_how_to_set_them() -> None:
    bank = VoiceBank(_styles(["xx_one", "xx_two"]), builtin_aliases({"xx_one", "xx_two"}))
    assert bank.aliases == {}
    with pytest.raises(InvalidInput, match="TTS_VOICE_ALIASES"):
        bank.resolve("alloy")


def test_configured_aliases_add_to_and_override_the_builtin_table() -> None:
    bank = VoiceBank.load(None, Settings(voice_aliases="alloy=jm_kumo, narrator=jf_alpha(2)+jm_kumo(1)").alias_table())
    assert bank.resolve("alloy").name == "jm_kumo" and bank.aliases["nova"] == "jf_nezumi"
    assert np.array_equal(bank.resolve("narrator").style_for(5), bank.resolve("jf_alpha(2)+jm_kumo(1)").style_for(5))


@pytest.mark.parametrize("aliases", ["alloy=nobody", "alloy=onyx", "jf_alpha=jm_kumo"])
def test_an_alias_must_name_installed_voices(aliases: str) -> None:
    with pytest.raises(ValueError):
        VoiceBank.load(None, Settings(voice_aliases=aliases).alias_table())


@pytest.mark.parametrize("aliases", ["alloy", "alloy=", "=jf_alpha", "Alloy=jf_alpha", "a b=jf_alpha"])
def test_bad_alias_syntax_fails_at_start_naming_the_setting(aliases: str) -> None:
    with pytest.raises(SettingsError, match="TTS_VOICE_ALIASES"):
        Settings(voice_aliases=aliases)
