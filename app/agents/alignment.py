"""Character timings in ElevenLabs' shape, from the words' times the engine gives (`app.timestamps`).

ElevenLabs' sockets send with each piece of audio ``{"chars", "charStartTimesMs", "charDurationsMs"}`` in
milliseconds from the start of that piece: clients (Pipecat, LiveKit) add each piece's span to a running clock and
rebuild words from the characters. The model times words, not characters, so each word's span is shared evenly
among its characters, and the space after a word lasts until the next word starts (the last one until the piece's
audio ends), so the characters of a piece cover its audio exactly.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from app.audio import SAMPLE_RATE
from app.timestamps import WordTime


def characters(words: Sequence[WordTime] | None, *, offset: int, samples: int, source: str = "",
               cursor: int = 0) -> tuple[dict[str, list[object]] | None, int]:
    """The alignment of a piece of ``samples`` samples that starts ``offset`` samples into the audio ``words`` are
    timed in (None where the model gave no times, or the piece has no word), and where the next piece's words are
    looked for in ``source``.

    ``source``: the text the words were read from, searched from ``cursor``: the punctuation written against a word
    (which the model speaks but does not time) joins that word's characters, so that the characters give back the
    text as written ("Hello there," rather than "Hello there")."""
    if not words:
        return None, cursor
    base_ms = offset * 1000 / SAMPLE_RATE
    end_ms = samples * 1000 / SAMPLE_RATE
    chars: list[object] = []
    starts: list[object] = []
    durations: list[object] = []
    for k, word in enumerate(words):
        text = word.word.strip()
        found = source.find(text, cursor) if source and text else -1
        if found >= 0:
            lead = source[cursor:found].strip()
            after = _TRAILING.match(source, found + len(text))
            trail = after.group(0) if after else ""
            cursor = found + len(text) + len(trail)
            text = lead + text + trail
        if not text:
            continue
        start = min(max(word.start_time * 1000 - base_ms, 0.0), end_ms)
        end = min(max(word.end_time * 1000 - base_ms, start), end_ms)
        each = (end - start) / len(text)
        for i, char in enumerate(text):
            chars.append(char)
            starts.append(round(start + i * each))
            durations.append(round(start + (i + 1) * each) - round(start + i * each))
        following = (min(max(words[k + 1].start_time * 1000 - base_ms, end), end_ms) if k + 1 < len(words)
                     else end_ms)
        chars.append(" ")
        starts.append(round(end))
        durations.append(round(following) - round(end))
    return ({"chars": chars, "charStartTimesMs": starts, "charDurationsMs": durations} if chars else None), cursor


_TRAILING = re.compile(r"[^\w\s]*")
