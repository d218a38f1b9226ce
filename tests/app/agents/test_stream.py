"""Streamed text cut into segments: at natural boundaries, the first clause at once, the same cuts however the text
is split into pieces."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.agents.stream import CLAUSE_AFTER, MAX_SEGMENT, TEXT_PER_STREAM, TextStream
from app.errors import InputTooLarge

REPLY = ("Sure, I can help with that. Your order shipped on Monday; it should arrive by Thursday! "
         "Is there anything else — a return, perhaps? Version 3.5 is out.")


def segments(pieces: list[str], flush: bool = True) -> list[tuple[str, int]]:
    stream = TextStream(4096)
    out: list[tuple[str, int]] = []
    for piece in pieces:
        start = stream.index
        out += [(s, start + k) for k, s in enumerate(stream.feed(piece))]
    if flush:
        start = stream.index
        out += [(s, start + k) for k, s in enumerate(stream.flush())]
    return out


def test_two_clauses_then_sentences() -> None:
    assert [s for s, _ in segments(["Well, yes, " + REPLY])][:3] == ["Well,", "yes,", "Sure, I can help with that."]
    assert [s for s, _ in segments([REPLY])] == [
        "Sure,", "I can help with that.", "Your order shipped on Monday; it should arrive by Thursday!",
        "Is there anything else — a return, perhaps?", "Version 3.5 is out."]


def test_a_boundary_needs_the_space_after_it() -> None:
    stream = TextStream(4096)
    assert stream.feed("Version 3.") == []
    assert stream.feed("5 is out, ") == ["Version 3.5 is out,"]
    assert stream.feed("friends.") == []
    assert stream.flush() == ["friends."] and stream.index == 0


@given(st.lists(st.integers(min_value=1, max_value=len(REPLY) - 1), max_size=40))
def test_where_pieces_break_never_moves_a_cut(cuts: list[int]) -> None:
    edges = [0, *sorted(set(cuts)), len(REPLY)]
    pieces = [REPLY[a:b] for a, b in zip(edges, edges[1:], strict=False)]
    assert segments(pieces) == segments([REPLY])


def test_a_sentence_that_runs_on_is_cut_at_a_clause_then_at_a_space() -> None:
    clauses = "and then, " * 40
    out = [s for s, _ in segments(["Well. So. ", clauses])]
    assert out[:2] == ["Well.", "So."] and all(len(s) <= MAX_SEGMENT for s in out)
    assert CLAUSE_AFTER - 10 <= len(out[2]) <= CLAUSE_AFTER + 10
    words = [s for s, _ in segments(["Hi. ", "word " * 200], flush=False)]
    assert words[1:] and all(len(s) <= MAX_SEGMENT for s in words)


def test_a_flush_starts_a_new_utterance() -> None:
    stream = TextStream(4096)
    assert stream.feed("One, two. Three ") == ["One,", "two."]
    assert stream.index == 2
    assert stream.flush() == ["Three"] and stream.index == 0
    assert stream.feed("Four, ") == ["Four,"]


def test_a_stream_refuses_text_past_its_limit_and_keeps_what_came_before() -> None:
    stream = TextStream(10)
    assert stream.limit == 10 * TEXT_PER_STREAM
    stream.feed("a" * (stream.limit - 5))
    with pytest.raises(InputTooLarge):
        stream.feed("Hello there. ")
    assert stream.feed("Hi. ") == ["a" * (stream.limit - 5) + "Hi."]  # within the limit: taken, the refused not
    assert stream.received == stream.limit - 1
