"""How fast the pool's inferences run: exponential averages that price a chunk and measure the real-time capacity."""

from __future__ import annotations

RATE_MEMORY = 0.2
"""Weight of the newest inference in the exponential averages of speed."""
MIN_OBSERVED = 4
"""Inferences seen before the measured capacity is trusted for admission."""


class Throughput:
    """Exponential averages of the pool's recent inferences.

    Contract: `observe` runs on the event loop once an inference has ended (`app.pool.StreamPool.run`); the readers
    (`seconds_per_token` for deadlines, `capacity` for the real-time hold) run there too, so nothing is locked.
    """

    def __init__(self, slots: int) -> None:
        self.slots = slots
        self.seconds_per_token = 0.0
        """Average inference seconds per token (0 until measured): prices a chunk in its deadline."""
        self._audio_mean = 0.0
        self._seconds_mean = 0.0
        self._observed = 0

    @property
    def capacity(self) -> float | None:
        """Audio-seconds per second the pool makes with every slot busy; None until measured."""
        if self._observed < MIN_OBSERVED:
            return None
        return self.slots * self._audio_mean / self._seconds_mean

    def observe(self, seconds: float, tokens: int, audio_s: float) -> bool:
        """Count one inference of ``tokens`` tokens that made ``audio_s`` seconds of audio in ``seconds``; True when
        the capacity changed (a first chunk held for it may now start)."""
        if seconds <= 0:
            return False
        if tokens > 0:
            self.seconds_per_token = _average(self.seconds_per_token, seconds / tokens)
        if audio_s <= 0:
            return False
        # Averages of the audio and of the seconds, then their ratio: each inference weighs by its time, as in what
        # a busy stream makes per second. The average of each inference's own ratio would weigh a short chunk (more
        # of its time on the edge audio the joins trim) as much as a long one, and read the capacity low.
        self._audio_mean = _average(self._audio_mean, audio_s)
        self._seconds_mean = _average(self._seconds_mean, seconds)
        self._observed += 1
        return True


def _average(mean: float, value: float) -> float:
    """Exponential average; the first value (mean still 0) is taken as it is."""
    return value if mean == 0 else (1 - RATE_MEMORY) * mean + RATE_MEMORY * value
