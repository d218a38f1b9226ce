"""Dates, times and addresses in Spanish, French, Italian and Brazilian Portuguese (`app.text.localized`): the words
each becomes, what espeak-ng then reads, and text with nothing to rewrite left as the same string.

The phoneme checks run the real front end (espeak-ng through misaki)."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from app.text import localized
from app.text.frontend import Frontend
from app.text.normalize import DEFAULT, OFF, Normalization
from tests.conftest import ROOT

WRITTEN = [
    ("fr-fr", "Rendez-vous le 2026-12-07 à 14:30.", "Rendez-vous le 7 décembre 2026 à 14 heures 30."),
    ("fr-fr", "Ouvert dès 9:00, le 01/03/2027.", "Ouvert dès 9 heures, le 1er mars 2027."),
    ("fr-fr", "Écrivez à jean.dupont@example.fr.", "Écrivez à jean point dupont arobase example point F R."),
    ("fr-fr", "Voir https://example.com/docs.", "Voir example point com barre oblique docs."),
    ("es", "La cita es el 07/12/2026 a las 14:30.", "La cita es el 7 de diciembre de 2026 a las 14 y 30."),
    ("es", "Llega a las 9:00 del 2027-01-15.", "Llega a las 9 en punto del 15 de enero de 2027."),
    ("es", "Escribe a ana_gil@example.es", "Escribe a ana guion bajo gil arroba example punto es"),
    ("it", "Ci vediamo il 2026-12-01 alle 14:05.", "Ci vediamo il primo dicembre 2026 alle 14 e 5."),
    ("it", "Scrivi a luca@example.it", "Scrivi a luca chiocciola example punto it"),
    ("pt-br", "A reunião é em 2026-12-07 às 14:00.", "A reunião é em 7 de dezembro de 2026 às 14 horas."),
    ("pt-br", "Veja www.example.com.br/agenda.", "Veja w w w ponto example ponto com ponto b r barra agenda."),
]
UNCHANGED = [
    ("fr-fr", "Le match a fini 3-2, avec 10/20 de moyenne et 12,50 €."),
    ("es", "Mide 30 cm y pesa 5 kg; el código es 2026-13-45."),
    ("it", "Il 45% dei 1.200 biglietti."),
    ("pt-br", "Custa R$ 45,90 e cabem 300 pessoas."),
]


@pytest.fixture(scope="module")
def frontend() -> Iterator[Frontend]:
    yield Frontend()


@pytest.mark.parametrize(("lang", "text", "expected"), WRITTEN)
def test_each_kind_of_span_is_written_as_the_language_says_it(lang: str, text: str, expected: str) -> None:
    assert localized.rewrite(text, lang, DEFAULT) == expected


@pytest.mark.parametrize(("lang", "text"), UNCHANGED)
def test_text_with_nothing_to_rewrite_is_the_same_string(lang: str, text: str) -> None:
    assert localized.rewrite(text, lang, DEFAULT) == text


def test_the_language_corpora_have_nothing_to_rewrite() -> None:
    """So the per-language benchmark's figures stand as they were measured."""
    for name, key in (("es", "es"), ("fr", "fr-fr"), ("it", "it"), ("pt-br", "pt-br")):
        corpus = json.loads((ROOT / "bench" / "corpus" / "languages" / f"{name}.json").read_text())
        for sentence in corpus["sentences"]:
            assert localized.rewrite(sentence["text"], key, DEFAULT) == sentence["text"], sentence


def test_the_requests_options_turn_it_off_as_in_english() -> None:
    text = "Écrivez à jean@example.fr ou voyez example.fr le 2026-12-07."
    assert localized.rewrite(text, "fr-fr", OFF) == text
    kept_email = localized.rewrite(text, "fr-fr", Normalization(email_normalization=False))
    assert "jean@example.fr" in kept_email and "example point F R le 7 décembre" in kept_email
    kept_url = localized.rewrite(text, "fr-fr", Normalization(url_normalization=False))
    assert "jean arobase example point F R" in kept_url and "voyez example.fr le 7 décembre" in kept_url
    for lang in ("en-us", "hi", "ja", "zh"):  # no rules here: English has its own, the others read as written
        assert localized.rewrite(text, lang, DEFAULT) == text


def test_espeak_reads_the_rewritten_text_as_a_listener_expects(frontend: Frontend) -> None:
    """The phonemes of the text as written are those of the words a listener expects, and differ from what espeak-ng
    made of it as written (the request's options off)."""
    for lang, text, expected in WRITTEN:
        assert frontend.phonemize(text, lang) == frontend.phonemize(expected, lang), (lang, text)
        assert frontend.phonemize(text, lang) != frontend.phonemize(text, lang, OFF), (lang, text)
    french = frontend.phonemize("le 2026-12-07 à 14:30", "fr-fr")
    assert "desˈɑ̃bʁ" in french and ":" not in french  # "décembre", and no colon left for the model to read


@pytest.mark.parametrize(("name", "lang"), [("fr-normalize", "fr-fr"), ("es-normalize", "es")])
def test_the_benchmarks_sets_read_as_the_words_a_listener_expects(frontend: Frontend, name: str, lang: str) -> None:
    """Each item of the benchmark's set (`python -m bench quality --languages --normalization --langs ...`) is
    rewritten to its ``said``, and so gives those words' phonemes."""
    items = json.loads((ROOT / "bench" / "corpus" / "languages" / f"{name}.json").read_text())["sentences"]
    assert len(items) >= 10
    for item in items:
        assert localized.rewrite(item["text"], lang, DEFAULT) == item["said"]
        assert frontend.phonemize(item["text"], lang) == frontend.phonemize(item["said"], lang)
