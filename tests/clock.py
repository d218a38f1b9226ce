"""A clock a test moves by hand, for the pool and the lifecycle manager (their ``clock`` argument)."""

from __future__ import annotations


class FakeClock:
    """Reads like `time.monotonic`; only `advance` moves it (from any thread)."""

    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds
