"""Admission: as many listeners as the pace allows start at once, a request whose first audio would come soon waits
for a place, and every other one is refused at once with a Retry-After of when a place frees.

Fast: the pool reads a clock the test moves, and each measured "inference" moves it instead of sleeping.
"""

from __future__ import annotations

import asyncio
from contextlib import ExitStack

import pytest

from app.errors import Overloaded
from app.pool import FIRST_AUDIO_BOUND_S, StreamPool
from app.pool.admission import FIRST_REQUEST_S
from tests.app.pool.gate import Gate, run, until
from tests.clock import FakeClock


def _priced(pool: StreamPool, seconds_per_token: float) -> None:
    """The measured seconds per token a queued request's wait is priced with."""
    pool.throughput.seconds_per_token = seconds_per_token


def test_max_requests_admits_that_many_whatever_their_wait() -> None:
    """An operator who would rather queue than refuse: three admitted with one listener and nothing measured (where
    admission in real time refuses the second), the fourth refused."""
    pool = StreamPool(1, listeners=1, max_requests=3, clock=FakeClock())
    with pool.admit(), pool.admit(), pool.admit():
        with pytest.raises(Overloaded) as refused:
            with pool.admit():
                pass
        assert refused.value.retry_after_s >= 1
    assert pool.admitted == 0 and pool.capacity == 3


def test_the_listeners_start_at_once_and_the_next_request_is_refused_while_its_wait_is_unknown() -> None:
    """Beyond the listeners nothing is known of when a place frees (no request has started): 429 at once, with the
    mean request's time as its Retry-After."""
    pool = StreamPool(2, listeners=3, clock=FakeClock())
    assert pool.listeners == 3 and pool.capacity == 3
    with ExitStack() as admitted:
        for _ in range(3):
            admitted.enter_context(pool.admit())
        with pytest.raises(Overloaded) as refused:
            admitted.enter_context(pool.admit())
        assert refused.value.retry_after_s == FIRST_REQUEST_S
    assert pool.admitted == 0


def test_a_request_waits_only_while_its_first_audio_comes_within_the_bound() -> None:
    """One listener synthesizing with 10 tokens left at 0.05 s per token: a place frees in 0.5 s, and the newcomer's
    own 20-token first chunk takes 1 s more, within the bound: it is admitted. A second newcomer would wait for the
    same request's place after the first: refused, with a Retry-After of when that place frees."""
    async def main() -> None:
        clock = FakeClock()
        pool = StreamPool(1, listeners=1, clock=clock)
        _priced(pool, 0.05)
        gate = Gate()
        with pool.admit() as ticket, pool.playback() as playing:
            await pool.run(gate.job("first"), playback=playing)
            assert ticket.started
            ticket.remaining_tokens = 10
            assert pool.capacity == 2
            with pool.admit() as queued:
                assert not queued.started
                with pytest.raises(Overloaded) as refused:
                    with pool.admit():
                        pass
                assert refused.value.retry_after_s == 1
            ticket.remaining_tokens = int(FIRST_AUDIO_BOUND_S / 0.05)  # now its place frees too late
            assert pool.capacity == 1
            with pytest.raises(Overloaded):
                with pool.admit():
                    pass
        assert pool.admitted == 0

    run(main)


def test_a_queued_request_starts_when_a_place_frees_not_when_a_slot_does() -> None:
    """Two slots, one listener: the queued request's first chunk waits although a slot is free, while the listener's
    own later chunks run; it starts once the listener's synthesis has ended."""
    async def main() -> None:
        clock = FakeClock()
        pool = StreamPool(2, listeners=1, clock=clock)
        _priced(pool, 0.01)
        gate = Gate()

        async def newcomer() -> str:
            with pool.admit():
                with pool.playback() as clock_:
                    return await pool.run(gate.job("held"), playback=clock_)

        with pool.admit() as ticket:
            with pool.playback() as playing:
                await pool.run(gate.job("first"), playback=playing)
                playing.sent(2.0)
                ticket.remaining_tokens = 20
                held = asyncio.create_task(newcomer())
                await until(lambda: pool.waiting == 1)
                assert pool.schedule.free == 2 and pool.schedule.held_back == 1
                assert await pool.run(gate.job("later"), playback=playing) == "later"
                assert gate.ran == ["first", "later"] and pool.waiting == 1
            assert await asyncio.wait_for(held, 5) == "held"  # its synthesis ended: the place is free
        assert gate.ran == ["first", "later", "held"]

    run(main)


def test_a_request_held_for_a_place_is_scheduled_once_its_hold_bound_has_passed() -> None:
    """``max_hold_s``: the estimate may be wrong (a long input left); past the bound the held request is scheduled all
    the same, and counted."""
    async def main() -> None:
        clock = FakeClock()
        pool = StreamPool(1, listeners=1, max_hold_s=10.0, clock=clock)
        _priced(pool, 0.01)
        gate = Gate()

        async def newcomer() -> str:
            with pool.admit():
                return await pool.run(gate.job("held"))

        with pool.admit() as ticket, pool.playback() as playing:
            await pool.run(gate.job("first"), playback=playing)
            ticket.remaining_tokens = 5
            held = asyncio.create_task(newcomer())
            await until(lambda: pool.schedule.held_back == 1)
            clock.advance(9.9)
            assert await pool.run(gate.job("later1"), playback=playing) == "later1"  # its end reruns the schedule
            assert pool.waiting == 1 and pool.schedule.hold_expired == 0
            clock.advance(0.1)
            later = asyncio.create_task(pool.run(gate.job("later2"), playback=playing))
            assert await asyncio.wait_for(held, 5) == "held"
            await later
        assert gate.ran == ["first", "later1", "held", "later2"]
        assert pool.schedule.hold_expired == 1 and pool.snapshot()["hold_expired"] == 1

    run(main)


def test_runs_outside_admission_are_never_held() -> None:
    """The engine's own runs (a test's, the tuner's) have no admission ticket: nothing to wait for."""
    async def main() -> None:
        pool = StreamPool(1, listeners=1, clock=FakeClock())
        with pool.admit() as ticket, pool.playback() as playing:
            await pool.run(lambda slot: "first", playback=playing)
            assert ticket.started and pool.admission.started == 1
        assert await pool.run(lambda slot: "ran") == "ran"
        assert pool.schedule.held_back == 0

    run(main)


def test_a_request_asked_again_synthesizes_in_its_place_again() -> None:
    """`app.retry` streams a request anew after its synthesis ended in a failure: the playback it opens takes its place
    again, and closing it frees the place."""
    async def main() -> None:
        pool = StreamPool(1, listeners=1, clock=FakeClock())
        with pool.admit() as ticket:
            with pool.playback():
                await pool.run(lambda slot: "first")
            assert ticket.ended
            with pool.playback():
                assert not ticket.ended and pool.admission.started == 1
            assert pool.admission.started == 0

    run(main)
