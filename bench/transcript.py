"""The measures of ``python -m bench quality`` on plain inputs: words, word error rate, and inserted pauses.

Text is normalised the same way on both sides before words are compared: lowercase, numbers as words
(``12`` -> ``twelve``, ``10:30`` -> ``ten thirty``, ``3rd`` -> ``third``, so a recogniser that writes digits
costs nothing), hyphens and slashes split words, and every other character that is not a letter, a digit or a
space is dropped (apostrophes too: ``don't`` == ``dont``). The word error rate is the word-level edit distance
(substitutions + deletions + insertions) over the number of reference words.

A pause is a stretch of at least ``min_s`` whose every 10 ms frame is quieter than ``threshold_dbfs`` (RMS,
relative to a full-scale sine's peak of 1.0), strictly inside the sound: the silence before the first loud frame
and after the last is the edges', not a pause. It is placed in the text by the recogniser's word timestamps:
the pause's midpoint falls between two recognised words (by their midpoints), and the alignment of recognised
to reference words gives the stretch of reference text between them. If that stretch has punctuation (a comma,
a full stop...), the text calls for a pause there; if it has none, the pause was inserted. Word timestamps are
approximate (a recognised word often stretches over the silence beside it), so where the pause overlaps one of
those two words, the boundary on that word's other side counts too: punctuation at either is a pause the text
called for. A pause that falls before the first or after the last recognised word, or next to words that align
with no reference word all the way to the edge, is left unplaced.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
from num2words import num2words

_PUNCTUATION = frozenset(",.;:!?…—–()\"“”")
"""Marks after which the text calls for a pause (a dash standing between spaces counts as one)."""
_OPENING = frozenset("(\"“")
"""Marks that open an aside: the text calls for a pause before them, after the word before."""
_SPLIT = re.compile(r"[\s\-/]+")
_DASH = re.compile(r"[—–]")
_TIME = re.compile(r"^(\d{1,2}):(\d{2})$")
_ORDINAL = re.compile(r"^(\d+)(?:st|nd|rd|th)$")
_NUMBER = re.compile(r"^\d+(?:\.\d+)?$")
_DROP = re.compile(r"[^a-z0-9 ]")


@dataclass(frozen=True)
class Word:
    """One normalised word of a text."""

    text: str
    punctuated: bool
    """Punctuation follows it in the text: a pause after it is called for."""


@dataclass(frozen=True)
class TimedWord:
    """One normalised recognised word and when it was spoken."""

    text: str
    start_s: float
    end_s: float


def _spoken(token: str) -> str:
    """A number token as words (``10:30``, ``12``, ``3rd``, ``2.5``); any other token as it is."""
    bare = token.strip("".join(_PUNCTUATION) + "'$%").replace(",", "")  # 1,000
    if match := _TIME.match(bare):
        hours, minutes = int(match.group(1)), int(match.group(2))
        return str(num2words(hours)) + ("" if minutes == 0 else " " + str(num2words(minutes)))
    if match := _ORDINAL.match(bare):
        return str(num2words(int(match.group(1)), to="ordinal"))
    if _NUMBER.match(bare):
        return str(num2words(float(bare) if "." in bare else int(bare)))
    return token


def words(text: str) -> list[Word]:
    """The normalised words of ``text``, each marked with whether punctuation follows it."""
    found: list[Word] = []
    for token in _SPLIT.split(_DASH.sub(" — ", text.lower())):
        if not token:
            continue
        if token[0] in _OPENING and found:
            found[-1] = Word(found[-1].text, True)
        punctuated = token[-1] in _PUNCTUATION
        parts = _DROP.sub("", _SPLIT.sub(" ", _spoken(token))).split()
        if not parts:
            # A mark standing alone (a spaced dash) belongs to the word before it.
            if punctuated and found:
                found[-1] = Word(found[-1].text, True)
            continue
        found.extend(Word(part, punctuated and i == len(parts) - 1) for i, part in enumerate(parts))
    return found


@dataclass(frozen=True)
class Alignment:
    """A minimum edit between a reference word list and a hypothesis."""

    reference_words: int
    substitutions: int
    deletions: int
    insertions: int
    pairs: tuple[tuple[int | None, int | None], ...]
    """(reference index, hypothesis index) in order: both set for a match or a substitution, one None for a
    deletion (no hypothesis word) or an insertion (no reference word)."""

    @property
    def errors(self) -> int:
        return self.substitutions + self.deletions + self.insertions

    @property
    def wer(self) -> float:
        """Errors per reference word; an empty reference scores 0 if nothing was heard, else 1 per word heard."""
        return self.errors / self.reference_words if self.reference_words else float(self.insertions)


def align(reference: Sequence[str], hypothesis: Sequence[str]) -> Alignment:
    """The Levenshtein alignment of two word lists. Among equal-cost paths the walk back takes a match first, then
    a deletion, an insertion, and a substitution last, so equal words stay paired (``a b c`` heard as ``b c d`` is
    ``-a``, ``+d``, not three substitutions) and the result depends on nothing but the words."""
    n, m = len(reference), len(hypothesis)
    cost = np.zeros((n + 1, m + 1), dtype=np.int64)
    cost[:, 0] = np.arange(n + 1)
    cost[0, :] = np.arange(m + 1)
    for i in range(1, n + 1):
        for j in range(1, m + 1):
            diagonal = cost[i - 1, j - 1] + (reference[i - 1] != hypothesis[j - 1])
            cost[i, j] = min(diagonal, cost[i - 1, j] + 1, cost[i, j - 1] + 1)
    pairs: list[tuple[int | None, int | None]] = []
    counts = {"sub": 0, "del": 0, "ins": 0}
    i, j = n, m
    while i or j:
        if i and j and reference[i - 1] == hypothesis[j - 1] and cost[i, j] == cost[i - 1, j - 1]:
            i, j = i - 1, j - 1
            pairs.append((i, j))
        elif i and cost[i, j] == cost[i - 1, j] + 1:
            counts["del"] += 1
            i -= 1
            pairs.append((i, None))
        elif j and cost[i, j] == cost[i, j - 1] + 1:
            counts["ins"] += 1
            j -= 1
            pairs.append((None, j))
        else:
            counts["sub"] += 1
            i, j = i - 1, j - 1
            pairs.append((i, j))
    return Alignment(n, counts["sub"], counts["del"], counts["ins"], tuple(reversed(pairs)))


def differences(reference: Sequence[str], hypothesis: Sequence[str], alignment: Alignment) -> list[str]:
    """Each error, readably: ``ref→heard`` (substituted), ``-ref`` (deleted), ``+heard`` (inserted)."""
    found: list[str] = []
    for r, h in alignment.pairs:
        if r is None and h is not None:
            found.append(f"+{hypothesis[h]}")
        elif h is None and r is not None:
            found.append(f"-{reference[r]}")
        elif r is not None and h is not None and reference[r] != hypothesis[h]:
            found.append(f"{reference[r]}→{hypothesis[h]}")
    return found


def silences(samples: npt.NDArray[np.float32], rate: int, *, threshold_dbfs: float = -40.0, min_s: float = 0.25,
             frame_s: float = 0.01) -> list[tuple[float, float]]:
    """(start, end) seconds of each quiet stretch of at least ``min_s`` inside the sound (see the module doc)."""
    frame = max(1, round(rate * frame_s))
    count = len(samples) // frame
    if count == 0:
        return []
    frames = samples[: count * frame].astype(np.float64).reshape(count, frame)
    loud = np.sqrt(np.mean(frames * frames, axis=1)) >= 10.0 ** (threshold_dbfs / 20.0)
    indices = np.flatnonzero(loud)
    if indices.size == 0:
        return []
    found: list[tuple[float, float]] = []
    quiet_from: int | None = None
    for index in range(int(indices[0]), int(indices[-1]) + 1):
        if not loud[index]:
            quiet_from = index if quiet_from is None else quiet_from
            continue
        if quiet_from is not None and (index - quiet_from) * frame >= min_s * rate:
            found.append((quiet_from * frame / rate, index * frame / rate))
        quiet_from = None
    return found


@dataclass(frozen=True)
class Pause:
    """One pause, and where in the text it fell."""

    start_s: float
    end_s: float
    before: str
    """The recognised word before it ("" when unplaced)."""
    after: str
    """The recognised word after it ("" when unplaced)."""
    punctuated: bool | None
    """Whether the reference text between those words has punctuation; None when the pause could not be placed."""

    @property
    def inserted(self) -> bool:
        return self.punctuated is False


def _aligned(index: int, step: int, by_hypothesis: dict[int, int], limit: int) -> int | None:
    """The reference index of hypothesis word ``index``, or of the nearest aligned one walking by ``step``."""
    while 0 <= index < limit:
        if index in by_hypothesis:
            return by_hypothesis[index]
        index += step
    return None


def place(pauses: Sequence[tuple[float, float]], heard: Sequence[TimedWord], reference: Sequence[Word],
          alignment: Alignment) -> list[Pause]:
    """Each pause with the recognised words around it and whether the reference text calls for it there."""
    by_hypothesis = {h: r for r, h in alignment.pairs if r is not None and h is not None}
    middles = [(w.start_s + w.end_s) / 2.0 for w in heard]

    def punctuated(boundary: int) -> bool | None:
        """Whether the reference text between heard[boundary - 1] and heard[boundary] has punctuation."""
        if not 0 < boundary < len(heard):
            return None
        left = _aligned(boundary - 1, -1, by_hypothesis, len(heard))
        right = _aligned(boundary, 1, by_hypothesis, len(heard))
        if left is None or right is None:
            return None
        # Reference words left..right-1 each end before the boundary: punctuation after any of them (deleted
        # words included) is text between the two heard words.
        return any(reference[r].punctuated for r in range(left, max(right, left + 1)))

    placed: list[Pause] = []
    for start, end in pauses:
        middle = (start + end) / 2.0
        # The pause lies between heard[boundary - 1] and heard[boundary] by the words' midpoints.
        boundary = sum(1 for m in middles if m < middle)
        # The recogniser often stretches a word over the silence next to it (and may drop the word beyond it), so
        # a pause that overlaps a word may belong on that word's other side: with punctuation on either side of a
        # word it overlaps, it is not counted as inserted. This errs towards fewer inserted pauses.
        candidates = [boundary]
        if boundary > 0 and _overlaps(heard[boundary - 1], start, end):
            candidates.append(boundary - 1)
        if boundary < len(heard) and _overlaps(heard[boundary], start, end):
            candidates.append(boundary + 1)
        found = {b: punctuated(b) for b in candidates}
        chosen = next((b for b in candidates if found[b]), next((b for b in candidates if found[b] is not None), None))
        if chosen is None:
            placed.append(Pause(start, end, "", "", None))
        else:
            placed.append(Pause(start, end, heard[chosen - 1].text, heard[chosen].text, found[chosen]))
    return placed


def _overlaps(word: TimedWord, start: float, end: float) -> bool:
    return word.start_s < end and start < word.end_s
