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

from app import pool as pool_module
from app.errors import Overloaded
from app.pool import Playback, StreamPool
from app.runtime.protocol import WIDE


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


def _order(scheduler: str, *, credit_s: float = 0.0, started_ago: float = 0.0, sent_s: float = 10.0) -> list[str]:
    """One slot, held; a later chunk queues (by default with 10 s of slack), then a new request's first chunk."""
    ran: list[str] = []

    async def main() -> None:
        pool = StreamPool(1, 8, scheduler=scheduler, margin_s=1.0, first_credit_s=credit_s)
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
    assert _order("deadline") == ["busy", "first", "later"]


def test_fifo_serves_in_arrival_order() -> None:
    # The pool as it was: the control that shows the deadline test can fail.
    assert _order("fifo") == ["busy", "later", "first"]


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


def test_a_chunk_alone_runs_wide_holding_every_slot_and_the_next_waits_for_it() -> None:
    async def main() -> None:
        pool = StreamPool(2, 8)
        gate = Gate()
        slots, job = gate.slots, gate.job
        wide = asyncio.create_task(pool.run(job("wide", hold=True), wide=True))
        await _until(lambda: pool.busy == 2)  # one inference holds both slots
        after = asyncio.create_task(pool.run(job("after"), wide=True))
        await _until(lambda: pool.waiting == 1)
        await asyncio.sleep(0.05)
        assert gate.ran == ["wide"]  # a slot's worth of CPU is not free while the wide session runs
        gate.open("wide")
        await asyncio.gather(wide, after)
        assert slots["wide"] == WIDE and slots["after"] != WIDE  # the wide chunk was still running when it came
        assert pool.granted["wide"] == 1 and pool.busy == 0 and sorted(pool._free) == [0, 1]

    _run(main)


def test_a_wide_chunk_takes_a_plain_slot_at_once_when_any_is_busy() -> None:
    async def main() -> None:
        pool = StreamPool(2, 8)
        gate = Gate()
        busy = asyncio.create_task(pool.run(gate.job("busy", hold=True)))
        await _until(lambda: pool.busy == 1)
        assert await pool.run(lambda slot: slot, wide=True) != WIDE  # no wait for the whole pool
        gate.open("busy")
        await busy
        assert pool.granted["wide"] == 0
        assert await pool.run(lambda slot: slot, wide=True) == WIDE  # idle now

    _run(main)


def test_wide_inferences_do_not_price_the_streams() -> None:
    async def main() -> None:
        pool = StreamPool(2, 8)
        for _ in range(4):
            await pool.run(lambda slot: time.sleep(0.01), tokens=10, audio_s=lambda _: 1.0, wide=True)
        assert pool.granted["wide"] == 4
        assert pool.measured_seconds_per_token is None and pool.realtime_capacity is None

    _run(main)


@pytest.mark.parametrize(("wide_s", "stream_s", "state", "then"), [(0.05, 0.01, "off", "stream"),
                                                                    (0.01, 0.05, "on", "wide")])
def test_lone_chunks_measure_both_paths_then_take_the_faster(wide_s: float, stream_s: float, state: str,
                                                             then: str) -> None:
    """``TTS_WIDE_TRIALS``: the first lone chunks run wide, the next as many on one stream of the idle pool, then
    each lone chunk takes the path with fewer seconds per token (the 16-vCPU Xeon's bridge on 16 threads was the
    slower: bench/results/device-20261204-xeon16-8x2)."""
    async def main() -> None:
        pool = StreamPool(2, 8, wide_trials=2)

        def infer(slot: int) -> int:
            time.sleep(wide_s if slot == WIDE else stream_s)
            return slot

        later = _playing(pool, started_ago=0.0, sent_s=60.0)
        paths = ["wide" if await pool.run(infer, tokens=10, wide=True, clock=later) == WIDE else "stream"
                 for _ in range(6)]
        assert paths == ["wide", "wide", "stream", "stream", then, then]
        assert pool.wide_state == state
        assert (await pool.run(infer, tokens=10, wide=True) == WIDE) == (then == "wide")  # a first chunk too
        wide = pool.snapshot()["wide"]
        assert isinstance(wide, dict) and wide["state"] == state
        assert wide["seconds_per_audio_s"] == pytest.approx(wide_s / 10, rel=0.8)  # per token: no made_s given
        assert wide["stream_alone_seconds_per_audio_s"] == pytest.approx(stream_s / 10, rel=0.8)

    _run(main)


