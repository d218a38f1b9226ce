"""The pool hands slots out by deadline, never starves an overdue chunk, and forgets cancelled waiters.

Fast: the "inferences" are functions that block a worker thread until the test lets them go, so the
order the pool grants its slot in is observed directly.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Awaitable, Callable

import pytest

from app.errors import Overloaded
from app.pool import Playback, StreamPool


class Gate:
    """A blocking function that holds its slot until `open` is called; records who ran, in order."""

    def __init__(self) -> None:
        self.ran: list[str] = []
        self.slots: dict[str, int] = {}
        """The slot each job ran on."""
        self._events: dict[str, threading.Event] = {}

    def job(self, name: str, *, hold: bool = False) -> Callable[[int], str]:
        event = self._events.setdefault(name, threading.Event())
        if not hold:
            event.set()

        def run(slot: int) -> str:
            self.ran.append(name)
            self.slots[name] = slot
            event.wait(10)
            return name

        return run

    def open(self, name: str) -> None:
        self._events[name].set()


async def _until(check: Callable[[], bool], timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached")
        await asyncio.sleep(0.005)


def _playing(pool: StreamPool, *, started_ago: float, sent_s: float) -> Playback:
    """A request whose first audio left ``started_ago`` seconds ago, with ``sent_s`` seconds sent since."""
    clock = pool.playback().__enter__()
    clock.sent(sent_s)
    assert clock.started is not None
    clock.started -= started_ago
    return clock


def _run(coro: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(coro())  # type: ignore[arg-type]


def _order(*, credit_s: float = 0.0, started_ago: float = 0.0, sent_s: float = 10.0) -> list[str]:
    """One slot, held; a later chunk queues (by default with 10 s of slack), then a new request's first chunk."""
    ran: list[str] = []

    async def main() -> None:
        pool = StreamPool(1, 8, margin_s=1.0, first_credit_s=credit_s)
        gate = Gate()
        busy = asyncio.create_task(pool.run(gate.job("busy", hold=True)))
        await _until(lambda: pool.busy == 1)
        slack = _playing(pool, started_ago=started_ago, sent_s=sent_s)
        later = asyncio.create_task(pool.run(gate.job("later"), clock=slack))
        await _until(lambda: pool.waiting == 1)
        with pool.playback() as fresh:
            first = asyncio.create_task(pool.run(gate.job("first"), clock=fresh))
            await _until(lambda: pool.waiting == 2)
            gate.open("busy")
            await asyncio.gather(busy, later, first)
        ran.extend(gate.ran)

    _run(main)
    return ran


def test_a_later_chunk_with_slack_yields_to_a_new_first_chunk() -> None:
    assert _order() == ["busy", "first", "later"]


def test_a_later_chunk_without_slack_goes_before_a_new_first_chunk() -> None:
    # The control that shows the test above can fail: its listener runs dry in 0.5 s, under the 1 s margin.
    assert _order(started_ago=2.0, sent_s=2.5) == ["busy", "later", "first"]


def test_an_overdue_chunk_is_not_starved_by_new_first_chunks() -> None:
    async def main() -> None:
        pool = StreamPool(1, 16, margin_s=1.0)
        gate = Gate()
        busy = asyncio.create_task(pool.run(gate.job("busy", hold=True)))
        await _until(lambda: pool.busy == 1)
        # Its listener ran out 3 s ago (5 s since the first byte, 2 s of audio sent).
        overdue = _playing(pool, started_ago=5.0, sent_s=2.0)
        late = asyncio.create_task(pool.run(gate.job("overdue"), clock=overdue))
        await _until(lambda: pool.waiting == 1)
        firsts = []
        for n in range(5):
            clock = pool.playback().__enter__()
            firsts.append(asyncio.create_task(pool.run(gate.job(f"first{n}"), clock=clock)))
        await _until(lambda: pool.waiting == 6)
        gate.open("busy")
        await asyncio.gather(busy, late, *firsts)
        assert gate.ran[:2] == ["busy", "overdue"]

    _run(main)


