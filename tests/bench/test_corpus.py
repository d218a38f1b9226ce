"""The benchmark corpus: the study's shape, fixed and versioned, and other files accepted."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from app.text.chunker import MODEL_MAX_TOKENS
from app.text.frontend import Frontend
from app.text.vocab import Vocab
from app.voices import VoiceBank
from bench import corpus

# The corpus is fixed: its text changes only with a new version file, and then this digest changes too.
STUDY16_V2_SHA256 = "312f893ce145fe5b503ed865491356a3ea8b79cf876c5087ee5ab0502702f46d"


def test_the_default_corpus_has_the_studys_shape() -> None:
    found = corpus.load()
    assert found.name == "study16" and found.version == 2
    assert len(found.utterances) == 16
    assert found.counts() == {"short": 8, "medium": 6, "long": 2}
    lengths = [len(u.text) for u in found.utterances]
    assert min(lengths) == 13 and max(lengths) == 523
    by_size = {size: [len(u.text) for u in found.utterances if u.size == size] for size in corpus.SIZES}
    assert max(by_size["short"]) < min(by_size["medium"]) <= max(by_size["medium"]) < min(by_size["long"])
    assert found.shortest().id == "s1"


def test_the_default_corpus_is_fixed() -> None:
    assert corpus.load().sha256 == STUDY16_V2_SHA256


def test_every_voice_exists() -> None:
    names = set(VoiceBank.load(None).names)
    assert {u.voice for u in corpus.load().utterances} <= names


def test_only_the_longest_needs_two_model_chunks() -> None:
    frontend = Frontend()
    frontend.load(("en-us",))
    vocab = Vocab.embedded()
    found = corpus.load()
    tokens = {u.id: len(vocab.ids(frontend.phonemize(u.text, "en-us"))) for u in found.utterances}
    longest = max(found.utterances, key=lambda u: len(u.text))
    assert MODEL_MAX_TOKENS < tokens[longest.id] <= 2 * MODEL_MAX_TOKENS
    assert all(n <= MODEL_MAX_TOKENS for uid, n in tokens.items() if uid != longest.id)


def test_another_corpus_file_is_accepted(tmp_path: Path) -> None:
    path = tmp_path / "mine.json"
    path.write_text(json.dumps({"name": "mine", "version": 3, "utterances": [
        {"id": "a", "size": "short", "voice": "am_michael", "text": "Hello there."},
        {"id": "b", "size": "medium", "text": "A second, somewhat longer sentence for the test."}]}))
    found = corpus.load(path)
    assert (found.name, found.version, len(found.utterances)) == ("mine", 3, 2)
    assert found.utterances[1].voice == "af_heart"
    assert [u.id for u in found.subset(["b"]).utterances] == ["b"]


@pytest.mark.parametrize("utterances, message", [
    ([], "no utterances"),
    ([{"id": "a", "text": "  "}], "empty"),
    ([{"id": "a", "size": "huge", "text": "x"}], "size"),
    ([{"id": "a", "text": "x"}, {"id": "a", "text": "y"}], "unique"),
])
def test_a_malformed_corpus_fails_at_load(tmp_path: Path, utterances: list[dict[str, str]], message: str) -> None:
    path = tmp_path / "bad.json"
    path.write_text(json.dumps({"name": "bad", "utterances": utterances}))
    with pytest.raises(ValueError, match=message):
        corpus.load(path)


def test_a_subset_names_known_utterances_only() -> None:
    with pytest.raises(ValueError, match="no utterance"):
        corpus.load().subset(["s1", "nope"])
