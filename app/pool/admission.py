"""Who gets in and when a new request may start: as many listeners as the pool plays in real time, a short queue
whose first audio will still come soon, and 429 at once beyond it."""

from __future__ import annotations

import contextvars
import math
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from app.errors import Overloaded
from app.pool.throughput import Throughput

FIRST_AUDIO_BOUND_S = 2.0
"""The server's bound on a queued request's expected first audio: a request that would wait longer for a listener's
place gets 429 with Retry-After at once, so that the platform sends it elsewhere instead of a client waiting."""
REALTIME_MAX_HOLD_S = 10.0
"""The longest a first chunk is held for a listener's place whatever the estimate said: the places it waits for may
be long inputs whose synthesis takes minutes, longer than a client waits for a first byte."""
FIRST_REQUEST_S = 5.0
"""A request's life until one has been measured (Retry-After when nothing better is known)."""


@dataclass(eq=False)
class Ticket:
    """One admitted request's place, from `Admission.admit` to its end. Event loop only."""

    started: bool = False
    """Its first chunk was given a slot: it holds one of the listeners' places until its synthesis ends."""
    ended: bool = False
    """Its synthesis ended (or it left before): the place is free, whatever the response still sends."""
    remaining_tokens: int | None = None
    """Tokens its plan has yet to synthesize (`app.engine.Engine.stream_timed` keeps it), None until planned."""


CURRENT: contextvars.ContextVar[Ticket | None] = contextvars.ContextVar("admission_ticket", default=None)
"""The ticket of the request the running task serves (set by `Admission.admit`), read by the pool's runs and clocks."""


class Admission:
    """Admission in real time in front of a pool of ``slots`` slots. Event loop only: nothing is locked.

    - ``listeners`` requests synthesize at once (`app.tune.speed.Pace`: as many as each play in real time at the
      chunk plan's pace; 0: one per slot). A request arriving with fewer synthesizing is admitted and starts at once.
    - Beyond them, a request is admitted to wait for a place only while its first audio is expected within
      `FIRST_AUDIO_BOUND_S`: the place it would take frees when the synthesizing request with the least left ends
      (its remaining tokens at the measured seconds per token), plus its own first chunk. Else it is refused at once
      with `Overloaded` and a Retry-After of when that place frees.
    - ``max_requests`` > 0 admits that many instead, whatever their wait (an operator who would rather queue than
      refuse): those beyond the listeners wait for a place all the same.
    - `holds` tells the schedule a first chunk must wait: while ``listeners`` requests have started; the schedule
      ends a hold after ``max_hold_s`` whatever happens.
    - The players (requests whose first audio has left and whose synthesis has not ended) are counted for the info
      endpoint: `StreamPool.playback` calls `start_playing` and `stop_playing`.
    """

    def __init__(self, slots: int, throughput: Throughput, *, listeners: int = 0, max_requests: int = 0,
                 max_hold_s: float = 0.0, first_tokens: int = 20,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.slots = slots
        self.max_requests = max_requests
        self.max_hold_s = max_hold_s
        """Longest a first chunk is held for a place before it is scheduled all the same (0: no bound)."""
        self.first_tokens = first_tokens
        """A first chunk's tokens: prices a queued request's own first audio."""
        self._listeners = listeners or slots
        self._throughput = throughput
        self._clock = clock
        self._tickets: list[Ticket] = []
        self._admitted = 0
        self._playing = 0
        self._mean_request_s = FIRST_REQUEST_S

    @property
    def listeners(self) -> int:
        """Requests that synthesize at once, each playing in real time."""
        return self._listeners

    @property
    def capacity(self) -> int:
        """The most requests admitted at once now: the listeners and the queue whose first audio would come soon."""
        if self.max_requests > 0:
            return self.max_requests
        queue = 0
        while self._first_audio_s(self._listeners + queue) <= FIRST_AUDIO_BOUND_S:
            queue += 1
        return self._listeners + queue

    @property
    def admitted(self) -> int:
        return self._admitted

    @property
    def playing(self) -> int:
        """Requests whose first audio has left and whose synthesis has not ended."""
        return self._playing

    @property
    def started(self) -> int:
        """Requests holding a listener's place: their first chunk has run or runs, their synthesis goes on."""
        return sum(1 for t in self._tickets if t.started and not t.ended)

    def _synthesizing(self) -> int:
        return sum(1 for t in self._tickets if not t.ended)

    @contextmanager
    def admit(self) -> Iterator[Ticket]:
        """Count one request in for the duration of the block, or refuse it with `Overloaded`."""
        synthesizing = self._synthesizing()
        if self.max_requests > 0:
            full = self._admitted >= self.max_requests
        else:
            full = synthesizing >= self._listeners and self._first_audio_s(synthesizing) > FIRST_AUDIO_BOUND_S
        if full:
            raise Overloaded(
                f"{synthesizing} requests are synthesizing or waiting, the most this server plays in real time; "
                "retry later", retry_after_s=self.retry_after_s())
        ticket = Ticket()
        self._tickets.append(ticket)
        self._admitted += 1
        token = CURRENT.set(ticket)
        start = self._clock()
        try:
            yield ticket
        finally:
            try:
                CURRENT.reset(token)
            except ValueError:
                pass  # closed from another task than the one it was set in (a response's body task): nothing to undo
            self._admitted -= 1
            self._tickets.remove(ticket)
            ticket.ended = True
            # An exponential average of request time is the Retry-After when nothing better is known.
            self._mean_request_s = 0.8 * self._mean_request_s + 0.2 * (self._clock() - start)

    def _left_s(self) -> list[float]:
        """Seconds of synthesis left to each synthesizing request that has started, least first (inf: unknown)."""
        per_token = self._throughput.seconds_per_token
        left = [t.remaining_tokens * per_token if t.remaining_tokens is not None and per_token > 0 else math.inf
                for t in self._tickets if t.started and not t.ended]
        return sorted(left)

    def _first_audio_s(self, synthesizing: int) -> float:
        """When a request arriving with ``synthesizing`` requests ahead of it would hear its first audio."""
        if synthesizing < self._listeners:
            return 0.0
        per_token = self._throughput.seconds_per_token
        left = self._left_s()
        ahead = synthesizing - self._listeners  # queued before it: each takes the next place that frees
        if per_token <= 0 or ahead >= len(left):
            return math.inf
        return left[ahead] + self.first_tokens * per_token

    def retry_after_s(self) -> int:
        """Seconds until a place is likely free: when the next synthesizing request ends, else a mean request."""
        left = [s for s in self._left_s() if math.isfinite(s)]
        seconds = left[0] if left else self._mean_request_s
        return max(1, min(60, math.ceil(seconds)))

    def start(self, ticket: Ticket) -> None:
        """``ticket``'s first chunk got a slot: it holds a listener's place from now."""
        ticket.started = True


    def start_playing(self) -> None:
        """A request's first audio has left."""
        self._playing += 1

    def stop_playing(self) -> None:
        """A playing request's synthesis has ended."""
        self._playing -= 1

    def holds(self, first: bool) -> bool:
        """Whether a chunk (``first``: a request's first, whose ticket has not started) must wait for a place now."""
        return first and self.started >= self._listeners
