"""Voice names and blends (Kokoro-FastAPI syntax) against the installed voices."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest

from app.errors import InvalidInput
from app.settings import Settings, SettingsError
from app.text import languages
from app.voices import ALIASES, EMBEDDED, EMBEDDED_SHA256, OPENAI_VOICES, VoiceBank, builtin_aliases

SHARED_SUMS = Path(__file__).resolve().parents[3] / "shared" / "voices" / "SHA256SUMS.json"


@pytest.fixture(scope="module")
def bank() -> VoiceBank:
    return VoiceBank.load(None)


def test_the_54_official_voices_ship_and_af_heart_is_the_default(bank: VoiceBank) -> None:
    assert len(bank.names) == 54 and bank.default == "af_heart"
    assert bank.names[0] == "af_heart" or bank.names[0].startswith("af_")  # English first, by language
    assert {languages.of_voice(n).code for n in bank.names} == set(languages.LANGUAGES)  # type: ignore[union-attr]
    assert hashlib.sha256(EMBEDDED.read_bytes()).hexdigest() == EMBEDDED_SHA256


@pytest.mark.skipif(not SHARED_SUMS.is_file(), reason="the voices' per-voice sums live in ../shared/voices")
def test_each_voice_is_the_official_array(bank: VoiceBank) -> None:
    sums = json.loads(SHARED_SUMS.read_text())
    assert sorted(sums) == sorted(bank.names)
    with np.load(EMBEDDED) as archive:
        for name, digest in sums.items():
            assert hashlib.sha256(archive[name].tobytes()).hexdigest() == digest, name


def test_a_corrupt_embedded_file_is_a_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    broken = tmp_path / "voices.npz"
    data = bytearray(EMBEDDED.read_bytes())
    data[len(data) // 2] ^= 0xFF
    broken.write_bytes(bytes(data))
    monkeypatch.setattr("app.voices.EMBEDDED", broken)
    with pytest.raises(ValueError, match="corrupt.*reinstall"):
        VoiceBank.load(None)


@pytest.mark.parametrize("content", [b"", b"not a zip file", b"PK\x03\x04broken"])
def test_an_unreadable_voices_file_is_a_clear_error(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "voices.bin"
    path.write_bytes(content)
    with pytest.raises(ValueError, match="cannot read voices from"):
        VoiceBank.load(path)


def test_a_voices_file_of_the_official_bin_layout_loads(tmp_path: Path, bank: VoiceBank) -> None:
    """The official ``voices-v1.0.bin`` is an uncompressed npz archive under another name."""
    path = tmp_path / "voices-v1.0.bin"
    with np.load(EMBEDDED) as archive, open(path, "wb") as handle:
        np.savez(handle, **{n: archive[n] for n in ("af_heart", "bf_emma", "jf_alpha")})
    other = VoiceBank.load(path)
    assert other.names == ["af_heart", "bf_emma", "jf_alpha"] and other.default == "af_heart"
    assert np.array_equal(other.resolve("bf_emma").style_for(9), bank.resolve("bf_emma").style_for(9))


def test_equal_blend_is_the_mean(bank: VoiceBank) -> None:
    a, b = bank.resolve("af_heart"), bank.resolve("am_michael")
    blend = bank.resolve("af_heart+am_michael")
    assert np.allclose(blend.style_for(20), (a.style_for(20) + b.style_for(20)) / 2, atol=1e-6)


def test_weighted_blend_is_normalized(bank: VoiceBank) -> None:
    a, b = bank.resolve("af_heart"), bank.resolve("am_michael")
    blend = bank.resolve("af_heart(3)+am_michael(1)")
    assert np.allclose(blend.style_for(7), 0.75 * a.style_for(7) + 0.25 * b.style_for(7), atol=1e-6)


def test_style_row_follows_token_count(bank: VoiceBank) -> None:
    voice = bank.resolve("af_heart")
    assert voice.style_for(1).shape == (1, 256)
    assert not np.allclose(voice.style_for(5), voice.style_for(300))
    assert np.allclose(voice.style_for(10_000), voice.style_for(510))


@pytest.mark.parametrize("expression", ["nobody", "af_heart+nobody", "../../etc/passwd", "af_heart(0)",
                                        "af_heart(-1)", "", "+", "AF_HEART", "a" * 500, "+".join(["af_heart"] * 20)])
def test_bad_voices_are_refused_clearly(bank: VoiceBank, expression: str) -> None:
    with pytest.raises(InvalidInput) as info:
        bank.resolve(expression)
    assert info.value.param == "voice"


def test_subtraction_divides_by_the_positive_weights(bank: VoiceBank) -> None:
    a, b, c = (bank.resolve(n).style_for(9) for n in ("af_heart", "am_michael", "af_bella"))
    assert np.allclose(bank.resolve("af_heart-am_michael").style_for(9), a - b, atol=1e-5)
    assert np.allclose(bank.resolve("af_heart(2)-am_michael(1)").style_for(9), (2 * a - b) / 2, atol=1e-5)
    assert np.allclose(bank.resolve("af_heart-am_michael(2)").style_for(9), a - 2 * b, atol=1e-5)
    assert np.allclose(bank.resolve("af_heart+af_bella-am_michael").style_for(9), (a + c - b) / 2, atol=1e-5)


@pytest.mark.parametrize("expression", ["-af_heart", "af_heart--am_michael", "af_heart-"])
def test_a_blend_that_only_subtracts_or_is_malformed_is_refused(bank: VoiceBank, expression: str) -> None:
    with pytest.raises(InvalidInput) as info:
        bank.resolve(expression)
    assert info.value.param == "voice"


def test_a_blend_speaks_its_first_voices_language(bank: VoiceBank) -> None:
    assert bank.resolve("bf_emma+af_heart").language is languages.LANGUAGES["b"]
    assert bank.resolve("ef_dora(2)+af_heart(1)").language is languages.LANGUAGES["e"]
    assert bank.resolve("fable").language is languages.LANGUAGES["b"]


def test_openai_names_are_english_voices(bank: VoiceBank) -> None:
    assert set(bank.aliases) == set(OPENAI_VOICES) and bank.aliases == ALIASES["official"]
    for alias in OPENAI_VOICES:
        assert bank.resolve(alias).language in (languages.LANGUAGES["a"], languages.LANGUAGES["b"]), alias
    assert bank.resolve("echo").name == "am_echo" and bank.resolve("alloy").name == "af_alloy"


def _styles(names: list[str]) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    return {n: rng.standard_normal((510, 1, 256)).astype(np.float32) for n in names}


def test_other_voices_files_have_no_aliases_and_say_how_to_set_them() -> None:
    bank = VoiceBank(_styles(["xx_one", "xx_two"]), builtin_aliases({"xx_one", "xx_two"}))
    assert bank.aliases == {} and bank.default == "xx_one"
    with pytest.raises(InvalidInput, match="TTS_VOICE_ALIASES"):
        bank.resolve("alloy")


def test_configured_aliases_add_to_and_override_the_builtin_table() -> None:
    bank = VoiceBank.load(None, Settings(voice_aliases="alloy=am_adam, narrator=af_heart(2)+am_adam(1)").alias_table())
    assert bank.resolve("alloy").name == "am_adam" and bank.aliases["nova"] == "af_nova"
    assert np.array_equal(bank.resolve("narrator").style_for(5), bank.resolve("af_heart(2)+am_adam(1)").style_for(5))


@pytest.mark.parametrize("aliases", ["alloy=nobody", "alloy=onyx", "af_heart=am_adam"])
def test_an_alias_must_name_installed_voices(aliases: str) -> None:
    with pytest.raises(ValueError):
        VoiceBank.load(None, Settings(voice_aliases=aliases).alias_table())


@pytest.mark.parametrize("aliases", ["alloy", "alloy=", "=af_heart", "Alloy=af_heart", "a b=af_heart"])
def test_bad_alias_syntax_fails_at_start_naming_the_setting(aliases: str) -> None:
    with pytest.raises(SettingsError, match="TTS_VOICE_ALIASES"):
        Settings(voice_aliases=aliases)
