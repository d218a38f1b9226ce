"""Words with their phonemes, and where they fall in the model chunks.

misaki's G2P returns, with the phoneme string, the tokens it read (a word, a number, a punctuation
mark), each with its phonemes and the whitespace after it; the string is exactly those phonemes and
whitespaces joined. So every spoken token's phonemes are a span of the string (`Word`). The chunker
then cuts the string anew (it splits at whitespace and joins with single spaces, and cuts a word that
fits no chunk), but it never drops or reorders a character that is not whitespace: counting those
characters places every word in its chunk (`place`), as a range of the chunk's model tokens, which is
what the model's per-token durations are counted in (`app.timestamps`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from app.text.vocab import Vocab


@dataclass(frozen=True)
class Word:
    """A spoken word and the span of its phonemes in the phoneme string."""

    text: str
    start: int
    end: int
    """One past the last phoneme character."""


@dataclass(frozen=True)
class Placed:
    """A word in one model chunk: its model tokens ``first`` to ``end`` (exclusive), counted without the pads."""

    text: str
    first: int
    end: int


def from_tokens(tokens: Iterable[Any], offset: int = 0) -> tuple[list[Word], str]:
    """The words among misaki's tokens (``text``, ``phonemes``, ``whitespace``), and the phoneme string they
    make. A token without phonemes (``$`` in ``$3.50``) joins the text of the word it is written against;
    punctuation is spoken (it shapes the prosody) but is not a word."""
    words: list[Word] = []
    out: list[str] = []
    position = offset
    pending = ""
    for token in tokens:
        phonemes = token.phonemes or ""
        text = pending + str(token.text)
        pending = ""
        if not phonemes:
            pending = text if not token.whitespace else ""
        elif any(c.isalnum() for c in text):
            words.append(Word(text, position, position + len(phonemes)))
        out.append(phonemes + str(token.whitespace))
        position += len(phonemes) + len(str(token.whitespace))
    return words, "".join(out)


def of_phonemes(phonemes: str) -> list[Word]:
    """Words of a phoneme string sent as such (``input_format: phonemes``): each run without whitespace."""
    words: list[Word] = []
    start: int | None = None
    for index, char in enumerate(phonemes + " "):
        if char.isspace():
            if start is not None:
                words.append(Word(phonemes[start:index], start, index))
                start = None
        elif start is None:
            start = index
    return words


def place(phonemes: str, words: Sequence[Word], chunks: Sequence[str], vocab: Vocab, *,
          skip: int = 0, dense: Sequence[int] | None = None) -> list[tuple[Placed, ...]]:
    """For each chunk, the words that start in it, as ranges of its model tokens (``vocab.ids(chunk)``).

    ``chunks`` start after the first ``skip`` non-whitespace characters of ``phonemes`` (the chunks before
    them, for a chunk cut while the request streams); words that start there are left out. ``dense`` is
    `dense_index` of ``phonemes``, where the caller places chunk after chunk of one string. A word cut
    across two chunks (longer than a chunk) ends with the first. A word none of whose characters is in
    the vocabulary has no tokens and is left out."""
    # Where the k-th non-whitespace character of the phoneme string went: its chunk, the chunk's model tokens
    # before it, and whether it is a model token itself.
    where: list[tuple[int, int, bool]] = []
    sizes: list[int] = []
    for number, text in enumerate(chunks):
        tokens = 0
        for char in text:
            known = vocab.known(char)
            if not char.isspace():
                where.append((number, tokens, known))
            tokens += known
        sizes.append(tokens)
    placed: list[list[Placed]] = [[] for _ in chunks]
    dense = dense_index(phonemes) if dense is None else dense
    for word in words:
        first = dense[min(word.start, len(phonemes))] - skip
        last = dense[min(word.end, len(phonemes))] - 1 - skip
        if first < 0 or first >= len(where) or last < first:
            continue
        number, start, _ = where[first]
        end_number, before, known = where[min(last, len(where) - 1)]
        end = before + known if end_number == number else sizes[number]
        if end > start:
            placed[number].append(Placed(word.text, start, end))
    return [tuple(p) for p in placed]


def dense_index(phonemes: str) -> list[int]:
    """For each position of ``phonemes`` (and one past its end), how many non-whitespace characters precede it."""
    out = [0] * (len(phonemes) + 1)
    count = 0
    for index, char in enumerate(phonemes):
        out[index] = count
        if not char.isspace():
            count += 1
    out[len(phonemes)] = count
    return out
