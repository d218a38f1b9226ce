"""One request's playback clock: what its listener has heard so far, and so when its next chunk is due."""

from __future__ import annotations

from collections.abc import Callable

from app.pool.schedule import Deadlines


class Playback:
    """When a request's first audio left and how much audio has left since. Event loop only.

    `app.pool.StreamPool.playback` opens one per request and closes it when the request's synthesis ends. The engine
    calls `sent` once each chunk has been handed to the transport; the first call starts the clock and tells the
    pool the request now plays (``on_start``). `due` gives the deadline the schedule orders its next chunk by: a
    first chunk is due now (`Deadlines.first`); a later one when the player, which started at the first byte and
    plays at 1x, would run dry (`Deadlines.later`).
    """

    def __init__(self, order: int, deadlines: Deadlines, on_start: Callable[[], None]) -> None:
        self.order = order
        """Arrival order: ties in deadline go to the older request."""
        self.started: float | None = None
        """When its first audio left (the player starts then), on the pool's clock."""
        self.sent_s = 0.0
        """Audio-seconds sent so far."""
        self._deadlines = deadlines
        self._on_start = on_start

    def due(self, tokens: int = 0) -> float:
        """When the next chunk (of ``tokens`` tokens) must start for the player not to run dry."""
        if self.started is None:
            return self._deadlines.first()
        return self._deadlines.later(self.started + self.sent_s, tokens)

    def sent(self, audio_s: float) -> None:
        """Record that ``audio_s`` seconds of audio have left; the first call starts the clock."""
        if self.started is None:
            self.started = self._deadlines.clock()
            self._on_start()
        self.sent_s += audio_s
