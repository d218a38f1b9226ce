"""The stream pool: admission, the schedule and the measured throughput joined behind one object."""

from __future__ import annotations

import functools
import itertools
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import TypeVar

import anyio
import anyio.to_thread

from app.pool.admission import CURRENT, Admission, Ticket
from app.pool.playback import Playback
from app.pool.schedule import Deadlines, Schedule
from app.pool.throughput import Throughput

T = TypeVar("T")


class StreamPool:
    """A fixed set of inference slots behind bounded admission, handed out by deadline.

    Contract (everything but ``fn`` runs on the event loop):
    - `admit` (`Admission`) counts a request in for its whole life, or raises `Overloaded` at once.
    - `playback` opens one request's `Playback` clock for as long as it synthesizes.
    - `run` awaits a `Lease` from the `Schedule` in its playback's deadline order, then calls ``fn(slot)`` in a
      worker thread from the pool's own limiter (not Starlette's shared 40-thread one), and releases the lease
      after that thread has ended, even if the awaiting task was cancelled meanwhile (the thread finishes its
      inference first). The slot is held for that one call only, never across a ``yield`` to a slow client.
    - With a ``wide_slot`` (a session on every stream's threads, `app.runtime.backends.onnxruntime`) a chunk that
      finds the pool idle runs there: a request's first chunk always, any chunk where ``wide_plan`` (the chunk plan
      counts on a lone listener's chunks running wide, `app.tune.speed.Pace`). The same bytes either way.
    - After each inference `run` feeds the `Throughput` averages, which price later deadlines and measure the
      real-time capacity admission holds first chunks for.

    The server passes the constants of `app.pool.schedule` and `app.pool.admission` (`app.services`), tests their
    own; ``clock`` is what every time of the pool is read from.
    """

    def __init__(self, slots: int, *, max_requests: int = 0, margin_s: float = 1.0, listeners: int = 0,
                 first_credit_s: float = 0.0, max_hold_s: float = 0.0, wide_slot: int | None = None,
                 wide_plan: bool = False, first_tokens: int = 20,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if slots < 1:
            raise ValueError("a pool needs at least one slot")
        self.slots = slots
        self.wide_slot = wide_slot
        self.wide_plan = wide_plan and wide_slot is not None
        self.throughput = Throughput(slots)
        self.admission = Admission(slots, self.throughput, listeners=listeners, max_requests=max_requests,
                                   max_hold_s=max_hold_s, first_tokens=first_tokens, clock=clock)
        self.schedule = Schedule(slots, self.admission, clock=clock, wide_slot=wide_slot)
        self._deadlines = Deadlines(margin_s, first_credit_s, self.throughput, clock)
        self._clock = clock
        self._limiter = anyio.CapacityLimiter(slots)
        self._orders = itertools.count()
        self._busy = 0
        self.granted = {"first": 0, "later": 0, "wide": 0}
        """Slots granted to first chunks and to later ones; for tests and the info endpoint."""

    @property
    def capacity(self) -> int:
        """The most requests admitted at once now (`Admission.capacity`)."""
        return self.admission.capacity

    @property
    def listeners(self) -> int:
        """Requests the pool plays at once at 1x (`Admission.listeners`)."""
        return self.admission.listeners

    @property
    def admitted(self) -> int:
        return self.admission.admitted

    @property
    def busy(self) -> int:
        """Slots held by an inference now."""
        return self._busy

    @property
    def waiting(self) -> int:
        """Chunks waiting for a slot."""
        return self.schedule.waiting

    @property
    def playing(self) -> int:
        """Requests whose first audio has left and whose synthesis has not ended."""
        return self.admission.playing

    @property
    def realtime_capacity(self) -> float | None:
        """Audio-seconds per second the pool makes with every slot busy; None until measured."""
        return self.throughput.capacity

    def snapshot(self) -> dict[str, object]:
        return {"capacity": self.capacity, "listeners": self.listeners, "max_requests": self.admission.max_requests,
                "busy": self._busy, "waiting": self.waiting, "playing": self.playing, "admitted": self.admitted,
                "realtime_capacity": self.realtime_capacity, "wide_slot": self.wide_slot,
                "seconds_per_token": self.throughput.seconds_per_token, "granted": dict(self.granted),
                "held_back": self.schedule.held_back, "hold_expired": self.schedule.hold_expired}

    def admit(self) -> AbstractContextManager[Ticket]:
        """Count one request in for the duration of the block, or refuse it with `Overloaded`."""
        return self.admission.admit()

    def retry_after_s(self) -> int:
        return self.admission.retry_after_s()

    @contextmanager
    def playback(self) -> Iterator[Playback]:
        """One request's playback clock, for as long as it synthesizes."""
        clock = Playback(next(self._orders), self._deadlines, on_start=self.admission.start_playing)
        ticket = CURRENT.get()
        if ticket is not None:
            ticket.ended = False  # a request asked again (`app.retry`) synthesizes again
        try:
            yield clock
        finally:
            if ticket is not None:
                ticket.ended = True
            if clock.started is not None:
                self.admission.stop_playing()
            self.schedule.wake()  # a place freed: a held first chunk may start

    async def run(self, fn: Callable[[int], T], *, playback: Playback | None = None, tokens: int = 0,
                  audio_s: Callable[[T], float] | None = None) -> T:
        """Run ``fn(slot)`` in a worker thread on a free slot, scheduled by ``playback``'s deadline (none: due now).

        ``tokens`` prices the chunk (its expected inference time counts into its deadline and the measured seconds
        per token); ``audio_s`` reads the audio-seconds a result holds, for the measured real-time capacity.
        """
        first = playback is None or playback.started is None
        order = playback.order if playback is not None else next(self._orders)
        due = playback.due(tokens) if playback is not None else self._clock()
        ticket = CURRENT.get()
        # A first chunk waits for a listener's place (admission's hold) where it is an admitted request's first.
        waits = ticket is not None and not ticket.started
        wide = self.wide_slot is not None and (first or self.wide_plan)
        on_grant = functools.partial(self.admission.start, ticket) if ticket is not None and waits else None
        lease = await self.schedule.acquire(due, order, waits, wide, on_grant=on_grant)
        self._busy += 1
        self.granted["first" if first else "later"] += 1
        self.granted["wide"] += lease.slot == self.wide_slot
        started = self._clock()
        try:
            result = await anyio.to_thread.run_sync(fn, lease.slot, limiter=self._limiter)
        finally:
            self._busy -= 1
            self.schedule.release(lease)
        made = audio_s(result) if audio_s is not None else 0.0
        if self.throughput.observe(self._clock() - started, tokens, made):
            self.schedule.wake()  # the capacity changed: a held first chunk may start
        return result