def test_lone_paths_are_priced_by_the_audio_made_not_by_tokens() -> None:
    """An inference's time follows the audio the model makes, and a short chunk's fixed part (its edge silence) makes
    its seconds per token high: wide trials on short later chunks against stream trials on long ones must not make
    the faster path look the slower (the AVX2 EPYC's tuned server turned its wide session off that way:
    bench/results/latency-20261204-tuned)."""
    async def main() -> None:
        pool = StreamPool(2, 8, wide_trials=2)

        def infer(made_s: float) -> Callable[[int], tuple[int, float]]:
            def run(slot: int) -> tuple[int, float]:
                # The wide session makes audio 1.5 x as fast as one stream: 0.03 s per audio-second against 0.045.
                time.sleep(made_s * (0.03 if slot == WIDE else 0.045))
                return slot, made_s
            return run

        later = _playing(pool, started_ago=0.0, sent_s=60.0)
        # Wide trials on short chunks (10 tokens, 1.2 s of audio made), stream trials on long ones (100 tokens, 6 s):
        # per token the wide session would read 0.0036 s against 0.0027, the slower.
        for tokens, made in ((10, 1.2), (10, 1.2), (100, 6.0), (100, 6.0)):
            await pool.run(infer(made), tokens=tokens, made_s=lambda done: done[1], wide=True, clock=later)
        assert pool.wide_state == "on", pool.snapshot()["wide"]
        wide, stream = pool.lone_rate("wide"), pool.lone_rate("stream")
        assert wide is not None and stream is not None and wide < stream

    _run(main)


def test_once_decided_one_lone_chunk_in_wide_retry_takes_the_other_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pool_module, "WIDE_RETRY", 4)

    async def main() -> None:
        pool = StreamPool(2, 8, wide_trials=1)

        def infer(slot: int) -> int:
            time.sleep(0.01 if slot == WIDE else 0.04)
            return slot

        later = _playing(pool, started_ago=0.0, sent_s=60.0)
        paths = ["W" if await pool.run(infer, tokens=10, wide=True, clock=later) == WIDE else "S" for _ in range(10)]
        assert "".join(paths) == "WS" + "WWWS" * 2  # trials, then the stream path once in every 4
        assert all([await pool.run(infer, tokens=10, wide=True) == WIDE for _ in range(8)])  # first chunks: no retry

    _run(main)


def test_lone_chunks_price_no_path_while_the_bridge_serves() -> None:
    # While the runtime's bridge serves, a slot and the wide session are the same session: no sample either way.
    async def main() -> None:
        pool = StreamPool(2, 8, wide_trials=1)
        later = _playing(pool, started_ago=0.0, sent_s=60.0)
        bridge = True
        pool.measurable = lambda: not bridge
        assert await pool.run(lambda slot: slot, tokens=10, wide=True, clock=later) == WIDE
        assert pool.lone_rate("wide") is None and pool.wide_state == "measuring"

        def takes_over(slot: int) -> int:  # the primary takes over while this chunk runs on the bridge
            nonlocal bridge
            bridge = False
            return slot

        bridge = True
        assert await pool.run(takes_over, tokens=10, wide=True, clock=later) == WIDE
        assert pool.lone_rate("wide") is None
        assert await pool.run(lambda slot: slot, tokens=10, wide=True, clock=later) == WIDE  # the primary now
        assert pool.lone_rate("wide") is not None

    _run(main)


