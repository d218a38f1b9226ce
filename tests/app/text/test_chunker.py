"""Chunking never drops or reorders text and respects every bound."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from app.text.chunker import MODEL_MAX_TOKENS, chunk


def test_first_chunk_is_short_and_later_chunks_grow() -> None:
    text = "həlˈO wˈɜɹld! " + "ˌɪt kˈɔsts fˈIv dˈɑləɹz, ænd fˈɪfti sˈɛnts. " * 30
    chunks = chunk(text, first_max=60, max_tokens=400)
    assert len(chunks[0]) <= 60
    assert chunks[0] == "həlˈO wˈɜɹld!"
    assert all(len(c) <= 400 for c in chunks)
    assert max(len(c) for c in chunks) > 200


def test_long_sentence_splits_at_clauses_before_words() -> None:
    clause = "ə lˈɔŋ klˈɔz wɪð mˈɛni wˈɜɹdz ɪn ɪt"
    text = ", ".join([clause] * 20) + "."
    for c in chunk(text, first_max=100, max_tokens=200):
        assert c.endswith(",") or c.endswith(".")


def test_one_enormous_word_is_cut_not_dropped() -> None:
    word = "a" * 1500
    chunks = chunk(word, 100, 510)
    assert "".join(chunks) == word
    assert all(len(c) <= MODEL_MAX_TOKENS for c in chunks)


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet="abcdə ˈ.,!?;:—", max_size=3000), st.integers(10, 510), st.integers(10, 510))
def test_nothing_is_lost_and_bounds_hold(text: str, first: int, limit: int) -> None:
    chunks = chunk(text, first, limit)
    assert "".join(chunks).replace(" ", "") == text.replace(" ", "")
    bound = min(limit, MODEL_MAX_TOKENS)
    assert all(0 < len(c) <= bound for c in chunks)
    if chunks:
        assert len(chunks[0]) <= min(first, bound)
