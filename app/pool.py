"""The stream pool: bounded admission in front of a fixed set of inference slots.

Contract:
- `admit` runs on the event loop. It counts a request in, or raises `Overloaded` at once when
  ``slots + queue_size`` requests are already admitted: latency never grows without bound.
- `run` runs on the event loop and awaits a free slot (FIFO), then calls ``fn(slot)`` in a
  worker thread from the pool's own limiter (not Starlette's shared 40-thread one). The slot
  is held for that one call only, never across a ``yield`` to a slow client.
- If the awaiting task is cancelled (client hung up) while ``fn`` runs, the thread finishes its
  inference first and the slot is returned after it: a slot is never handed to a second thread
  while the first still uses it.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TypeVar

import anyio
import anyio.to_thread

from app.errors import Overloaded

T = TypeVar("T")


class StreamPool:
    def __init__(self, slots: int, queue_size: int) -> None:
        if slots < 1:
            raise ValueError("a pool needs at least one slot")
        self.slots = slots
        self.queue_size = queue_size
        self._free: asyncio.Queue[int] = asyncio.Queue()
        for slot in range(slots):
            self._free.put_nowait(slot)
        self._limiter = anyio.CapacityLimiter(slots)
        self._admitted = 0
        self._busy = 0
        self._mean_request_s = 1.0

    @property
    def capacity(self) -> int:
        return self.slots + self.queue_size

    @property
    def admitted(self) -> int:
        return self._admitted

    @property
    def busy(self) -> int:
        """Slots running an inference now."""
        return self._busy

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

    async def run(self, fn: Callable[[int], T]) -> T:
        """Run ``fn(slot)`` in a worker thread on a free slot."""
        slot = await self._free.get()
        self._busy += 1
        try:
            return await anyio.to_thread.run_sync(fn, slot, limiter=self._limiter)
        finally:
            self._busy -= 1
            self._free.put_nowait(slot)