def test_a_lone_stream_chunk_joined_by_another_is_not_a_sample() -> None:
    async def main() -> None:
        pool = StreamPool(2, 8, wide_trials=1)
        later = _playing(pool, started_ago=0.0, sent_s=60.0)
        assert pool.wide_state == "measuring"
        for _ in range(3):  # first chunks run wide while measuring, and are not samples
            assert await pool.run(lambda slot: slot, tokens=10, wide=True) == WIDE
        assert pool.lone_rate("wide") is None
        assert await pool.run(lambda slot: slot, tokens=10, wide=True, clock=later) == WIDE
        assert pool.lone_rate("wide") is not None
        gate = Gate()
        lone = asyncio.create_task(pool.run(gate.job("lone", hold=True), tokens=10, wide=True, clock=later))
        await _until(lambda: pool.busy == 1)  # the stream path's trial, on one slot
        assert await pool.run(lambda slot: slot, tokens=10, wide=True) != WIDE  # a first chunk joins on the other
        gate.open("lone")
        await lone
        assert pool.lone_rate("stream") is None and pool.wide_state == "measuring"
        assert await pool.run(lambda slot: slot, tokens=10, wide=True, clock=later) != WIDE  # the trial, alone now
        assert pool.lone_rate("stream") is not None and pool.wide_state in ("on", "off")
        assert StreamPool(2, 8).wide_state == "unmeasured"

    _run(main)


@pytest.mark.parametrize(("credit_s", "order"), [(0.0, ["busy", "later", "first"]),
                                                 (1.0, ["busy", "first", "later"]),
                                                 (0.2, ["busy", "later", "first"])])
def test_a_first_chunk_credit_overtakes_chunks_overdue_by_less(credit_s: float, order: list[str]) -> None:
    """``TTS_FIRST_CHUNK_CREDIT_S``: a first chunk counts as due ``credit_s`` before it arrived; a later chunk overdue
    by 0.5 s (2.5 s of audio sent 2 s ago leaves its listener 0.5 s, under the 1 s margin) yields to it with a 1 s
    credit, not with 0.2 s or none."""
    assert _order("deadline", credit_s=credit_s, started_ago=2.0, sent_s=2.5) == order


def _busy_pool(express: int = 1, **kwargs: object) -> tuple[StreamPool, Gate, asyncio.Task[str]]:
    """A one-slot pool whose slot is held by ``busy`` (call inside a running loop)."""
    pool = StreamPool(1, 8, express=express, **kwargs)  # type: ignore[arg-type]
    gate = Gate()
    return pool, gate, asyncio.create_task(pool.run(gate.job("busy", hold=True)))


def test_a_first_chunk_that_finds_every_slot_busy_runs_at_once_on_the_express_lane() -> None:
    async def main() -> None:
        pool, gate, busy = _busy_pool()
        await _until(lambda: pool.busy == 1 and gate.ran == ["busy"])  # its thread running, not only granted
        later = asyncio.create_task(pool.run(gate.job("later"), clock=_playing(pool, started_ago=9.0, sent_s=2.0)))
        await _until(lambda: pool.waiting == 1)  # a later chunk, even one overdue by 8 s, waits for the slot
        with pool.playback() as fresh:
            lane = await pool.run(lambda slot: slot, clock=fresh, tokens=20, audio_s=lambda _: 1.0)
        assert lane == 1  # the slot after the pool's own: the runtime runs it beside them
        assert gate.ran == ["busy"] and pool.waiting == 1 and pool.busy == 1 and pool.express_busy == 0
        assert pool.granted == {"first": 2, "later": 0, "wide": 0, "express": 1}
        assert pool.measured_seconds_per_token is None and pool._priced == 0  # an oversubscribed run prices nothing
        gate.open("busy")
        await asyncio.gather(busy, later)
        assert gate.ran == ["busy", "later"] and sorted(pool._free) == [0] and pool._express_free == [1]

    _run(main)


