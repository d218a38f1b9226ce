"""Who gets in and when a new request may start: admission in real time (429 beyond it) and the real-time hold."""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from app.errors import Overloaded
from app.pool.throughput import Throughput

REALTIME_FACTOR = 1.25
"""The server's real-time hold factor: new requests wait while the players would need more than this many times
the measured capacity. Above 1, so that a pool near its capacity is left alone."""
REALTIME_MAX_HOLD_S = 10.0
"""The server's longest hold for real-time capacity: the players a request waits for may be long inputs whose
synthesis takes minutes, longer than a client waits for a first byte."""
MAX_QUEUE_WAIT_S = 10.0
"""The server's bound on a queued request's expected wait for a listener's place: beyond it a new request gets 429
at once, so that the platform sends it elsewhere instead of a client waiting longer than it would for a new
instance."""
FIRST_REQUEST_S = 5.0
"""A request's life until one has been measured: with `MAX_QUEUE_WAIT_S` it admits three requests per slot."""


class Admission:
    """Admission in real time, in front of ``slots`` slots, and the real-time hold. Event loop only: nothing is locked.

    - `admit` counts a request in for its whole life, or raises `Overloaded` (with a Retry-After) at once when
      `capacity` requests are already admitted: latency never grows without bound.
    - `capacity` counts in listeners, not streams: as many requests as the pool plays at 1x (`listeners`: the
      measured real-time capacity, at least one per slot, one per slot until measured), then as many more as
      would wait at most `MAX_QUEUE_WAIT_S` for one of them to end (at the mean request time), at least one
      per slot. ``max_requests`` > 0 fixes it instead, for an operator who matches it to the platform's concurrency.
    - The players (requests whose first audio has left and whose synthesis has not ended) are counted here:
      `StreamPool.playback` calls `start_playing` at a request's first audio and `stop_playing` at its end.
    - `holds` tells the schedule whether a first chunk must wait for real-time capacity (``realtime_factor`` > 0):
      while the players would need more than ``realtime_factor`` × the measured capacity (`Throughput.capacity`)
      at 1x, never while fewer play than there are slots. The schedule ends a hold after ``max_hold_s``.
    """

    def __init__(self, slots: int, throughput: Throughput, *, max_requests: int = 0, realtime_factor: float = 0.0,
                 max_hold_s: float = 0.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.slots = slots
        self.max_requests = max_requests
        self.realtime_factor = realtime_factor
        self.max_hold_s = max_hold_s
        """Longest a first chunk is held for real-time capacity before it is scheduled as if admission were off
        (0: no bound)."""
        self._throughput = throughput
        self._clock = clock
        self._admitted = 0
        self._playing = 0
        self._mean_request_s = FIRST_REQUEST_S

    @property
    def listeners(self) -> int:
        """Requests the pool plays at once at 1x: its measured real-time capacity, at least one per slot."""
        measured = self._throughput.capacity
        return self.slots if measured is None else max(self.slots, math.floor(measured))

    @property
    def capacity(self) -> int:
        """The most requests admitted at once now: the listeners and those queued for their places."""
        if self.max_requests > 0:
            return self.max_requests
        listeners = self.listeners
        # At least one queued per slot: it picks up the slot the moment a chunk ends, whatever requests last.
        return listeners + max(self.slots, math.floor(MAX_QUEUE_WAIT_S * listeners / self._mean_request_s))

    @property
    def admitted(self) -> int:
        return self._admitted

    @property
    def playing(self) -> int:
        """Requests whose first audio has left and whose synthesis has not ended."""
        return self._playing

    @contextmanager
    def admit(self) -> Iterator[None]:
        """Count one request in for the duration of the block, or refuse it with `Overloaded`."""
        if self._admitted >= self.capacity:
            raise Overloaded(
                f"{self._admitted} requests are streaming or waiting, the most this server takes at once; retry later",
                retry_after_s=self.retry_after_s(),
            )
        self._admitted += 1
        start = self._clock()
        try:
            yield
        finally:
            self._admitted -= 1
            # An exponential average of request time drives the queue's bound and Retry-After.
            self._mean_request_s = 0.8 * self._mean_request_s + 0.2 * (self._clock() - start)

    def retry_after_s(self) -> int:
        """Seconds until a place is likely free: the queue drains at listeners per mean request time."""
        listeners = self.listeners
        waiting = max(1, self._admitted - listeners + 1)
        return max(1, min(60, math.ceil(self._mean_request_s * waiting / listeners)))

    def start_playing(self) -> None:
        """A request's first audio has left."""
        self._playing += 1

    def stop_playing(self) -> None:
        """A playing request's synthesis has ended."""
        self._playing -= 1

    def holds(self, first: bool) -> bool:
        """Whether a chunk (``first``: a request's first) must wait for real-time capacity now."""
        if not first or self.realtime_factor <= 0:
            return False
        capacity = self._throughput.capacity
        if capacity is None:
            return False
        # The request about to start needs 1 audio-second per second too. At least one request per slot always
        # plays: each request's chunks run one at a time, so with fewer playing a stream would idle.
        return self._playing >= self.slots and self._playing + 1 > capacity * self.realtime_factor
