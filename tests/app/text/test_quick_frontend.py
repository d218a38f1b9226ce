"""The quick front end (`app.text.frontend.Frontend.load_quick`, ``TTS_QUICK_FRONTEND``): espeak-ng alone answers
while misaki loads, for requests that need no word timings; misaki answers once loaded."""

from __future__ import annotations

import threading
from pathlib import Path

from app.text.frontend import Frontend
from app.text.vocab import Vocab

TEXT = "Welcome back, it is good to see you."


def test_espeak_alone_answers_before_misaki_loads_and_misaki_after(tmp_path: Path) -> None:
    frontend = Frontend(tmp_path / "frontend")
    assert frontend.serving == "none"
    frontend.load_quick("en-us")
    assert frontend.serving == "espeak" and not frontend.loaded
    quick, spoken = frontend.phonemize_words(TEXT, "en-us", quick=True)
    assert spoken == []  # espeak-ng gives no words: no word timings from it
    assert quick and all(Vocab.embedded().known(c) or c.isspace() for c in quick), quick
    assert "wˈɛlk" in quick and not frontend.loaded  # nothing waited for misaki
    full, words = frontend.phonemize_words(TEXT, "en-us", quick=True)
    assert full == quick  # still misaki-less: the quick path again, not a load
    frontend.load(("en-us",))
    assert frontend.serving == "misaki"
    full, words = frontend.phonemize_words(TEXT, "en-us", quick=True)
    assert [w.text for w in words][:2] == ["Welcome", "back"]
    assert full == frontend.phonemize(TEXT, "en-us")


def test_without_quick_and_with_inline_phonemes_a_request_waits_for_misaki(tmp_path: Path) -> None:
    frontend = Frontend(tmp_path / "frontend")
    frontend.load_quick("en-us")
    inline = "Say [Kokoro](/kˈOkəɹO/) now."
    phonemes, _ = frontend.phonemize_words(inline, "en-us", quick=True)  # loads misaki: espeak would read the markup
    assert frontend.loaded and "kˈOkəɹO" in phonemes
    other = Frontend(tmp_path / "other")
    other.load_quick("en-us")
    _, words = other.phonemize_words(TEXT, "en-us")  # without quick: misaki, with words
    assert other.loaded and words


def test_quick_calls_beside_misakis_load_are_serialized_and_all_answer(tmp_path: Path) -> None:
    frontend = Frontend(tmp_path / "frontend")
    frontend.load_quick("en-us")
    loader = threading.Thread(target=frontend.load, args=(("en-us",),))
    loader.start()
    answers = [frontend.phonemize_words(f"{TEXT} Number {i}.", "en-us", quick=True)[0] for i in range(20)]
    loader.join()
    assert all(a.strip() for a in answers) and frontend.serving == "misaki"
