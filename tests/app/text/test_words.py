"""Words with their phoneme spans, and their places on the model chunks' tokens."""

from __future__ import annotations

from dataclasses import dataclass

from app.text import chunker, words
from app.text.frontend import Frontend
from app.text.vocab import Vocab


@dataclass
class Token:
    """What misaki's tokens carry that matters here."""

    text: str
    phonemes: str | None
    whitespace: str


def test_tokens_make_the_phoneme_string_and_words_are_spans_of_it() -> None:
    tokens = [Token("It", "ˌɪt", " "), Token("costs", "kˈɔsts", " "), Token("$", "", ""),
              Token("3", "θɹˈi dˈɑləɹz", ""), Token(",", ",", " "), Token("ok", "ˌOkˈA", "")]
    found, phonemes = words.from_tokens(tokens, offset=10)
    assert phonemes == "ˌɪt kˈɔsts θɹˈi dˈɑləɹz, ˌOkˈA"
    assert [w.text for w in found] == ["It", "costs", "$3", "ok"]  # the unspoken "$" joins its number
    assert all(phonemes[w.start - 10:w.end - 10] == t.phonemes for w, t in zip(found, [tokens[i] for i in (0, 1, 3, 5)],
                                                                                  strict=True))


def test_every_word_lands_on_its_chunks_tokens_even_across_cuts_and_unknown_characters() -> None:
    vocab = Vocab.embedded()
    phonemes = "həlˈO ðˈɛɹ, ðɪs ɪz ə tˈɛst. " + "ɑ" * 50 + " ænd ðə ˈɛnd."  # a "word" longer than a chunk
    spoken = words.of_phonemes(phonemes)
    chunks = chunker.chunk(phonemes, 10, 30)
    placed = words.place(phonemes, spoken, chunks, vocab)
    assert len(placed) == len(chunks) >= 4
    for chunk, in_chunk in zip(chunks, placed, strict=True):
        ids = "".join(c for c in chunk if vocab.known(c))
        for word in in_chunk:
            tokens = "".join(c for c in word.text if vocab.known(c))
            # Exactly its tokens, or the first chunk's part of the word cut across chunks.
            got = ids[word.first:word.end]
            assert got == tokens if len(tokens) <= 30 else tokens.startswith(got)
    flat = [w.text for p in placed for w in p]
    assert flat == [w.text for w in spoken]  # none lost, none twice, in order
    long_word = next(w for p in placed for w in p if w.text.startswith("ɑ"))
    assert long_word.end - long_word.first == 30  # cut across chunks: it ends with the first chunk


def test_the_front_end_offsets_hold_across_its_pieces() -> None:
    text = "Dr. Smith paid $3.50 at 10:30 a.m., then left. " * 12  # over 400 characters: several G2P pieces
    phonemes, found = Frontend().phonemize_words(text, "en-us")
    sentence = ["Dr.", "Smith", "paid", "$3.50", "at", "ten", "thirty", "AM", "then", "left"]  # the time normalized
    assert [w.text for w in found] == sentence * 12
    spans = [phonemes[w.start:w.end] for w in found]
    assert all(span and span == span.strip() for span in spans)
    assert spans[-10:] == spans[:10]  # the same sentence in the last piece: the same phonemes at its spans
