"""The pool hands slots out by deadline, never starves an overdue chunk, and forgets cancelled waiters.

Fast: the pool reads a clock the test moves (`tests.clock.FakeClock`), and the "inferences" block a worker thread
until the test lets them go (`tests.app.pool.gate.Gate`).
"""

from __future__ import annotations

import asyncio
from contextlib import ExitStack

import pytest

from app.pool import Schedule, StreamPool
from tests.app.pool.gate import Gate, run, until
from tests.clock import FakeClock


class NoHold:
    """Admission that never holds a first chunk back."""

    max_hold_s = 0.0

    def holds(self, first: bool) -> bool:
        return False


def _order(*, credit_s: float = 0.0, started_ago: float = 0.0, sent_s: float = 10.0) -> list[str]:
    """One slot, held; a later chunk queues (by default with 10 s of slack), then a new request's first chunk."""
    ran: list[str] = []

    async def main() -> None:
        clock = FakeClock()
        pool = StreamPool(1, margin_s=1.0, first_credit_s=credit_s, clock=clock)
        gate = Gate()
        busy = asyncio.create_task(pool.run(gate.job("busy", hold=True)))
        await until(lambda: pool.busy == 1)
        with pool.playback() as slack, pool.playback() as fresh:
            slack.sent(sent_s)  # its first audio left ``started_ago`` seconds ago, ``sent_s`` seconds since
            clock.advance(started_ago)
            later = asyncio.create_task(pool.run(gate.job("later"), playback=slack))
            await until(lambda: pool.waiting == 1)
            first = asyncio.create_task(pool.run(gate.job("first"), playback=fresh))
            await until(lambda: pool.waiting == 2)
            gate.open("busy")
            await asyncio.gather(busy, later, first)
        ran.extend(gate.ran)

    run(main)
    return ran


def test_a_later_chunk_with_slack_yields_to_a_new_first_chunk() -> None:
    assert _order() == ["busy", "first", "later"]


def test_a_later_chunk_without_slack_goes_before_a_new_first_chunk() -> None:
    # The control that shows the test above can fail: its listener runs dry in 0.5 s, under the 1 s margin.
    assert _order(started_ago=2.0, sent_s=2.5) == ["busy", "later", "first"]


@pytest.mark.parametrize(("credit_s", "order"), [(0.0, ["busy", "later", "first"]),
                                                 (1.0, ["busy", "first", "later"]),
                                                 (0.2, ["busy", "later", "first"])])
def test_a_first_chunk_credit_overtakes_chunks_overdue_by_less(credit_s: float, order: list[str]) -> None:
    """`app.pool.FIRST_CHUNK_CREDIT_S`: a first chunk counts as due ``credit_s`` before it arrived; a later chunk
    overdue by 0.5 s (2.5 s of audio sent 2 s ago leaves its listener 0.5 s, under the 1 s margin) yields to it with a
    1 s credit, not with 0.2 s or none."""
    assert _order(credit_s=credit_s, started_ago=2.0, sent_s=2.5) == order


def test_an_overdue_chunk_is_not_starved_by_new_first_chunks() -> None:
    async def main() -> None:
        clock = FakeClock()
        pool = StreamPool(1, margin_s=1.0, clock=clock)
        gate = Gate()
        busy = asyncio.create_task(pool.run(gate.job("busy", hold=True)))
        await until(lambda: pool.busy == 1)
        with ExitStack() as requests:
            overdue = requests.enter_context(pool.playback())
            overdue.sent(2.0)
            clock.advance(5.0)  # its listener ran out 3 s ago (5 s since the first byte, 2 s of audio sent)
            late = asyncio.create_task(pool.run(gate.job("overdue"), playback=overdue))
            await until(lambda: pool.waiting == 1)
            firsts = [asyncio.create_task(pool.run(gate.job(f"first{n}"), playback=requests.enter_context(
                pool.playback()))) for n in range(5)]
            await until(lambda: pool.waiting == 6)
            gate.open("busy")
            await asyncio.gather(busy, late, *firsts)
        assert gate.ran[:2] == ["busy", "overdue"]

    run(main)


