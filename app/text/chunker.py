"""Split a phoneme string into model chunks at sentence, then clause, then word boundaries.

The model takes at most 510 tokens. Nothing is ever dropped: a piece that fits nowhere else is
cut at a word boundary, and a single word longer than a chunk is cut hard.

Chunks grow: the first is one sentence (or its first clauses, within ``first_max``) so the
first audio leaves early, and each
later bound doubles up to ``max_tokens``. Synthesis of chunk k+1 runs while chunk k plays, so a
chunk at most twice as long as the one before keeps playback fed at the real-time factors
measured here, where one giant second chunk would stall it.
"""

from __future__ import annotations

import re
from collections import deque

MODEL_MAX_TOKENS = 510

_FINER = (
    re.compile(r"(?<=[,;:—])\s+"),  # clauses
    re.compile(r"\s+"),  # words
)
_SENTENCE = re.compile(r"(?<=[.!?…])\s+")


def chunk(phonemes: str, first_max: int, max_tokens: int) -> list[str]:
    """Chunks of ``phonemes``: the first at most ``first_max`` characters, later ones up to ``max_tokens``."""
    max_tokens = min(max_tokens, MODEL_MAX_TOKENS)
    limit = min(first_max, max_tokens)
    pending = deque(p for p in _SENTENCE.split(phonemes.strip()) if p)
    out: list[str] = []
    current = ""
    while pending:
        piece = pending.popleft()
        if len(piece) > limit:
            if current:
                out.append(current)
                current, limit = "", min(max_tokens, limit * 2)
                pending.appendleft(piece)
                continue
            parts = _split_finer(piece)
            if len(parts) > 1:
                pending.extendleft(reversed(parts))
            else:  # one word longer than a chunk: cut it, never drop it
                out.append(piece[:limit])
                pending.appendleft(piece[limit:])
                limit = min(max_tokens, limit * 2)
            continue
        joined = f"{current} {piece}" if current else piece
        if len(joined) <= limit and (out or not current):
            current = joined
        else:
            out.append(current)
            current, limit = piece, min(max_tokens, limit * 2)
    if current:
        out.append(current)
    return out


def _split_finer(piece: str) -> list[str]:
    """Split at clause boundaries, else word boundaries; one part means there is none."""
    for boundary in _FINER:
        parts = [p for p in boundary.split(piece) if p]
        if len(parts) > 1:
            return parts
    return [piece]
