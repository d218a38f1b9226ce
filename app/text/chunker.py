"""Split a phoneme string into model chunks at sentence, then clause, then word boundaries.

The chunks depend on the text alone, never on the server's load: the same request is always cut the
same way, so it always gives the same audio.

The model takes at most 510 tokens. Nothing is ever dropped: a piece that fits nowhere else is
cut at a word boundary, and a single word longer than a chunk is cut hard.

The first chunk is small, because a request's first audio waits for all of it: the first
sentence when it fits `FIRST_CHUNK_TOKENS`, else as many of its first clauses as fit, else as many of
its first words (never a lone word when more fit). Later chunks grow: the second within
``second_max`` (by default twice ``first_max``), then each bound twice the one before, up to ``max_tokens``:
synthesis of chunk k+1 runs while chunk k plays, so a chunk a few times as long as the one before keeps playback
fed where a stream runs a few times faster than real time, and ``max_tokens`` bounds how long one
running chunk can keep a new request's first chunk waiting for its stream.

**Paced by the engine's speed.** Where the server knows how fast a listener's chunks are made at the load it admits
(``rate``: seconds of audio the model makes per second, `app.tune.speed`), each later bound is also no longer than the
audio already ahead of the listener can cover: a chunk of t tokens costs (t + `PAD_TOKENS`) / rate to make, and must be
made before the t' tokens already sent play out (less `MARGIN_TOKENS`). On a fast CPU that bound is above the doubling
rule's and the chunks are those of the doubling rule; on a slow one they grow more slowly, so the listener never runs
dry. The rate is fixed for the instance (it never follows the load), so the same request is cut the same way.

**Read ahead at a cut between words** (``read_ahead``, for the languages that need it:
`app.text.languages.Language.reads_ahead`). The model speaks each chunk as a whole utterance: a chunk cut inside a
clause ends on a word lengthened and falling in pitch as if the sentence ended there, and in French, Italian and
Mandarin listeners mishear it. So the model reads `LOOKAHEAD_WORDS` more of the next chunk after it (`lookahead`),
and the audio is cut where that word begins (`app.engine`): the chunk's last word is spoken mid-phrase. Its cost is
counted in the pace.

No chunk is left tiny where the first chunk is cut: every inference costs a fixed part on top of
its tokens (the model pads each chunk with audio the server trims), so a short rest costs nearly as
much as a full chunk. A first sentence whose rest after the first chunk would be shorter than
`MIN_REST` is taken whole instead, up to ``first_max + MIN_REST``.
"""

from __future__ import annotations

import math
import re
from collections import deque
from collections.abc import Sequence

MODEL_MAX_TOKENS = 510
FIRST_CHUNK_TOKENS = 20
"""Bound on a request's first chunk, whose synthesis its first audio waits for: about 1.5 s of speech."""
SECOND_CHUNK_TOKENS = 40
"""Bound on the second chunk; each later bound doubles from it. The second chunk must be made while the first plays:
40 tokens (about 3 s of speech) take a stream less time than the first chunk's 1.5 s where a stream makes two to
three times real time, 60 did not and its listeners stalled (docs/experiments.md)."""
MAX_CHUNK_TOKENS = 120
"""Bound on later chunks: one running chunk holds its stream this long, so a new request's first chunk can wait for
it; a hung-up client's synthesis stops after the chunk in progress."""
PAD_TOKENS = 12
"""What the model's edge padding costs each inference, in tokens of speech: it makes about 0.8 s of silence per chunk
(before and after the speech; `app.silence` trims it at the joins), as long to make as some 12 tokens of speech. A
stream's time is in proportion to the audio it makes, padding included, with almost nothing fixed beside it."""
MARGIN_TOKENS = 3
"""Speech kept in hand when a paced chunk is due (about 0.2 s): the hand-over to the client, the event loop, and the
spread of audio per token between one text and another."""
GROWTH = 1.25
"""How much longer than the first chunk a paced plan's second chunk must be allowed to grow (`min_rate`): below that
rate the chunks cannot outgrow their padding and a listener would stall whatever the plan."""
LOOKAHEAD_WORDS = 1
"""Words of the next chunk the model reads after a chunk cut between two words (module docstring): one was as good as
three (docs/languages.md)."""
MIN_REST = 10
"""Fewest tokens the rest of a first sentence may have once the first chunk is cut from it (module docstring)."""

