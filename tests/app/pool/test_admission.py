"""Admission: bounded in real time (429 with Retry-After), and new requests held before their first byte while the
players already need the pool's real-time capacity.

Fast: the pool reads a clock the test moves, and each measured "inference" moves it instead of sleeping.
"""

from __future__ import annotations

import asyncio
import math
from contextlib import ExitStack

import pytest

from app.errors import Overloaded
from app.pool import StreamPool
from app.pool.admission import FIRST_REQUEST_S, MAX_QUEUE_WAIT_S
from tests.app.pool.gate import Gate, run, until
from tests.clock import FakeClock


async def _measure(pool: StreamPool, clock: FakeClock, *, seconds: float, audio_s: float) -> None:
    """Four inferences of ``seconds`` each that make ``audio_s`` of audio: the capacity is then measured."""
    for _ in range(4):
        await pool.run(lambda slot: clock.advance(seconds), tokens=10, audio_s=lambda _: audio_s)


def test_max_requests_fixes_the_bound() -> None:
    pool = StreamPool(1, max_requests=2, clock=FakeClock())
    with pool.admit(), pool.admit():
        with pytest.raises(Overloaded) as refused:
            with pool.admit():
                pass
        assert refused.value.retry_after_s >= 1
    assert pool.admitted == 0 and pool.capacity == 2


def test_retry_after_follows_the_mean_request_time() -> None:
    clock = FakeClock()
    pool = StreamPool(1, max_requests=2, clock=clock)
    assert pool.retry_after_s() == FIRST_REQUEST_S  # a guess until a request has ended
    for _ in range(2):
        with pool.admit():
            clock.advance(10.0)
    mean_s = 0.8 * (0.8 * FIRST_REQUEST_S + 0.2 * 10.0) + 0.2 * 10.0
    with pool.admit(), pool.admit():
        with pytest.raises(Overloaded) as refused:
            with pool.admit():
                pass
    assert refused.value.retry_after_s == math.ceil(mean_s * 2)  # two ahead of it, one listener


def test_admission_counts_listeners_in_real_time_not_streams() -> None:
    """One stream at 5 x real time plays five listeners: a fourth concurrent request is admitted (counted in
    streams and a queue of two per stream it was refused), and beyond the listeners requests queue only while
    their expected wait for a place stays within ``MAX_QUEUE_WAIT_S``."""
    async def main() -> None:
        clock = FakeClock()
        pool = StreamPool(1, clock=clock)
        assert pool.listeners == 1  # one per slot until measured
        assert pool.capacity == 1 + max(1, math.floor(MAX_QUEUE_WAIT_S * 1 / FIRST_REQUEST_S))
        await _measure(pool, clock, seconds=0.02, audio_s=0.1)
        assert pool.realtime_capacity == pytest.approx(5.0) and pool.listeners == 5
        for _ in range(10):  # requests of 20 s each: the mean request time approaches 20 s
            with pool.admit():
                clock.advance(20.0)
        mean_s = 20.0 - (20.0 - FIRST_REQUEST_S) * 0.8 ** 10
        queued = math.floor(MAX_QUEUE_WAIT_S * 5 / mean_s)
        assert queued >= 1 and pool.capacity == 5 + queued
        with ExitStack() as admitted:
            for _ in range(5 + queued):
                admitted.enter_context(pool.admit())
            with pytest.raises(Overloaded) as refused:
                admitted.enter_context(pool.admit())
            assert refused.value.retry_after_s == math.ceil(mean_s * (queued + 1) / 5)
        assert pool.admitted == 0

    run(main)


def test_a_stream_slower_than_real_time_still_counts_one_listener() -> None:
    async def main() -> None:
        clock = FakeClock()
        pool = StreamPool(2, clock=clock)
        await _measure(pool, clock, seconds=0.02, audio_s=0.005)  # each stream at a quarter of real time
        assert pool.realtime_capacity == pytest.approx(0.5) and pool.listeners == 2
        info = pool.snapshot()
        assert info["listeners"] == 2 and info["capacity"] == pool.capacity and info["max_requests"] == 0

    run(main)