def test_equal_deadlines_go_to_the_older_request() -> None:
    async def main() -> None:
        pool = StreamPool(1, margin_s=0.0, clock=FakeClock())
        gate = Gate()
        busy = asyncio.create_task(pool.run(gate.job("busy", hold=True)))
        await until(lambda: pool.busy == 1)
        with pool.playback() as older, pool.playback() as newer:
            older.sent(3.0)
            newer.sent(3.0)  # the same clock reading: the same deadline
            second = asyncio.create_task(pool.run(gate.job("newer"), playback=newer))
            await until(lambda: pool.waiting == 1)
            first = asyncio.create_task(pool.run(gate.job("older"), playback=older))
            await until(lambda: pool.waiting == 2)
            gate.open("busy")
            await asyncio.gather(busy, first, second)
        assert gate.ran == ["busy", "older", "newer"]

    run(main)


def test_a_disconnected_clients_chunk_leaves_the_queue() -> None:
    async def main() -> None:
        pool = StreamPool(1, clock=FakeClock())
        gate = Gate()
        busy = asyncio.create_task(pool.run(gate.job("busy", hold=True)))
        await until(lambda: pool.busy == 1)
        gone = asyncio.create_task(pool.run(gate.job("gone")))
        await until(lambda: pool.waiting == 1)
        gone.cancel()
        with pytest.raises(asyncio.CancelledError):
            await gone
        assert pool.waiting == 0
        gate.open("busy")
        await busy
        assert await pool.run(gate.job("next")) == "next"
        assert gate.ran == ["busy", "next"]
        assert pool.busy == 0

    run(main)


def test_a_slot_handed_to_a_waiter_cancelled_in_the_same_instant_is_passed_on() -> None:
    async def main() -> None:
        schedule = Schedule(1, NoHold(), clock=FakeClock())
        held = await schedule.acquire(0.0, 0, True)  # held by an inference that is about to end
        gone = asyncio.create_task(schedule.acquire(1.0, 1, True))
        after = asyncio.create_task(schedule.acquire(2.0, 2, True))
        await until(lambda: schedule.waiting == 2)
        # The slot is handed to `gone` and `gone` is cancelled before it resumes: the race a client hanging up at
        # the moment its turn comes makes.
        schedule.release(held)
        gone.cancel()
        lease = await after
        assert gone.cancelled() and lease.slot == held.slot
        schedule.release(lease)
        assert schedule.free == 1 and schedule.waiting == 0

    run(main)


def test_a_lease_is_released_once() -> None:
    async def main() -> None:
        schedule = Schedule(2, NoHold())
        lease = await schedule.acquire(0.0, 0, True)
        schedule.release(lease)
        with pytest.raises(RuntimeError, match="released twice"):
            schedule.release(lease)
        assert schedule.free == 2

    run(main)


def test_a_chunk_that_finds_the_pool_idle_runs_wide_and_holds_every_slot() -> None:
    """The wide slot (a session on every stream's threads): a first chunk on an idle pool gets it and every stream's
    slot with it, so a chunk that arrives meanwhile waits for it; a chunk that finds a stream busy runs on a free one;
    later chunks run wide only where the pool's plan counts on it (``wide_plan``)."""
    async def main() -> None:
        pool = StreamPool(2, wide_slot=2, clock=FakeClock())
        gate = Gate()
        lone = asyncio.create_task(pool.run(gate.job("lone", hold=True)))
        await until(lambda: "lone" in gate.slots)
        assert gate.slots == {"lone": 2} and pool.schedule.free == 0
        second = asyncio.create_task(pool.run(gate.job("second", hold=True)))
        await until(lambda: pool.waiting == 1)
        gate.open("lone")
        await lone
        await until(lambda: "second" in gate.slots)
        assert gate.slots["second"] in (0, 1)  # it found the pool idle only after waiting: a stream of its own
        third = asyncio.create_task(pool.run(gate.job("third")))
        assert await asyncio.wait_for(third, 5) == "third" and gate.slots["third"] in (0, 1)
        gate.open("second")
        await second
        with pool.playback() as playing:
            playing.sent(5.0)
            assert await pool.run(gate.job("later"), playback=playing) == "later"
        assert gate.slots["later"] in (0, 1) and pool.granted["wide"] == 1

        paced = StreamPool(2, wide_slot=2, wide_plan=True, clock=FakeClock())
        with paced.playback() as playing:
            playing.sent(5.0)
            assert await paced.run(gate.job("paced"), playback=playing) == "paced"
        assert gate.slots["paced"] == 2 and paced.schedule.free == 2

    run(main)
