"""The stream pool: bounded admission in front of a fixed set of inference slots, handed out by deadline.

Contract:
- `admit` runs on the event loop. It counts a request in, or raises `Overloaded` at once when
  ``slots + queue_size`` requests are already admitted: latency never grows without bound.
- `playback` (event loop) opens one request's playback clock: the order it arrived in (ties go to
  the older request), when its first audio left and how much audio has left since. From these
  `Playback.due` tells when its next chunk must *start* so that a player that began at the first
  byte, at 1x, never runs dry: played out, minus a safety margin, minus the chunk's expected
  inference time. A request's first chunk is due now.
- `run` runs on the event loop and awaits a free slot, then calls ``fn(slot)`` in a worker thread
  from the pool's own limiter (not Starlette's shared 40-thread one). A freed slot goes to the
  waiter with the earliest deadline (ties to the older request). A new request's first chunk thus overtakes
  later chunks of requests whose clients still have seconds of audio buffered, and a chunk whose
  deadline has passed is ahead of every first chunk that arrives after it: it is never starved.
  The slot is held for that one call only, never across a ``yield`` to a slow client.
- If the awaiting task is cancelled (client hung up) while it waits, it leaves the queue; if
  the slot was handed to it in the same instant, the slot goes on to the next waiter. If it is
  cancelled while ``fn`` runs, the thread finishes its inference first and the slot is returned
  after it: a slot is never handed to a second thread while the first still uses it.
- Real-time admission (``realtime_factor`` > 0): the pool measures the audio-seconds it makes per
  second with every slot busy (``slots`` × the audio per inference-second of recent inferences).
  A request's first chunk waits, before any byte of it is sent, while the requests already
  playing (first audio sent, synthesis not finished) would need more than ``realtime_factor`` ×
  that capacity at 1x; it starts when one of them finishes. Never while fewer requests play than there
  are slots: a request's chunks run one after another, so with fewer a stream would sit idle for want of
  one, and holding the newcomer back would feed nobody faster. Nor for longer than ``max_hold_s``: after it
  the first chunk is scheduled as if admission were off (players of long inputs can take minutes to finish,
  longer than a client waits for a first byte). The wait counts against the bounded queue, so beyond it new
  requests get 429.

Load decides *when* a chunk runs, never *what* it is: the chunks are cut from the text before any of them
is scheduled (`app.engine`), so the same request gives the same audio at any load.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import math
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TypeVar

import anyio
import anyio.to_thread

from app.errors import Overloaded

T = TypeVar("T")

RATE_MEMORY = 0.2
"""Weight of the newest inference in the exponential averages of speed."""
MIN_OBSERVED = 4
"""Inferences seen before the measured capacity is trusted for admission."""
DEADLINE_MARGIN_S = 1.0
"""The server's safety margin: a later chunk is due this long before the audio already sent for its request would
have played out at 1x (its expected inference time is taken off as well)."""
FIRST_CHUNK_CREDIT_S = 3.0
"""The server's credit to first chunks: one counts as due this long before it arrived, so it also overtakes later
chunks overdue by less than that; a chunk overdue by more still goes first (none is starved): sooner first audio
under load at the same efficiency (bench/results/latency-20261203-xeon-credit)."""
REALTIME_FACTOR = 1.25
"""The server's real-time admission factor (module docstring): on the 2-vCPU Zen 4 at 8 clients 38 s of stalls per
audio-minute against 53 s without, first audio 3.5 s p50 against 3.8 s; a pool near its capacity is left alone
(bench/results/latency-20261205-zen4-admission-factor)."""
REALTIME_MAX_HOLD_S = 10.0
"""The server's longest hold for real-time capacity: the players a request waits for may be long inputs whose
synthesis takes minutes; at 8 clients (2-vCPU Zen 4) held requests' first audio was 8.7-10.1 s p90."""


@dataclass
class Playback:
    """One request's playback clock (event loop only). Times are ``time.monotonic()``."""

    order: int
    """Arrival order: ties in deadline go to the older request."""
    pool: StreamPool
    started: float | None = None
    """When its first audio left (the player starts then)."""
    sent_s: float = 0.0
    """Audio-seconds sent so far."""

    def due(self, tokens: int = 0) -> float:
        """When the next chunk (of ``tokens`` tokens) must start for the player not to run dry."""
        now = time.monotonic()
        if self.started is None:
            return now - self.pool.first_credit_s
        played_out = self.started + self.sent_s
        return played_out - self.pool.margin_s - tokens * self.pool.seconds_per_token

    def sent(self, audio_s: float) -> None:
        """Record that ``audio_s`` seconds of audio have left; the first call starts the clock."""
        if self.started is None:
            self.started = time.monotonic()
            self.pool._playing += 1
        self.sent_s += audio_s


