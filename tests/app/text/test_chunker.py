"""Chunking never drops or reorders text and respects every bound."""

from __future__ import annotations

import re

from hypothesis import given, settings
from hypothesis import strategies as st

from app.text.chunker import (
    FIRST_CHUNK_TOKENS,
    MAX_CHUNK_TOKENS,
    MIN_REST,
    MODEL_MAX_TOKENS,
    PAD_TOKENS,
    SECOND_CHUNK_TOKENS,
    chunk,
    lookahead,
    next_bound,
)


def test_first_chunk_is_short_and_later_chunks_grow() -> None:
    text = "həlˈO wˈɜɹld! " + "ˌɪt kˈɔsts fˈIv dˈɑləɹz, ænd fˈɪfti sˈɛnts. " * 30
    chunks = chunk(text, first_max=60, max_tokens=400)
    assert len(chunks[0]) <= 60
    assert chunks[0] == "həlˈO wˈɜɹld!"
    assert all(len(c) <= 400 for c in chunks)
    assert max(len(c) for c in chunks) > 200


def test_first_chunk_is_the_first_sentence_when_it_fits() -> None:
    chunks = chunk("hˈI. ˈaɪm hˈɪɹ. sˈO ɑɹ jˈu.", first_max=30, max_tokens=250)
    assert chunks[0] == "hˈI."  # never two sentences: the first audio waits for all of its chunk


def test_first_chunk_takes_as_many_first_clauses_as_fit() -> None:
    text = "wˈɛl, ˈaɪ θˈɪŋk sˈO, bˌʌt ðə wˈɛðəɹ ɪz tˈɜɹnɪŋ ænd wˈi ʃʊd lˈiv sˈun, bɪfˈɔɹ ɪt ɹˈeɪnz."
    chunks = chunk(text, first_max=30, max_tokens=250)
    assert chunks[0] == "wˈɛl, ˈaɪ θˈɪŋk sˈO,"
    assert len(chunks[0]) <= 30


def test_a_long_first_clause_is_cut_at_a_word_boundary_within_the_bound() -> None:
    words = ["ðə", "kwˈɪk", "bɹˈWn", "fˈɑks", "ʤˈʌmps", "ˈOvəɹ", "ðə", "lˈeɪzi", "dˈɔɡ", "ænd", "ɹˈʌnz", "əwˈeɪ"] * 3
    text = " ".join(words) + "."
    for first_max in (20, 30, 40):
        chunks = chunk(text, first_max=first_max, max_tokens=250)
        head = chunks[0].split(" ")
        assert len(chunks[0]) <= first_max
        assert head == words[:len(head)], "cut inside a word"
        assert len(head) > 1, "a lone word when more fit"
        # Greedy: the next word would not have fitted.
        assert len(chunks[0]) + 1 + len(words[len(head)]) > first_max
        assert " ".join(chunks).replace(" ", "") == text.replace(" ", "")


def test_later_chunks_grow_to_the_bound_and_never_past_it() -> None:
    text = "sˈʌm wˈɜɹdz hˈɪɹ ænd ðˈɛɹ. " * 60
    chunks = chunk(text, first_max=30, max_tokens=120)
    sizes = [len(c) for c in chunks]
    assert sizes[0] <= 30
    assert all(size <= 120 for size in sizes)
    assert max(sizes) > 90
    # Each bound is twice the one before: chunk k+1 is ready before chunk k has played out.
    assert all(size <= min(120, 30 * 2**k) for k, size in enumerate(sizes))


def test_the_second_chunk_may_be_given_its_own_bound_and_later_ones_double_from_it() -> None:
    """``second_max``: a 20-token first chunk followed by a 60-token second is cut into as many chunks as a 30-token
    first chunk doubled. The server's own (`SECOND_CHUNK_TOKENS`, 40) is the plain doubling from 20."""
    text = "wˈʌn tˈu θɹˈi fˈɔɹ fˈIv sˈɪks sˈɛvən ˈeɪt nˈIn tˈɛn ɪlˈɛvən twˈɛlv. " * 40
    chunks = chunk(text, first_max=20, max_tokens=240, second_max=60)
    sizes = [len(c) for c in chunks]
    assert sizes[0] <= 20
    assert 40 < sizes[1] <= 60  # more than the doubled first bound allows
    assert all(size <= min(240, 60 * 2 ** (k - 1)) for k, size in enumerate(sizes[1:], start=1))
    assert max(sizes) > 180
    assert len(chunks) <= len(chunk(text, first_max=30, max_tokens=240, second_max=0))
    assert " ".join(chunks).replace(" ", "") == text.replace(" ", "")
    # 0 is the plain doubling rule, which the server's bounds are; the bound never passes the largest chunk nor the
    # model's limit.
    assert chunk(text, first_max=20, max_tokens=240, second_max=0) != chunk(text, first_max=20, max_tokens=240,
                                                                             second_max=60)
    assert chunk(text, first_max=20, max_tokens=240, second_max=0) == chunk(text, first_max=20, max_tokens=240)
    assert chunk(text) == chunk(text, FIRST_CHUNK_TOKENS, MAX_CHUNK_TOKENS, SECOND_CHUNK_TOKENS)
    assert (FIRST_CHUNK_TOKENS, SECOND_CHUNK_TOKENS, MAX_CHUNK_TOKENS) == (20, 40, 120)
    assert [next_bound(0, 20, 0, 240), next_bound(0, 20, 60, 240), next_bound(60, 20, 60, 240)] == [40, 60, 120]
    assert next_bound(0, 20, 60, 50) == 50 and next_bound(400, 20, 60, 999) == MODEL_MAX_TOKENS


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