def test_with_the_lane_taken_a_first_chunk_waits_and_takes_whichever_frees_first() -> None:
    async def main() -> None:
        pool, gate, busy = _busy_pool()
        await _until(lambda: pool.busy == 1 and gate.ran == ["busy"])  # its thread running, not only granted
        slots, job = gate.slots, gate.job
        one = asyncio.create_task(pool.run(job("one", hold=True), clock=pool.playback().__enter__()))
        await _until(lambda: pool.express_busy == 1)
        two = asyncio.create_task(pool.run(job("two"), clock=pool.playback().__enter__()))
        await _until(lambda: pool.waiting == 1)
        await asyncio.sleep(0.05)
        assert gate.ran == ["busy", "one"]  # at most one express inference at a time
        gate.open("one")
        await asyncio.gather(one, two)
        assert slots == {"busy": 0, "one": 1, "two": 1} and gate.ran == ["busy", "one", "two"]  # the lane freed first
        gate.open("busy")
        await busy
        assert pool.busy == 0 and pool.express_busy == 0 and pool.waiting == 0

    _run(main)


@pytest.mark.parametrize("case", ["fifo", "off", "not-ok", "held"])
def test_no_express_lane_under_fifo_when_off_when_the_runtime_cannot_or_while_held(case: str) -> None:
    """The controls: the same first chunk waits for the busy slot."""
    async def main() -> None:
        pool, gate, busy = _busy_pool(express=0 if case == "off" else 1,
                                      scheduler="fifo" if case == "fifo" else "deadline",
                                      realtime_factor=1.0 if case == "held" else 0.0)
        if case == "not-ok":
            pool.express_ok = lambda: False
        await _until(lambda: pool.busy == 1 and gate.ran == ["busy"])  # its thread running, not only granted
        if case == "held":  # one request plays and the pool makes 1 audio-s per s: a second is held back
            pool._observed, pool._audio_mean, pool._seconds_mean = 4, 1.0, 1.0
            _playing(pool, started_ago=0.0, sent_s=10.0)
        first = asyncio.create_task(pool.run(gate.job("first"), clock=pool.playback().__enter__()))
        await _until(lambda: pool.waiting == 1)
        await asyncio.sleep(0.05)
        assert gate.ran == ["busy"] and pool.granted["express"] == 0
        gate.open("busy")
        await busy
        if case != "held":
            await first
            assert gate.ran == ["busy", "first"]
        else:
            first.cancel()
            await asyncio.gather(first, return_exceptions=True)

    _run(main)


def test_later_chunks_never_take_the_express_lane() -> None:
    async def main() -> None:
        pool, gate, busy = _busy_pool()
        await _until(lambda: pool.busy == 1 and gate.ran == ["busy"])  # its thread running, not only granted
        later = asyncio.create_task(pool.run(gate.job("later"), clock=_playing(pool, started_ago=0.0, sent_s=1.0)))
        await _until(lambda: pool.waiting == 1)
        await asyncio.sleep(0.05)
        assert gate.ran == ["busy"] and pool.express_busy == 0
        gate.open("busy")
        await asyncio.gather(busy, later)

    _run(main)


def test_an_express_lane_handed_to_a_waiter_cancelled_in_the_same_instant_is_passed_on() -> None:
    async def main() -> None:
        pool, gate, busy = _busy_pool()
        await _until(lambda: pool.busy == 1 and gate.ran == ["busy"])  # its thread running, not only granted
        lane = pool._express_free.pop()  # held by an express inference about to end
        gone = asyncio.create_task(pool.run(gate.job("gone"), clock=pool.playback().__enter__()))
        after = asyncio.create_task(pool.run(gate.job("after"), clock=pool.playback().__enter__()))
        await _until(lambda: pool.waiting == 2)
        pool._release(lane)
        gone.cancel()
        await asyncio.gather(after, gone, return_exceptions=True)
        assert gate.ran == ["busy", "after"] and pool._express_free == [lane]
        gate.open("busy")
        await busy

    _run(main)