_FINER = (
    re.compile(r"(?<=[,;:—])\s+"),  # clauses
    re.compile(r"\s+"),  # words
)
_SENTENCE = re.compile(r"(?<=[.!?…])\s+")
SENTENCE_ENDS = ".!?…"
"""What a chunk that ends a sentence ends with."""
CLAUSE_ENDS = ",;:—"
"""What a chunk that ends a clause ends with (any other chunk ends between two words)."""
_ENDS = SENTENCE_ENDS + CLAUSE_ENDS


def chunk(phonemes: str, first_max: int = FIRST_CHUNK_TOKENS, max_tokens: int = MAX_CHUNK_TOKENS,
          second_max: int = SECOND_CHUNK_TOKENS, rate: float = 0.0, read_ahead: bool = False) -> list[str]:
    """Chunks of ``phonemes``: the first at most ``first_max`` characters (or the whole first sentence, where
    cutting it there would leave a rest shorter than `MIN_REST`), the second at most ``second_max`` (0: twice
    ``first_max``), later ones up to ``max_tokens``, each bound twice the one before; with ``rate`` > 0 each later
    bound is also at most what the audio ahead covers at that rate (`paced_bound`), never under half ``first_max``
    (shorter chunks cost their padding for almost no speech); ``read_ahead``: a chunk cut between words costs the
    next word too (module docstring)."""
    max_tokens = min(max_tokens, MODEL_MAX_TOKENS)
    head, rest = first(phonemes, first_max, max_tokens)
    if not head:
        return []
    out = [head]
    limit = 0
    ahead = float(len(head))
    while rest:
        limit = next_bound(limit, first_max, second_max, max_tokens)
        if rate > 0:
            limit = max(min(first_max // 2, limit), min(limit, paced_bound(ahead, rate)))
        piece, rest = take(rest, limit, whole_within=max_tokens)
        out.append(piece)
        if rate > 0:
            read = len(piece) + PAD_TOKENS + (len(_read_ahead(piece, rest)) if read_ahead else 0)
            ahead += len(piece) - read / rate
    return out


def lookahead(chunks: Sequence[str], k: int) -> str:
    """What the model reads after chunk ``k`` so that it speaks the chunk's end mid-phrase (module docstring): the
    first `LOOKAHEAD_WORDS` words of the next chunk, with the space before them, where chunk ``k`` ends between two
    words; nothing at a clause's or sentence's end, or after the last chunk."""
    return _read_ahead(chunks[k], chunks[k + 1]) if k + 1 < len(chunks) else ""


def _read_ahead(piece: str, rest: str) -> str:
    """`lookahead` of a chunk ``piece`` and the text after it; nothing where the word is longer than a first chunk (a
    run with no space, cut hard): reading it would cost as much as a chunk."""
    if not rest.strip() or piece.rstrip()[-1:] in _ENDS:
        return ""
    read = " ".join(rest.split()[:LOOKAHEAD_WORDS])
    return "" if len(read) > FIRST_CHUNK_TOKENS else " " + read


def paced_bound(ahead: float, rate: float) -> int:
    """The longest chunk a listener with ``ahead`` tokens of speech still to play can wait for, where chunks are made
    at ``rate`` seconds of audio per second (its padding, `PAD_TOKENS`, included) and `MARGIN_TOKENS` stay in hand."""
    return math.floor(rate * (ahead - MARGIN_TOKENS) - PAD_TOKENS)


def min_rate(first_max: int = FIRST_CHUNK_TOKENS) -> float:
    """The least rate at which a paced plan's second chunk may be `GROWTH` times its first: the speed a listener needs
    for chunks to outgrow their padding (`app.tune.speed` admits as many listeners as each get it)."""
    return (GROWTH * first_max + PAD_TOKENS) / (first_max - MARGIN_TOKENS)


def next_bound(previous: int, first_max: int, second_max: int, max_tokens: int) -> int:
    """The doubling rule: the bound of the chunk after one cut within ``previous`` (0: after the first chunk, which
    gets ``second_max``, or twice ``first_max`` where that is 0), at most ``max_tokens``."""
    if previous <= 0:
        wanted = second_max or 2 * min(first_max, max_tokens)
    else:
        wanted = 2 * previous
    return max(1, min(max_tokens, MODEL_MAX_TOKENS, wanted))


def first(phonemes: str, first_max: int, max_tokens: int) -> tuple[str, str]:
    """A request's first chunk (empty where there is nothing but whitespace) and the text left after it."""
    max_tokens = min(max_tokens, MODEL_MAX_TOKENS)
    sentences = [p for p in _SENTENCE.split(phonemes.strip()) if p]
    if not sentences:
        return "", ""
    head, rest = _head(sentences[0], min(first_max, max_tokens))
    if rest and len(rest) < MIN_REST and len(sentences[0]) <= max_tokens:
        head, rest = sentences[0], ""
    return head, " ".join(([rest] if rest else []) + sentences[1:])


def take(text: str, limit: int, whole_within: int = 0) -> tuple[str, str]:
    """The next later chunk of ``text`` within ``limit`` characters, and the text left after it.

    Whole sentences while they fit; a sentence longer than the chunk is split at clauses, else at words,
    and a single word longer than a chunk is cut. Called once per chunk, with the bound `chunk` gives it.
    Where the text left would be shorter than `MIN_REST` and all of ``text`` fits ``whole_within``, all of it is
    the chunk: the rest would cost a whole inference's fixed part for a word or two."""
    piece, rest = _cut(text, limit)
    if rest and len(rest) < MIN_REST and len(text.strip()) <= min(whole_within, MODEL_MAX_TOKENS):
        return text.strip(), ""
    return piece, rest


def _cut(text: str, limit: int) -> tuple[str, str]:
    """`take`'s greedy cut within ``limit``, whatever is left."""
    limit = max(1, min(limit, MODEL_MAX_TOKENS))
    pending = deque(p for p in _SENTENCE.split(text.strip()) if p)
    current = ""
    while pending:
        piece = pending.popleft()
        if len(piece) > limit:
            if current:
                pending.appendleft(piece)
                break
            parts = _split_finer(piece)
            if len(parts) > 1:
                pending.extendleft(reversed(parts))
                continue
            # One word longer than a chunk: cut it, never drop it.
            current = piece[:limit]
            pending.appendleft(piece[limit:])
            break
        joined = f"{current} {piece}" if current else piece
        if len(joined) > limit:
            pending.appendleft(piece)
            break
        current = joined
    return current, " ".join(p for p in pending if p)


def _head(sentence: str, limit: int) -> tuple[str, str]:
    """The first chunk of a sentence within ``limit``, and what is left of the sentence."""
    if len(sentence) <= limit:
        return sentence, ""
    for boundary in _FINER:
        parts = [p for p in boundary.split(sentence) if p]
        if len(parts) > 1 and len(parts[0]) <= limit:
            taken = 1
            size = len(parts[0])
            while taken < len(parts) and size + 1 + len(parts[taken]) <= limit:
                size += 1 + len(parts[taken])
                taken += 1
            return " ".join(parts[:taken]), " ".join(parts[taken:])
    return sentence[:limit], sentence[limit:]  # a first word longer than the limit: cut it


def _split_finer(piece: str) -> list[str]:
    """Split at clause boundaries, else word boundaries; one part means there is none."""
    for boundary in _FINER:
        parts = [p for p in boundary.split(piece) if p]
        if len(parts) > 1:
            return parts
    return [piece]