def test_equal_deadlines_go_to_the_older_request() -> None:
    async def main() -> None:
        pool = StreamPool(1, 8, margin_s=0.0)
        gate = Gate()
        busy = asyncio.create_task(pool.run(gate.job("busy", hold=True)))
        await _until(lambda: pool.busy == 1)
        older = _playing(pool, started_ago=0.0, sent_s=3.0)
        newer = _playing(pool, started_ago=0.0, sent_s=3.0)
        newer.started = older.started
        second = asyncio.create_task(pool.run(gate.job("newer"), clock=newer))
        await _until(lambda: pool.waiting == 1)
        first = asyncio.create_task(pool.run(gate.job("older"), clock=older))
        await _until(lambda: pool.waiting == 2)
        gate.open("busy")
        await asyncio.gather(busy, first, second)
        assert gate.ran == ["busy", "older", "newer"]

    _run(main)


def test_a_disconnected_clients_chunk_leaves_the_queue() -> None:
    async def main() -> None:
        pool = StreamPool(1, 8)
        gate = Gate()
        busy = asyncio.create_task(pool.run(gate.job("busy", hold=True)))
        await _until(lambda: pool.busy == 1)
        gone = asyncio.create_task(pool.run(gate.job("gone")))
        await _until(lambda: pool.waiting == 1)
        gone.cancel()
        with pytest.raises(asyncio.CancelledError):
            await gone
        assert pool.waiting == 0
        gate.open("busy")
        await busy
        assert await pool.run(gate.job("next")) == "next"
        assert gate.ran == ["busy", "next"]
        assert pool.busy == 0

    _run(main)


def test_a_slot_handed_to_a_waiter_cancelled_in_the_same_instant_is_passed_on() -> None:
    async def main() -> None:
        pool = StreamPool(1, 8)
        gate = Gate()
        slot = pool._free.pop()  # held by an inference that is about to end
        gone = asyncio.create_task(pool.run(gate.job("gone")))
        after = asyncio.create_task(pool.run(gate.job("after")))
        await _until(lambda: pool.waiting == 2)
        # The slot is handed to `gone` and `gone` is cancelled before it resumes: the race a client
        # hanging up at the moment its turn comes makes.
        pool._release(slot)
        gone.cancel()
        await asyncio.gather(after, gone, return_exceptions=True)
        assert gate.ran == ["after"]
        assert pool.busy == 0 and pool.waiting == 0 and len(pool._free) == 1

    _run(main)


def test_first_chunk_is_due_now_and_later_ones_when_the_audio_runs_out() -> None:
    async def main() -> None:
        pool = StreamPool(1, 8, margin_s=0.5)
        with pool.playback() as clock:
            assert abs(clock.due() - time.monotonic()) < 0.05
            clock.sent(4.0)
            assert clock.started is not None
            assert clock.due() == pytest.approx(clock.started + 3.5)
            pool.seconds_per_token = 0.01
            assert clock.due(tokens=100) == pytest.approx(clock.started + 2.5)
            assert pool.playing == 1
        assert pool.playing == 0

    _run(main)


def test_beyond_realtime_capacity_a_new_request_waits_before_its_first_byte() -> None:
    async def main() -> None:
        pool = StreamPool(1, 8, realtime_factor=1.0)
        gate = Gate()
        # Measure: each inference makes its audio 1.5 x faster than real time on the one slot.
        for _ in range(4):
            await pool.run(lambda slot: time.sleep(0.02), tokens=10, audio_s=lambda _: 0.03)
        capacity = pool.realtime_capacity
        assert capacity is not None and 0.1 < capacity <= 1.5  # at most 1.5: sleeps run long, never short
        with pool.playback() as playing:
            playing.sent(2.0)  # one request plays: a second would need 2 audio-s per s
            held = asyncio.create_task(pool.run(gate.job("held")))
            await _until(lambda: pool.waiting == 1)
            await asyncio.sleep(0.05)
            assert gate.ran == [] and pool.held_back == 1  # the slot is free, yet the new request waits
            # The playing request's own later chunks still run.
            assert await pool.run(gate.job("later"), clock=playing) == "later"
            assert gate.ran == ["later"]
        await held  # its synthesis ended: the waiting request starts
        assert gate.ran == ["later", "held"]

    _run(main)


