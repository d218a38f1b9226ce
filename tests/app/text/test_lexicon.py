"""The lexicon as memory-mapped tries: the same phonemes as misaki's dicts, built once, damage survived.

The tries are built once for the module, as the image bakes them (``python -m app.text.lexicon DIR``): each build
reads misaki's dicts again, which costs seconds."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from app.text import lexicon
from app.text.frontend import Frontend

SENTENCES = [
    "I read the book yesterday, and I will read it again tomorrow.",
    "He used to live near the lead mine; they used the lead to make live bullets.",
    "Dr. Smith paid $1,234.56 on March 3rd, 2021 at 4:30 PM for 12 widgets.",
    "The wind was too strong to wind the sail; does the doe close the close gate?",
    "MIT and NASA's JPL, e.g. the U.S. labs, publish PDFs and APIs.",
    "Colour, favourite, honour: British spellings, and an unknownish wordzz.",
]


@pytest.fixture(scope="module")
def frontends(tmp_path_factory: pytest.TempPathFactory) -> tuple[Frontend, Frontend, Path]:
    """misaki's dicts, and the tries baked into a folder (both accents) by the image build's command."""
    directory = tmp_path_factory.mktemp("lexicon")
    assert lexicon.main([str(directory)]) == 0
    dicts, tries = Frontend(), Frontend(directory)
    for frontend in (dicts, tries):
        frontend.load(("en-us", "en-gb"))
    return dicts, tries, directory


@pytest.mark.parametrize("lang", ["en-us", "en-gb"])
def test_the_tries_give_the_same_phonemes_as_misakis_dicts(frontends: tuple[Frontend, Frontend, Path],
                                                           lang: str) -> None:
    dicts, tries, _ = frontends
    for sentence in SENTENCES:
        assert tries.phonemize(sentence, lang) == dicts.phonemize(sentence, lang)


def test_the_tries_are_small_and_opened_not_rebuilt(frontends: tuple[Frontend, Frontend, Path]) -> None:
    _, _, directory = frontends
    built = lexicon.files(directory)
    assert len(built) == 4  # golds and silvers, US and GB
    assert sum(p.stat().st_size for p in built) < 10_000_000
    stamps = {p: p.stat().st_mtime_ns for p in built}
    again = lexicon.load(False, directory)
    assert {p: p.stat().st_mtime_ns for p in built} == stamps
    assert again.golds["hello"] and "hello" in again.golds and again.golds.get("notawordatall") is None
    assert isinstance(again.golds["read"], dict) and "DEFAULT" in again.golds["read"]


def test_a_damaged_trie_is_rebuilt(frontends: tuple[Frontend, Frontend, Path], tmp_path: Path) -> None:
    for built in lexicon.files(frontends[2]):
        if built.name.startswith("lexicon-us-"):
            shutil.copy(built, tmp_path)
    (golds,) = tmp_path.glob("lexicon-us-*-golds.marisa")
    golds.write_bytes(b"garbage")
    rebuilt = lexicon.load(False, tmp_path)
    assert golds.stat().st_size > 100_000 and rebuilt.golds["hello"]  # built again, in place


def test_tries_baked_at_build_are_mapped_and_nothing_is_built(frontends: tuple[Frontend, Frontend, Path],
                                                              tmp_path: Path) -> None:
    """The image bakes the tries (python -m app.text.lexicon DIR, as the module's fixture did); a start maps them
    read-only."""
    dicts, _, baked = frontends
    assert len(lexicon.files(baked)) == 4  # golds and silvers, US and GB
    baked.chmod(0o555)
    try:
        writable = tmp_path / "writable"
        frontend = Frontend(writable, baked)
        frontend.load(("en-us", "en-gb"))
        assert not writable.exists() or not lexicon.files(writable)
        assert set(lexicon.files(baked)) <= set(frontend.files())
        for lang in ("en-us", "en-gb"):
            assert frontend.phonemize(SENTENCES[0], lang) == dicts.phonemize(SENTENCES[0], lang)
    finally:
        baked.chmod(0o755)
