"""Word timestamps: the model's per-token durations turned into the times words are heard.

The timed model (`app.forms.timed`) outputs one duration per input token, in frames of 600 samples
(25 ms), the pads at both ends included; they sum to the chunk's length exactly, and the speed is
already in them (the model divides by it before rounding). So the sound of a chunk's token k spans
frames ``sum(d[:k+1])`` to ``sum(d[:k+2])`` (``d[0]`` is the leading pad). A chunk's audio is then
trimmed at its edges (`app.silence`) and played after the chunks before it: a word's time in the
response is its place in the chunk, less what the trim cut in front, clipped to what the trim kept,
plus the length of everything sent before.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from app.text.words import Placed

SAMPLE_RATE = 24_000
FRAME = 600
"""Samples per duration unit."""


@dataclass(frozen=True)
class WordTime:
    """A word and when it is heard, in seconds from the start of the response's audio."""

    word: str
    start_time: float
    end_time: float

    def public(self) -> dict[str, object]:
        """Kokoro-FastAPI's shape: ``{"word", "start_time", "end_time"}``, times rounded to the millisecond."""
        return {"word": self.word, "start_time": round(self.start_time, 3), "end_time": round(self.end_time, 3)}


def token_edges(durations: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
    """The sample at which each input token's audio begins, and the end of the last: one more than ``durations``
    (the first token is the model's pad)."""
    return np.concatenate([[0], np.cumsum(durations.reshape(-1), dtype=np.int64)]) * FRAME


def word_times(words: Sequence[Placed], durations: npt.NDArray[np.int64], *, cut: int, kept: int,
               offset: int) -> list[WordTime]:
    """When each of a chunk's ``words`` is heard. ``cut``: samples the trim took off the chunk's front;
    ``kept``: samples the trim kept; ``offset``: samples of the response before this chunk."""
    edges = token_edges(durations)
    last = len(edges) - 1
    out = []
    for word in words:
        start = int(edges[min(word.first + 1, last)]) - cut
        end = int(edges[min(word.end + 1, last)]) - cut
        start, end = min(max(start, 0), kept), min(max(end, 0), kept)
        out.append(WordTime(word.text, (offset + start) / SAMPLE_RATE,
                            (offset + end) / SAMPLE_RATE))
    return out
