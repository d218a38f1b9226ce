"""Which waiting chunk gets a free slot next: the earliest deadline, with first chunks held for real-time capacity.

Load decides *when* a chunk runs, never *what* it is: the chunks are cut from the text before any of them is
scheduled (`app.text.chunker`), so the same request gives the same audio at any load.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

DEADLINE_MARGIN_S = 1.0
"""The server's safety margin: a later chunk is due this long before the audio already sent for its request would
have played out at 1x (its expected inference time is taken off as well)."""
FIRST_CHUNK_CREDIT_S = 3.0
"""The server's credit to first chunks: one counts as due this long before it arrived, so it also overtakes later
chunks overdue by less than that; a chunk overdue by more still goes first (none is starved). It buys sooner first
audio under load at the same efficiency."""


@dataclass(eq=False)
class Lease:
    """One slot held by one inference: handed out by `Schedule.acquire`, given back once by `Schedule.release`."""

    slot: int
    """The runtime's slot (its infer request) the holder may use, and no one else while it is held."""
    slots: tuple[int, ...] = ()
    """The stream slots it holds: its own, or for a wide lease (`Schedule.acquire`) every one, whose threads the wide
    slot runs on."""
    released: bool = False


class Hold(Protocol):
    """What the schedule asks admission (`app.pool.admission.Admission`) about first chunks."""

    max_hold_s: float

    def holds(self, first: bool) -> bool:
        """Whether such a chunk must wait for real-time capacity now."""
        ...


class SpeedSource(Protocol):
    seconds_per_token: float


@dataclass(frozen=True)
class Deadlines:
    """When a chunk must start so that a player that began at its request's first byte, at 1x, never runs dry."""

    margin_s: float
    first_credit_s: float
    """A first chunk counts as due this long before it arrives (`FIRST_CHUNK_CREDIT_S`)."""
    speed: SpeedSource
    """Prices a chunk: its expected inference time is taken off its deadline (`app.pool.throughput.Throughput`)."""
    clock: Callable[[], float]

    def first(self) -> float:
        """A request's first chunk is due now, less the credit."""
        return self.clock() - self.first_credit_s

    def later(self, played_out: float, tokens: int) -> float:
        """A later chunk of ``tokens`` tokens: when the audio sent would have played out, less the margin and the
        chunk's expected inference time."""
        return played_out - self.margin_s - tokens * self.speed.seconds_per_token


@dataclass(order=True)
class _Waiter:
    key: tuple[float, int, int]
    future: asyncio.Future[Lease] = field(compare=False)
    first: bool = field(compare=False)
    since: float = field(compare=False)
    """When it began to wait (the clock's time)."""
    on_grant: Callable[[], None] | None = field(compare=False, default=None)


class Schedule:
    """The free slots and the chunks waiting for one, handed out by deadline. Event loop only.

    - `acquire` returns a `Lease` at once where a slot is free, no one waits and the chunk is not held; else the
      chunk waits. A freed slot goes to the waiter with the earliest deadline (ties to the older request, then to
      the earlier arrival). A new request's first chunk thus overtakes later chunks of requests whose clients still
      have seconds of audio buffered, and a chunk whose deadline has passed is ahead of every first chunk that
      arrives after it: it is never starved.
    - A first chunk that admission holds (`Hold.holds`) is skipped until it has waited ``max_hold_s``; a timer
      reruns the schedule then, and `wake` must be called whenever what admission decides may have changed.
    - If the awaiting task is cancelled (client hung up) while it waits, it leaves the queue; if the slot was
      handed to it in the same instant, the slot goes on to the next waiter.
    - A chunk that may run wide (``wide``: the pool has a wide slot) gets it where every slot is free, no one waits
      and the chunk is not held: its lease holds every slot, so nothing else runs until it ends (the pool bounds
      which chunks ask: `app.pool.StreamPool.run`).
    - The holder of a lease gives it back once with `release` (`app.pool.StreamPool.run` does, after the
      inference's thread has ended): a slot is never handed to a second holder while the first still uses it.
    """

    def __init__(self, slots: int, hold: Hold, *, clock: Callable[[], float] = time.monotonic,
                 wide_slot: int | None = None) -> None:
        self._slots = slots
        self._wide_slot = wide_slot
        self._free = list(range(slots))
        self._waiters: list[_Waiter] = []
        self._hold = hold
        self._clock = clock
        self._arrivals = itertools.count()
        self.held_back = 0
        """First chunks that waited for real-time capacity."""
        self.hold_expired = 0
        """Of those, how many were scheduled once ``max_hold_s`` had passed, capacity or not."""

    @property
    def waiting(self) -> int:
        """Chunks waiting for a slot."""
        return len(self._waiters)

    @property
    def free(self) -> int:
        """Slots no lease holds."""
        return len(self._free)

    async def acquire(self, due: float, order: int, first: bool, wide: bool = False,
                      on_grant: Callable[[], None] | None = None) -> Lease:
        """A slot for a chunk due at ``due`` (the clock's time) of the request ``order`` (``first``: a first chunk that
        admission may hold); ``wide``: the wide slot where the pool is idle; ``on_grant`` is called as the slot is
        handed over (before any other waiter is considered)."""
        key = (due, order, next(self._arrivals))
        if self._free and not self._waiters and not self._hold.holds(first):
            if on_grant is not None:
                on_grant()
            if wide and self._wide_slot is not None and len(self._free) == self._slots:
                held, self._free = tuple(self._free), []
                return Lease(self._wide_slot, held)
            slot = self._free.pop()
            return Lease(slot, (slot,))
        loop = asyncio.get_running_loop()
        waiter = _Waiter(key, loop.create_future(), first, self._clock(), on_grant)
        if self._hold.holds(first):
            self.held_back += 1
            if self._hold.max_hold_s > 0:
                loop.call_later(self._hold.max_hold_s, self.wake)  # its hold ends then, whatever else happens
        heapq.heappush(self._waiters, waiter)
        self.wake()
        try:
            return await waiter.future
        except asyncio.CancelledError:
            if waiter.future.done() and not waiter.future.cancelled():
                self.release(waiter.future.result())  # handed over in the same instant: pass it on
            elif waiter in self._waiters:
                self._waiters.remove(waiter)
                heapq.heapify(self._waiters)
            raise

    def release(self, lease: Lease) -> None:
        """Give the lease's slot back and hand it on."""
        if lease.released:
            raise RuntimeError(f"slot {lease.slot} released twice")
        lease.released = True
        self._free.extend(lease.slots)
        self.wake()

    def wake(self) -> None:
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
            self.hold_expired += waiter.first and self._hold.holds(True)
            if waiter.on_grant is not None:
                waiter.on_grant()
            slot = self._free.pop()
            waiter.future.set_result(Lease(slot, (slot,)))

    def _next_waiter(self) -> int | None:
        """The earliest waiter that may run now: a first chunk held for real-time capacity is skipped until it has
        waited ``max_hold_s``."""
        if not self._hold.holds(True):
            return 0
        now = self._clock()
        eligible = [i for i, w in enumerate(self._waiters) if not w.first or self._hold_over(w, now)]
        if not eligible:
            return None
        return min(eligible, key=lambda i: self._waiters[i].key)

    def _hold_over(self, waiter: _Waiter, now: float) -> bool:
        """Whether a first chunk has been held for real-time capacity as long as it may be (less a millisecond: the
        timer that reruns the schedule then may fire a little early)."""
        bound = self._hold.max_hold_s
        return bound > 0 and now - waiter.since >= bound - 1e-3