def test_a_first_sentence_is_not_cut_to_leave_a_tiny_rest() -> None:
    # 31 characters: cut at 30 it would leave "ju." alone, an inference that costs about 1 CPU-s for 0.1 s of speech.
    sentence = "plˈiz hˈOld wˌIl ˈI kənˈɛkt ju."
    assert len(sentence) == 31
    assert chunk(sentence, first_max=30, max_tokens=120) == [sentence]
    assert chunk(f"{sentence} ænd ðˈɛn sˈʌm mˈɔɹ wˈɜɹdz.", first_max=30, max_tokens=120)[0] == sentence
    # A rest of MIN_REST or more is still cut off: the first chunk keeps its bound.
    longer = "plˈiz hˈOld wˌIl ˈI kənˈɛkt jˈu tə ðə dˈɛsk."
    chunks = chunk(longer, first_max=30, max_tokens=120)
    assert len(chunks) == 2 and len(chunks[0]) <= 30 and len(chunks[1]) >= MIN_REST


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet="abcdə ˈ.,!?;:—", max_size=3000), st.integers(10, 510), st.integers(10, 510))
def test_nothing_is_lost_and_bounds_hold(text: str, first: int, limit: int) -> None:
    chunks = chunk(text, first, limit)
    assert "".join(chunks).replace(" ", "") == text.replace(" ", "")
    bound = min(limit, MODEL_MAX_TOKENS)
    assert all(0 < len(c) <= bound for c in chunks)
    if chunks:
        # The first chunk keeps its bound, or is a whole first sentence at most MIN_REST over it.
        first_sentence = re.split(r"(?<=[.!?…])\s+", text.strip())[0]
        assert len(chunks[0]) <= min(first, bound) or (
            chunks[0] == first_sentence and len(chunks[0]) <= min(first + MIN_REST, bound))


def test_a_later_chunk_is_not_cut_to_leave_a_tiny_rest() -> None:
    """`take` with ``whole_within``: a rest shorter than `MIN_REST` after the cut is taken along where the whole fits;
    otherwise (or without ``whole_within``) the cut stands."""
    from app.text.chunker import take

    text = "sˈi ju əɡˈɛn sˈun, fɹˈɛnd."
    assert take(text, 20) == ("sˈi ju əɡˈɛn sˈun,", "fɹˈɛnd.")
    assert take(text, 20, whole_within=60) == (text, "")
    assert take(text, 20, whole_within=len(text) - 1) == ("sˈi ju əɡˈɛn sˈun,", "fɹˈɛnd.")
    long_rest = text + " ænd ɐnˈʌðəɹ lˈɔŋɡəɹ ɹˈɛst."
    assert take(long_rest, 20, whole_within=120)[0] == "sˈi ju əɡˈɛn sˈun,"


def test_a_chunk_cut_between_words_reads_the_next_word_and_one_cut_at_a_clause_or_a_sentence_none() -> None:
    chunks = ["wˈɛl, ˈaɪ θˈɪŋk", "sˈO, bˌʌt ðə", "wˈɛðəɹ ɪz tˈɜɹnɪŋ.", "ðə stˈeɪʃən,", "ɪz fˈɑɹ."]
    assert [lookahead(chunks, k) for k in range(len(chunks))] == [" sˈO,", " wˈɛðəɹ", "", "", ""]
    # A run with no space in it, cut hard, is not read ahead: it would cost as much as a chunk.
    assert lookahead(["ə lˈɑŋ", "x" * (FIRST_CHUNK_TOKENS + 1) + " wˈɜɹd."], 0) == ""


def test_a_paced_plan_keeps_the_listener_fed_counting_the_word_read_ahead() -> None:
    """Each later chunk, the word it reads ahead included, is made before the audio already sent has played (in
    tokens of speech: a chunk of t tokens costs (t + PAD_TOKENS + the word read ahead) / rate to make)."""
    words = ["ðə", "kwˈɪk", "bɹˈWn", "fˈɑks", "ʤˈʌmps", "ˈOvəɹ", "ðə", "lˈeɪzi", "dˈɔɡ", "ænd", "ɹˈʌnz", "əwˈeɪ"] * 8
    text = " ".join(words) + "."
    for rate in (2.0, 2.4, 3.0):
        chunks = chunk(text, rate=rate, read_ahead=True)
        assert sum(1 for k in range(len(chunks)) if lookahead(chunks, k)) >= 3
        ahead = float(len(chunks[0]))
        for k in range(1, len(chunks)):
            made = (len(chunks[k]) + PAD_TOKENS + len(lookahead(chunks, k))) / rate
            assert made <= ahead, (rate, k, chunks[k])
            ahead += len(chunks[k]) - made