@dataclass(order=True)
class _Waiter:
    key: tuple[float, int, int]
    future: asyncio.Future[int] = field(compare=False)
    first: bool = field(compare=False)
    since: float = field(compare=False)
    """When it began to wait (``time.monotonic()``)."""


class StreamPool:
    def __init__(self, slots: int, queue_size: int, *, margin_s: float = 1.0, realtime_factor: float = 0.0,
                 first_credit_s: float = 0.0, max_hold_s: float = 0.0) -> None:
        """A pool of ``slots`` slots; the server passes the module's constants (`app.services`), tests their own."""
        if slots < 1:
            raise ValueError("a pool needs at least one slot")
        self.slots = slots
        self.queue_size = queue_size
        self.margin_s = margin_s
        self.first_credit_s = first_credit_s
        """A first chunk counts as due this long before it arrives (`FIRST_CHUNK_CREDIT_S`)."""
        self.realtime_factor = realtime_factor
        self.max_hold_s = max_hold_s
        """Longest a first chunk is held for real-time capacity before it is scheduled as if admission were off
        (0: no bound)."""
        self._free = list(range(slots))
        self._waiters: list[_Waiter] = []
        self._limiter = anyio.CapacityLimiter(slots)
        self._admitted = 0
        self._busy = 0
        self._playing = 0
        self._mean_request_s = 1.0
        self._orders = itertools.count()
        self._arrivals = itertools.count()
        self.seconds_per_token = 0.0
        """Average inference seconds per token (0 until measured); prices a chunk in `Playback.due`."""
        self._audio_mean = 0.0
        self._seconds_mean = 0.0
        """Averages of the audio an inference makes and of its seconds (`_observe`); their ratio is a stream's rate."""
        self._observed = 0
        self.granted = {"first": 0, "later": 0}
        """Slots granted to first chunks and to later ones; for tests and the info endpoint."""
        self.held_back = 0
        """First chunks that waited for real-time capacity."""
        self.hold_expired = 0
        """Of those, how many were scheduled once ``max_hold_s`` had passed, capacity or not."""

    @property
    def capacity(self) -> int:
        return self.slots + self.queue_size

    @property
    def admitted(self) -> int:
        return self._admitted

    @property
    def busy(self) -> int:
        """Slots held by an inference now."""
        return self._busy

    @property
    def waiting(self) -> int:
        """Chunks waiting for a slot."""
        return len(self._waiters)

    @property
    def playing(self) -> int:
        """Requests whose first audio has left and whose synthesis has not ended."""
        return self._playing

    @property
    def realtime_capacity(self) -> float | None:
        """Audio-seconds per second the pool makes with every slot busy; None until measured."""
        if self._observed < MIN_OBSERVED:
            return None
        return self.slots * self._audio_mean / self._seconds_mean

    def snapshot(self) -> dict[str, object]:
        return {"busy": self._busy, "waiting": self.waiting, "playing": self._playing,
                "admitted": self._admitted, "realtime_capacity": self.realtime_capacity,
                "realtime_factor": self.realtime_factor, "seconds_per_token": self.seconds_per_token,
                "granted": dict(self.granted), "held_back": self.held_back, "hold_expired": self.hold_expired}

    @contextmanager
    def admit(self) -> Iterator[None]:
        """Count one request in for the duration of the block, or refuse it with `Overloaded`."""
        if self._admitted >= self.capacity:
            raise Overloaded(
                f"all {self.slots} streams are busy and {self.queue_size} requests are waiting; retry later",
                retry_after_s=self.retry_after_s(),
            )
        self._admitted += 1
        start = time.monotonic()
        try:
            yield
        finally:
            self._admitted -= 1
            # An exponential average of request time drives Retry-After.
            self._mean_request_s = 0.8 * self._mean_request_s + 0.2 * (time.monotonic() - start)

    def retry_after_s(self) -> int:
        """Seconds until a place is likely free: the queue drains at slots per mean request time."""
        waiting = max(1, self._admitted - self.slots + 1)
        return max(1, min(60, math.ceil(self._mean_request_s * waiting / self.slots)))

    @contextmanager
    def playback(self) -> Iterator[Playback]:
        """One request's playback clock, for as long as it synthesizes."""
        clock = Playback(order=next(self._orders), pool=self)
        try:
            yield clock
        finally:
            if clock.started is not None:
                self._playing -= 1
                self._wake()

    async def run(self, fn: Callable[[int], T], *, clock: Playback | None = None, tokens: int = 0,
                  audio_s: Callable[[T], float] | None = None) -> T:
        """Run ``fn(slot)`` in a worker thread on a free slot, scheduled by ``clock``'s deadline.

        ``tokens`` prices the chunk (its expected inference time counts into its deadline and the
        measured seconds per token); ``audio_s`` reads the audio-seconds a result holds, for the
        measured real-time capacity.
        """
        first = clock is None or clock.started is None
        slot = await self._acquire(clock, tokens, first)
        self._busy += 1
        self.granted["first" if first else "later"] += 1
        started = time.monotonic()
        try:
            result = await anyio.to_thread.run_sync(fn, slot, limiter=self._limiter)
        finally:
            self._busy -= 1
            self._release(slot)
        self._observe(time.monotonic() - started, tokens, audio_s(result) if audio_s is not None else 0.0)
        return result

    # --- scheduling ------------------------------------------------------------------------------

    def _held(self, first: bool) -> bool:
        """Whether a first chunk must wait for real-time capacity."""
        if not first or self.realtime_factor <= 0:
            return False
        capacity = self.realtime_capacity
        if capacity is None:
            return False
        # The request about to start needs 1 audio-second per second too. At least one request per slot always
        # plays: each request's chunks run one at a time, so with fewer playing a stream would idle.
        return self._playing >= self.slots and self._playing + 1 > capacity * self.realtime_factor

    async def _acquire(self, clock: Playback | None, tokens: int, first: bool) -> int:
        order = clock.order if clock is not None else next(self._orders)
        due = clock.due(tokens) if clock is not None else time.monotonic()
        key = (due, order, next(self._arrivals))
        if self._free and not self._waiters and not self._held(first):
            return self._free.pop()
        loop = asyncio.get_running_loop()
        waiter = _Waiter(key, loop.create_future(), first, time.monotonic())
        if self._held(first):
            self.held_back += 1
            if self.max_hold_s > 0:
                loop.call_later(self.max_hold_s, self._wake)  # its hold ends then, whatever else happens
        heapq.heappush(self._waiters, waiter)
        self._wake()
        try:
            return await waiter.future
        except asyncio.CancelledError:
            if waiter.future.done() and not waiter.future.cancelled():
                self._release(waiter.future.result())  # handed over in the same instant: pass it on
            elif waiter in self._waiters:
                self._waiters.remove(waiter)
                heapq.heapify(self._waiters)
            raise

    def _release(self, slot: int) -> None:
        self._free.append(slot)
        self._wake()

    def _wake(self) -> None:
        """Hand free slots to the waiters they are due to, earliest first."""
        while self._free and self._waiters:
            index = self._next_waiter()
            if index is None:
                return
            waiter = self._waiters[index]
            self._waiters[index] = self._waiters[-1]
            self._waiters.pop()
            heapq.heapify(self._waiters)
            if waiter.future.done():  # cancelled meanwhile
                continue
            self.hold_expired += waiter.first and self._held(True)
            waiter.future.set_result(self._free.pop())

    def _next_waiter(self) -> int | None:
        """The earliest waiter that may run now: a first chunk held for real-time capacity is skipped until it has
        waited ``max_hold_s``."""
        if not self._held(True):
            return 0
        now = time.monotonic()
        eligible = [i for i, w in enumerate(self._waiters) if not w.first or self._hold_over(w, now)]
        if not eligible:
            return None
        return min(eligible, key=lambda i: self._waiters[i].key)

    def _hold_over(self, waiter: _Waiter, now: float) -> bool:
        """Whether a first chunk has been held for real-time capacity as long as it may be."""
        return self.max_hold_s > 0 and now - waiter.since >= self.max_hold_s - 1e-3

    def _observe(self, seconds: float, tokens: int, audio_s: float) -> None:
        if seconds <= 0:
            return
        if tokens > 0:
            self.seconds_per_token = _average(self.seconds_per_token, seconds / tokens)
        if audio_s > 0:
            # Averages of the audio and of the seconds, then their ratio: each inference weighs by its time, as in
            # what a busy stream makes per second. The average of each inference's own ratio weighed a short chunk
            # (more of its time on the edge audio the joins trim) as much as a long one: on the 2-vCPU Zen 4 at 4
            # clients it read 3.4-4.5 audio-s per s (median 4.0) while the pool served 4.3-4.5.
            self._audio_mean = _average(self._audio_mean, audio_s)
            self._seconds_mean = _average(self._seconds_mean, seconds)
            self._observed += 1
            self._wake()


def _average(mean: float, value: float) -> float:
    """Exponential average; the first value (mean still 0) is taken as it is."""
    return value if mean == 0 else (1 - RATE_MEMORY) * mean + RATE_MEMORY * value
