"""``normalization_options`` on the speech request (Kokoro-FastAPI's shape), on a fake engine that speaks one
stretch of samples per vocabulary character of the text it is handed: the options reach the front end, and a bad
one is a 400 before anything is spoken."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from starlette.testclient import TestClient

from app.http.server import create_app
from app.settings import Settings
from app.text.vocab import Vocab
from tests.app.http.fake import SAMPLES_PER_TOKEN, fake_engine

VOCAB = Vocab.embedded()


def tokens(text: str) -> int:
    """What the fake speaks for ``text`` as "phonemes": one stretch per character the model's vocabulary has."""
    return len(VOCAB.ids(text))


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    settings = Settings(cache_dir=tmp_path_factory.mktemp("cache"), quiet_window_s=0, streams=1)
    with TestClient(create_app(settings, engine=fake_engine(settings))) as c:
        yield c


def spoken(client: TestClient, text: str, **body: object) -> int:
    response = client.post("/v1/audio/speech", json={"input": text, "voice": "af_heart", "response_format": "pcm",
                                                     **body})
    assert response.status_code == 200, response.text
    return len(response.content) // (2 * SAMPLES_PER_TOKEN)


def test_english_is_normalized_unless_the_request_turns_it_off(client: TestClient) -> None:
    assert spoken(client, "30 cm") == tokens("30 centimeters")
    assert spoken(client, "30 cm", normalization_options={"normalize": False}) == tokens("30 cm")
    assert spoken(client, "30 cm", normalization_options={"unit_normalization": False}) == tokens("30 cm")
    assert spoken(client, "30 cm", normalization_options=None) == tokens("30 centimeters")


def test_another_language_is_read_as_written(client: TestClient) -> None:
    assert spoken(client, "30 cm", voice="ef_dora") == tokens("30 cm")


@pytest.mark.parametrize(("options", "message"), [
    ({"dates": True}, "unknown normalization option 'dates'"),
    ({"normalize": "yes"}, "must be a boolean"),
    ("off", "must be an object"),
])
def test_a_bad_option_is_a_400_naming_it(client: TestClient, options: object, message: str) -> None:
    response = client.post("/v1/audio/speech", json={"input": "hello", "normalization_options": options})
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert message in error["message"] and error["param"] == "normalization_options"
