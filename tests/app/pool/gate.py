"""Helpers for the pool's tests: inferences that block a worker thread until the test lets them go, so the order
the pool grants its slots in is observed directly."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Awaitable, Callable


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


async def until(check: Callable[[], bool], timeout: float = 5.0) -> None:
    """Poll ``check`` on the event loop (the worker threads' progress is only seen this way)."""
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached")
        await asyncio.sleep(0.005)


def run(coro: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(coro())  # type: ignore[arg-type]
