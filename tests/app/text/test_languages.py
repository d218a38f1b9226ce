"""Which language a request gets, and a clear 400 for one this install cannot read."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from app.errors import InvalidInput
from app.http.server import create_app
from app.settings import Settings
from app.text import languages
from tests.app.http.fake import fake_engine


@pytest.mark.parametrize("value, code", [("a", "a"), ("en-us", "a"), ("EN_US", "a"), ("en", "a"), ("b", "b"),
                                         ("en-gb", "b"), ("es", "e"), ("fr", "f"), ("fr-fr", "f"), ("hi", "h"),
                                         ("it", "i"), ("pt-br", "p"), ("pt", "p"), ("ja", "j"), ("zh", "z"),
                                         ("j", "j"), ("z", "z")])
def test_lang_codes_and_tags_parse(value: str, code: str) -> None:
    assert languages.parse(value) is languages.LANGUAGES[code]


@pytest.mark.parametrize("value", ["", "x", "english", "de", "ko"])
def test_unknown_languages_are_refused(value: str) -> None:
    with pytest.raises(InvalidInput) as info:
        languages.parse(value)
    assert info.value.param == "lang_code"


@pytest.mark.parametrize("name, code, gender", [("af_heart", "a", "female"), ("bm_george", "b", "male"),
                                                ("zm_yunxi", "z", "male"), ("my_voice", None, None),
                                                ("narrator", None, None)])
def test_a_voice_name_says_its_language_and_gender(name: str, code: str | None, gender: str | None) -> None:
    found = languages.of_voice(name)
    assert (found.code if found else None) == code and languages.gender_of(name) == gender


def test_a_language_whose_reader_is_missing_is_a_400_that_says_what_to_install(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    missing = dataclasses.replace(languages.LANGUAGES["j"], modules=("no_such_module_for_the_test",))
    monkeypatch.setitem(languages.LANGUAGES, "j", missing)
    monkeypatch.setitem(languages._NAMES, "j", missing)
    settings = Settings(cache_dir=tmp_path, quiet_window_s=0)
    with TestClient(create_app(settings, engine=fake_engine(settings))) as client:
        response = client.post("/v1/audio/speech", json={"input": "こんにちは", "voice": "jf_alpha"})
        assert response.status_code == 400
        error = response.json()["error"]
        assert error["code"] == "language_unavailable" and "kokoro-cpu-tts[ja]" in error["message"]
        listed = client.get("/v1/audio/voices").json()["languages"]
        assert {"lang_code": "j", "name": "Japanese", "available": False} in listed
        assert client.post("/v1/audio/speech", json={"input": "Hi.", "voice": "jf_alpha", "lang_code": "a"}
                           ).status_code == 200