def test_realtime_admission_never_holds_a_request_back_while_a_stream_would_idle() -> None:
    """With fewer requests playing than slots a stream has nothing to run between their chunks, so a newcomer starts
    even where the players alone need more than the measured capacity; once every slot has a player, it waits."""
    async def main() -> None:
        pool = StreamPool(2, 8, realtime_factor=1.0)
        gate = Gate()
        for _ in range(4):  # each inference makes its audio at most half as fast as real time: capacity at most 1
            await pool.run(lambda slot: time.sleep(0.02), tokens=10, audio_s=lambda _: 0.01)
        capacity = pool.realtime_capacity
        assert capacity is not None and capacity <= 1.0
        with pool.playback() as one:
            one.sent(2.0)  # one plays; with a second, two would need 2 audio-s per s
            assert await asyncio.wait_for(pool.run(gate.job("second")), 5) == "second" and pool.held_back == 0
            with pool.playback() as two:
                two.sent(2.0)  # a player per slot: a third waits before its first byte
                third = asyncio.create_task(pool.run(gate.job("third")))
                await _until(lambda: pool.waiting == 1)
                await asyncio.sleep(0.05)
                assert gate.ran == ["second"] and pool.held_back == 1
            await third  # one of the two finished: a slot's player is missing again, so it starts
        assert gate.ran == ["second", "third"]

    _run(main)


def test_a_request_held_for_realtime_capacity_starts_once_its_hold_bound_has_passed() -> None:
    """``max_hold_s``: the players may be long inputs that take minutes to finish; past the bound the held request is
    scheduled as if admission were off (a free slot at once), and counted."""
    async def main() -> None:
        pool = StreamPool(1, 8, realtime_factor=1.0, max_hold_s=0.3)
        gate = Gate()
        for _ in range(4):
            await pool.run(lambda slot: time.sleep(0.02), tokens=10, audio_s=lambda _: 0.01)
        with pool.playback() as playing:
            playing.sent(60.0)  # one long input plays on: without the bound the newcomer would wait for its end
            started = time.monotonic()
            held = asyncio.create_task(pool.run(gate.job("held")))
            await _until(lambda: pool.held_back == 1)
            await asyncio.sleep(0.1)
            assert gate.ran == [] and pool.hold_expired == 0
            assert await asyncio.wait_for(held, 5) == "held"
            assert time.monotonic() - started >= 0.29 and pool.hold_expired == 1
            assert pool.snapshot()["hold_expired"] == 1

    _run(main)


def test_the_realtime_capacity_weighs_each_inference_by_its_time() -> None:
    """A stream that spends 2 s making 5 audio-s and 0.2 s making 0.2 (a short chunk, mostly edge audio the joins
    trim) makes about 2.4 audio-s per second of its time; the average of the two ratios would read about 1.8 (where
    the last inference was short)."""
    pool = StreamPool(2, 8)
    for _ in range(4):
        pool._observe(2.0, 60, 5.0)
        pool._observe(0.2, 12, 0.2)
    capacity = pool.realtime_capacity
    assert capacity is not None and 2 * 2.1 < capacity < 2 * 2.5, capacity


def test_realtime_admission_off_never_holds_a_request_back() -> None:
    async def main() -> None:
        pool = StreamPool(1, 8, realtime_factor=0.0)
        for _ in range(4):
            await pool.run(lambda slot: time.sleep(0.02), tokens=10, audio_s=lambda _: 0.03)
        with pool.playback() as playing:
            playing.sent(2.0)
            assert await pool.run(lambda slot: "ran") == "ran"
        assert pool.held_back == 0

    _run(main)


def test_admission_is_bounded() -> None:
    pool = StreamPool(1, 1)
    with pool.admit(), pool.admit():
        with pytest.raises(Overloaded) as refused:
            with pool.admit():
                pass
        assert refused.value.retry_after_s >= 1
    assert pool.admitted == 0


@pytest.mark.parametrize(("credit_s", "order"), [(0.0, ["busy", "later", "first"]),
                                                 (1.0, ["busy", "first", "later"]),
                                                 (0.2, ["busy", "later", "first"])])
def test_a_first_chunk_credit_overtakes_chunks_overdue_by_less(credit_s: float, order: list[str]) -> None:
    """`app.pool.FIRST_CHUNK_CREDIT_S`: a first chunk counts as due ``credit_s`` before it arrived; a later chunk
    overdue by 0.5 s (2.5 s of audio sent 2 s ago leaves its listener 0.5 s, under the 1 s margin) yields to it with a
    1 s credit, not with 0.2 s or none."""
    assert _order(credit_s=credit_s, started_ago=2.0, sent_s=2.5) == order
