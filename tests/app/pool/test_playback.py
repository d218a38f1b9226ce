"""A request's playback clock: its first chunk is due now, later ones when its listener would run dry."""

from __future__ import annotations

import pytest

from app.pool import StreamPool
from tests.clock import FakeClock


def test_first_chunk_is_due_now_and_later_ones_when_the_audio_runs_out() -> None:
    clock = FakeClock()
    pool = StreamPool(1, margin_s=0.5, clock=clock)
    with pool.playback() as playback:
        assert playback.due() == clock.now
        clock.advance(0.2)
        playback.sent(4.0)  # the first audio left: the player starts now
        assert playback.started == clock.now and pool.playing == 1
        assert playback.due() == pytest.approx(clock.now + 3.5)
        pool.throughput.observe(1.0, 100, 0.0)  # 0.01 s per token
        assert playback.due(tokens=100) == pytest.approx(clock.now + 2.5)
        clock.advance(1.0)
        playback.sent(2.0)
        assert playback.due() == pytest.approx(clock.now - 1.0 + 5.5)  # played out at the start + 6 s
    assert pool.playing == 0


def test_a_first_chunk_credit_counts_it_due_before_it_arrives() -> None:
    clock = FakeClock()
    pool = StreamPool(1, first_credit_s=3.0, clock=clock)
    with pool.playback() as playback:
        assert playback.due() == clock.now - 3.0


def test_a_request_that_never_sent_audio_never_played() -> None:
    pool = StreamPool(1, clock=FakeClock())
    with pool.playback():
        assert pool.playing == 0
    assert pool.playing == 0
