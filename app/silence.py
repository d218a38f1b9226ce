"""The model's edge silence, trimmed where chunks join.

Kokoro pads every inference with silence: about 0.27 s before the speech and 0.6–0.75 s after it
(measured on the embedded model, 19–106-token chunks). Played back to back, two chunks left a
second of silence at every join, in the middle of a sentence as much as between sentences, and
a request's first words came a quarter of a second after its first byte. So each chunk keeps
only a short lead-in, and a tail as long as the pause its boundary calls for; the very end of a
response keeps the model's own tail. Cuts are faded over a few milliseconds so that no join
clicks, however loud the model's noise floor is where the cut falls.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from app.text import chunker

SAMPLE_RATE = 24_000
QUIET = 0.01
"""Amplitude below which a sample counts as silence (speech peaks at 0.3–0.6 here)."""
LEAD_S = 0.05
"""Silence kept before a chunk's first sound."""
PAUSE_S = {"sentence": 0.3, "clause": 0.15, "word": 0.05}
"""Silence kept after a chunk's last sound, by the boundary the chunk ends at."""
FADE = 120
"""Samples (5 ms) over which a cut fades in or out."""
SEEK = 120
"""Samples (5 ms) either side of where the durations say a word begins within which `cut_between_words` cuts at the
quietest point: the durations are whole frames of 25 ms."""


def boundary(phonemes: str) -> str:
    """The kind of boundary a chunk of phonemes ends at: ``sentence``, ``clause`` or ``word``."""
    end = phonemes.rstrip()[-1:]
    if end in chunker.SENTENCE_ENDS:
        return "sentence"
    return "clause" if end in chunker.CLAUSE_ENDS else "word"


def trim(audio: npt.NDArray[np.float32], *, pause_s: float | None) -> npt.NDArray[np.float32]:
    """``audio`` with its leading silence cut to `LEAD_S` and, unless ``pause_s`` is None (the end of
    a response), its trailing silence cut to ``pause_s``. Audio with no sound at all is returned as is."""
    return trim_at(audio, pause_s=pause_s)[0]


def trim_at(audio: npt.NDArray[np.float32], *, pause_s: float | None) -> tuple[npt.NDArray[np.float32], int]:
    """`trim`, and how many samples it cut from the front (word timestamps are shifted by that)."""
    loud = np.flatnonzero(np.abs(audio) > QUIET)
    if loud.size == 0:
        return audio, 0
    start = max(0, int(loud[0]) - round(LEAD_S * SAMPLE_RATE))
    end = len(audio) if pause_s is None else min(len(audio), int(loud[-1]) + 1 + round(pause_s * SAMPLE_RATE))
    out = np.array(audio[start:end], dtype=np.float32)
    fade = min(FADE, len(out) // 2)
    if start > 0 and fade:
        out[:fade] *= np.linspace(0.0, 1.0, fade, dtype=np.float32)
    if end < len(audio) and fade:
        out[-fade:] *= np.linspace(1.0, 0.0, fade, dtype=np.float32)
    return out, start


def cut_between_words(audio: npt.NDArray[np.float32], edges: npt.NDArray[np.int64],
                      own: int) -> npt.NDArray[np.float32]:
    """``audio`` up to the end of its first ``own`` tokens, where the model read on into the next chunk's first word
    (`app.text.chunker.lookahead`): cut at the quietest point within `SEEK` of that edge (``edges``: where each token
    begins, `app.timestamps.token_edges`), and faded out there."""
    edge = int(edges[min(own + 1, len(edges) - 1)])
    lo, hi = max(FADE, edge - SEEK), min(len(audio), edge + SEEK)
    if hi <= lo:
        return np.array(audio[:edge], dtype=np.float32)
    loudness = np.convolve(np.abs(audio[lo - FADE // 2:hi + FADE // 2]), np.ones(FADE) / FADE, mode="same")
    at = lo + int(np.argmin(loudness[FADE // 2:FADE // 2 + hi - lo]))
    out = np.array(audio[:at], dtype=np.float32)
    out[-FADE:] *= np.linspace(1.0, 0.0, FADE, dtype=np.float32)
    return out