def test_beyond_realtime_capacity_a_new_request_waits_before_its_first_byte() -> None:
    async def main() -> None:
        clock = FakeClock()
        pool = StreamPool(1, realtime_factor=1.0, clock=clock)
        gate = Gate()
        await _measure(pool, clock, seconds=0.02, audio_s=0.03)  # its audio 1.5 x faster than real time
        assert pool.realtime_capacity == pytest.approx(1.5)
        with pool.playback() as playing:
            playing.sent(2.0)  # one request plays: a second would need 2 audio-s per s
            held = asyncio.create_task(pool.run(gate.job("held")))
            await until(lambda: pool.waiting == 1)
            assert gate.ran == [] and pool.schedule.held_back == 1  # the slot is free, yet the new request waits
            # The playing request's own later chunks still run.
            assert await pool.run(gate.job("later"), playback=playing) == "later"
            assert gate.ran == ["later"] and pool.waiting == 1
        await held  # its synthesis ended: the waiting request starts
        assert gate.ran == ["later", "held"]

    run(main)


def test_realtime_admission_never_holds_a_request_back_while_a_stream_would_idle() -> None:
    """With fewer requests playing than slots a stream has nothing to run between their chunks, so a newcomer starts
    even where the players alone need more than the measured capacity; once every slot has a player, it waits."""
    async def main() -> None:
        clock = FakeClock()
        pool = StreamPool(2, realtime_factor=1.0, clock=clock)
        gate = Gate()
        await _measure(pool, clock, seconds=0.02, audio_s=0.01)  # each stream at half real time: capacity 1
        assert pool.realtime_capacity == pytest.approx(1.0)
        with pool.playback() as one:
            one.sent(2.0)  # one plays; with a second, two would need 2 audio-s per s
            assert await asyncio.wait_for(pool.run(gate.job("second")), 5) == "second"
            assert pool.schedule.held_back == 0
            with pool.playback() as two:
                two.sent(2.0)  # a player per slot: a third waits before its first byte
                third = asyncio.create_task(pool.run(gate.job("third")))
                await until(lambda: pool.waiting == 1)
                assert gate.ran == ["second"] and pool.schedule.held_back == 1
            await third  # one of the two finished: a slot's player is missing again, so it starts
        assert gate.ran == ["second", "third"]

    run(main)


def test_a_request_held_for_realtime_capacity_is_scheduled_once_its_hold_bound_has_passed() -> None:
    """``max_hold_s``: the players may be long inputs that take minutes to finish; past the bound the held request is
    scheduled as if admission were off (ahead of a later chunk due after it), and counted."""
    async def main() -> None:
        clock = FakeClock()
        pool = StreamPool(1, realtime_factor=1.0, max_hold_s=10.0, clock=clock)
        gate = Gate()
        await _measure(pool, clock, seconds=0.02, audio_s=0.01)
        with pool.playback() as playing:
            playing.sent(60.0)  # one long input plays on: without the bound the newcomer would wait for its end
            held = asyncio.create_task(pool.run(gate.job("held")))
            await until(lambda: pool.schedule.held_back == 1)
            clock.advance(9.9)
            assert await pool.run(gate.job("later1"), playback=playing) == "later1"  # its end reruns the schedule
            assert pool.waiting == 1 and pool.schedule.hold_expired == 0
            clock.advance(0.1)
            later = asyncio.create_task(pool.run(gate.job("later2"), playback=playing))
            assert await asyncio.wait_for(held, 5) == "held"
            await later
        assert gate.ran == ["later1", "held", "later2"]
        assert pool.schedule.hold_expired == 1 and pool.snapshot()["hold_expired"] == 1

    run(main)


def test_the_hold_bound_reruns_the_schedule_by_itself() -> None:
    """The timer: with nothing else happening, the held request starts once ``max_hold_s`` has passed (a real, short
    wait: the event loop's own clock runs the timer)."""
    async def main() -> None:
        pool = StreamPool(1, realtime_factor=1.0, max_hold_s=0.05)
        for _ in range(4):
            pool.throughput.observe(0.02, 10, 0.01)
        with pool.playback() as playing:
            playing.sent(60.0)
            assert await asyncio.wait_for(pool.run(lambda slot: "held"), 5) == "held"
        assert pool.schedule.held_back == 1 and pool.schedule.hold_expired == 1

    run(main)


def test_realtime_admission_off_never_holds_a_request_back() -> None:
    async def main() -> None:
        clock = FakeClock()
        pool = StreamPool(1, realtime_factor=0.0, clock=clock)
        await _measure(pool, clock, seconds=0.02, audio_s=0.03)
        with pool.playback() as playing:
            playing.sent(2.0)
            assert await pool.run(lambda slot: "ran") == "ran"
        assert pool.schedule.held_back == 0

    run(main)
