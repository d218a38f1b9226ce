"""Every Kokoro language through a real server on the real model: each voice speaks its own language."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import numpy as np
import pytest

from app.text import languages
from app.text.frontend import Frontend
from app.voices import VoiceBank
from tests.conftest import LiveServer

SAMPLES = {
    "a": ("af_heart", "Hello there.", "həlˈO"),
    "b": ("bf_emma", "Good evening.", "ɡˈʊd"),
    "e": ("ef_dora", "Hola, amigo.", "ˈola"),
    "f": ("ff_siwis", "Bonjour, madame.", "bɔ̃ʒˈuʁ"),
    "h": ("hf_alpha", "नमस्ते, दोस्त।", "nəmˈʌsteː"),
    "i": ("if_sara", "Ciao, amico.", "ʧˈao"),
    "p": ("pf_dora", "Olá, amigo.", "olˈa"),
    "j": ("jf_alpha", "こんにちは。", "koɲɲiʨiβa"),
    "z": ("zf_xiaobei", "你好，朋友。", "ni↓xau↓"),
}
"""Per language: a voice, a short phrase (about a second of speech: each is synthesized), and what its reader makes
of the phrase's first word."""


def test_every_language_has_a_sample_and_voices() -> None:
    assert set(SAMPLES) == set(languages.LANGUAGES)
    names = VoiceBank.load(None).names
    for code in languages.LANGUAGES:
        assert any(languages.of_voice(n) is languages.LANGUAGES[code] for n in names), code


@pytest.fixture(scope="module")
def frontend() -> Iterator[Frontend]:
    """One front end for the module, as the server has one: each language's reader loads once (English's pipeline
    is shared by both accents, Japanese and Mandarin are read in one process)."""
    shared = Frontend()
    yield shared
    shared.release_languages()


@pytest.mark.parametrize("code", list(SAMPLES))
def test_the_voice_picks_its_languages_reader(frontend: Frontend, code: str) -> None:
    """The engine's choice (voice letter → language) and that language's reader, on the real front end."""
    voice, text, first_word = SAMPLES[code]
    language = languages.of_voice(voice)
    assert language is languages.LANGUAGES[code]
    phonemes, _ = frontend.phonemize_words(text, language.key)
    assert phonemes.startswith(first_word), phonemes


def pcm(server: LiveServer, **fields: object) -> np.ndarray:
    response = httpx.post(f"{server.url}/v1/audio/speech", json={"response_format": "pcm", "stream": False, **fields},
                          timeout=120)
    assert response.status_code == 200, response.text
    return np.frombuffer(response.content, dtype=np.int16)


@pytest.mark.parametrize("code", list(SAMPLES))
def test_each_language_speaks_through_the_server(server: LiveServer, code: str) -> None:
    voice, text, _ = SAMPLES[code]
    audio = pcm(server, input=text, voice=voice)
    seconds = len(audio) / 24000
    assert 0.6 < seconds < 6, seconds
    assert np.abs(audio).max() > 3000  # speech, not silence
    loaded = httpx.get(f"{server.url}/v1/info", timeout=10).json()["languages_loaded"]
    assert languages.LANGUAGES[code].key in loaded


def test_lang_code_overrides_the_voice(server: LiveServer) -> None:
    """An English text spoken by the Japanese voice: read as English with lang_code, as Japanese without."""
    text = "Thank you."
    english = pcm(server, input=text, voice="jf_alpha", lang_code="a")
    assert np.array_equal(english, pcm(server, input=text, voice="jf_alpha", lang_code="en-us"))
    assert not np.array_equal(english, pcm(server, input=text, voice="jf_alpha"))


def test_an_unknown_lang_code_is_a_400(server: LiveServer) -> None:
    response = httpx.post(f"{server.url}/v1/audio/speech", json={"input": "Hi.", "voice": "af_heart",
                                                                 "lang_code": "klingon"}, timeout=30)
    assert response.status_code == 400 and response.json()["error"]["param"] == "lang_code"
