"""Text that arrives in pieces (a language model's tokens) cut into segments to speak as soon as each is complete.

A voice agent sends a reply as it is written, in pieces that may break mid-word. `TextStream` buffers them and
hands out a segment each time the text reaches a natural boundary, the ones `app.text.chunker` cuts at: a sentence
end (``.!?…``) or a clause mark (``,;:—``) followed by whitespace. Punctuation with no whitespace after it yet is
not a boundary ("3." may become "3.5"), so where a piece ends does not matter: the segments depend on the text and
the flushes alone, never on how the text was split into pieces or when it came, and so the same sequence gives the
same audio.

The first two segments of an utterance (at the start, and after each flush) end at their first boundary, clause or
sentence, so its audio starts as soon as the first clause is written. Later segments end at sentence ends: the
text runs ahead of speech, and a longer segment costs less per audio-second (each inference pays a fixed part).
A sentence that runs on is cut at a clause once it holds `CLAUSE_AFTER` characters, and at a space (or hard) at
`MAX_SEGMENT`, so the buffer never grows without bound; and a stream takes at most `TEXT_PER_STREAM` times
``TTS_MAX_INPUT_CHARS`` in all, the bound every voice-agent protocol puts on streamed text as HTTP puts
``TTS_MAX_INPUT_CHARS`` on one request.
"""

from __future__ import annotations

import re

from app.errors import InputTooLarge

CLAUSE_SEGMENTS = 2
"""Segments of an utterance that end at their first clause mark: the first, so that speech starts, and the second, so
that the next piece is ready before the first clause has played (the rest of a sentence arrives at the writer's
pace, and waiting for all of it left the listener silent for a moment)."""
CLAUSE_AFTER = 200
"""Characters after which a later segment ends at a clause mark rather than wait for the sentence's end."""
MAX_SEGMENT = 400
"""Characters after which a segment is cut with no boundary: at its last space, else hard."""
TEXT_PER_STREAM = 16
"""A stream takes at most this many times ``TTS_MAX_INPUT_CHARS`` of text in all: a long reply, never a flood."""

_SENTENCE = re.compile(r"[.!?…]+[\"'”’)\]]*\s")
_CLAUSE = re.compile(r"[,;:—]+[\"'”’)\]]*\s")


class TextStream:
    """The text of one utterance, fed in pieces. Not thread-safe: one owner feeds it.

    `feed` adds a piece and returns the segments it completed; `flush` returns the rest (the client asked for it
    now, or the input ended) and starts a new utterance. ``index`` counts the segments handed out since the last
    flush: 0 is the utterance's first (which the caller may synthesize with a smaller first chunk). ``max_input_chars``
    (the server's ``TTS_MAX_INPUT_CHARS``) bounds the text fed in all, flushes included, at `TEXT_PER_STREAM` times it.
    """

    def __init__(self, max_input_chars: int) -> None:
        self._buffer = ""
        self.index = 0
        """Segments handed out since the start or the last flush."""
        self.limit = max_input_chars * TEXT_PER_STREAM
        """Characters the stream takes in all."""
        self.received = 0
        """Characters fed so far."""

    def feed(self, piece: str) -> list[str]:
        """The segments ``piece`` completes. Raises `InputTooLarge` (and keeps nothing of ``piece``) where it would take
        the stream past its limit."""
        if self.received + len(piece) > self.limit:
            raise InputTooLarge(f"a stream takes at most {self.limit} characters of text")
        self.received += len(piece)
        self._buffer += piece
        out = []
        while (cut := self._cut()) is not None:
            segment, self._buffer = self._buffer[:cut], self._buffer[cut:]
            if segment.strip():
                out.append(segment.strip())
                self.index += 1
        return out

    def cut(self) -> list[str]:
        """The rest of the buffer as a segment (none if blank), the utterance going on: for a client whose every piece
        is a whole sentence or phrase (ElevenLabs' ``auto_mode``), so that each is spoken as it comes."""
        rest, self._buffer = self._buffer.strip(), ""
        if not rest:
            return []
        self.index += 1
        return [rest]

    def flush(self) -> list[str]:
        """The rest of the buffer as a segment (none if blank); the next segment is an utterance's first again."""
        rest, self._buffer = self._buffer.strip(), ""
        self.index = 0
        return [rest] if rest else []

    def _cut(self) -> int | None:
        """Where the next segment ends in the buffer (the whitespace after its boundary included), or None yet.

        The earliest boundary that qualifies, looked for in the text alone: once the buffer holds it, text added
        after cannot move it, so the cut is where it would be had the text come in one piece."""
        text = self._buffer
        ends = [m.end() for m in _SENTENCE.finditer(text) if text[:m.start()].strip()][:1]
        after = 0 if self.index < CLAUSE_SEGMENTS else CLAUSE_AFTER
        ends += [m.end() for m in _CLAUSE.finditer(text) if m.end() >= after and text[:m.start()].strip()][:1]
        ends = [end for end in ends if end <= MAX_SEGMENT]
        if ends:
            return min(ends)
        if len(text) >= MAX_SEGMENT:
            space = text.rfind(" ", 0, MAX_SEGMENT)
            return space + 1 if text[:max(space, 0)].strip() else MAX_SEGMENT
        return None
