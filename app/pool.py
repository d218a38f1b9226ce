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
  waiter with the earliest deadline (``deadline`` scheduler; ties to the older request) or to the
  one that asked first (``fifo``, the pool as it was). A new request's first chunk thus overtakes
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
- The wide slot (``run(..., wide=True)``, where the runtime has one: `app.runtime.protocol.WIDE`): a chunk that
  finds every slot free and nobody waiting takes them all and runs once on the runtime's wide session (all
  the pool's threads on one inference); chunks that come meanwhile wait for it like for any busy slot, and
  where any slot is busy the chunk takes a plain slot at once. Its speed is not a stream's, so it does not
  enter the measured seconds per token or the real-time capacity. Whether it pays is measured, not assumed
  (``wide_trials``): a request's later chunks that find the pool idle run wide, then on one plain slot of the idle
  pool, ``wide_trials`` times each (later chunks have playback slack to spend on a trial; first chunks run wide
  meanwhile); from then on a chunk that finds the pool idle, first or later, runs wide only where the wide session's
  recent seconds per audio-second made are below `WIDE_GAIN` times the lone stream's (one lone later chunk in
  `WIDE_RETRY` takes the other path, to keep its figure current). Priced by the audio the model made (its edge
  silence included), not by tokens: an inference's time follows the audio its decoder makes, and a short chunk's
  fixed part (the leading pad alone is 0.3-0.5 s of audio) made its seconds per token 2.3 x a long one's on the
  AVX2 EPYC, so per token the path whose trials drew the shorter chunks looked the slower: there the tuned server,
  one client going through the corpus, turned its wide session off at 0.047 against 0.051 s per token, and one
  closed-loop client got 1.22 audio-s per s against 2.11 with the trials off (bench/results/latency-20261204-tuned);
  per audio-second made the wide session took 0.61-0.71 of one stream's time over 6-72 tokens
  (bench/results/floor-20261204). On the 16-vCPU Xeon of 2026-12-04 (a gVisor sandbox) the server,
  whose lone requests then ran on the bridge with 16 threads, made 2.7 x less audio per CPU-second at one client
  than the same 8 x 2 pool without a wide session (bench/results/device-20261204-xeon16-8x2); on 2 vCPUs the wide
  session is the faster (README, "How it works").
- The express lane (``express`` > 0, where ``express_ok()``: `app.engine` allows it where the runtime serves from ONNX
  Runtime, whose session runs concurrent calls; OpenVINO's executor would only queue a call beyond its streams): a
  first chunk that finds no slot free does not wait for a running chunk to end; it runs at once as one inference
  beyond the pool's slots (slot numbers from ``slots`` on, which the runtime runs concurrently on one of its sessions),
  on CPUs the running chunks then share with it for its short while, at most ``express`` at a time; one that comes
  while every lane is taken waits as before and takes the first lane or slot to free. Its speed is not a stream's
  (it runs oversubscribed), so like the wide slot it enters neither the measured seconds per token nor the capacity.
- Chunk sizes from the same clock: `Playback.chunk_bound` gives a request's next later chunk as many
  tokens as the pool infers (at its measured seconds per token) in that request's slack, between the
  first chunk's bound and the largest chunk; the engine cuts the chunk when it is due (`app.engine`).
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import math
import time
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TypeVar

import anyio
import anyio.to_thread

from app.errors import Overloaded
from app.runtime.protocol import WIDE
from app.settings import SCHEDULERS

T = TypeVar("T")

RATE_MEMORY = 0.2
"""Weight of the newest inference in the exponential averages of speed."""
MIN_OBSERVED = 4
"""Inferences seen before the measured capacity is trusted for admission."""
WIDE_GAIN = 0.9
"""The wide session keeps a lone chunk only while its seconds per audio-second made are below this times a lone
stream's: it holds every slot, so it must be clearly faster, not within noise."""
WIDE_SAMPLES = 8
"""Recent inferences per path (wide, lone stream) whose seconds per audio-second made decide."""
WIDE_RETRY = 50
"""Once decided, one lone later chunk in this many runs on the path not taken, so its figure follows the machine
(a noisy neighbour during the trials, say)."""


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

    def slack_s(self) -> float:
        """Seconds until the listener runs dry, less the margin: audio sent minus playback elapsed (0 before
        the first audio); negative once the next chunk can no longer arrive in time."""
        if self.started is None:
            return 0.0
        return self.started + self.sent_s - time.monotonic() - self.pool.margin_s

    def chunk_bound(self, fallback: int, *, floor: int, ceiling: int) -> int:
        """Token bound for this request's next later chunk: as many tokens as the pool infers in the slack.

        A request with seconds of audio buffered gets a long chunk (fewer inferences, each paying its
        fixed part once, and longer stretches of natural prosody); one near its deadline a short one,
        never shorter than ``floor`` (the first chunk's bound: below it the fixed part of every
        inference costs more than the deadline gains) nor longer than ``ceiling``. ``fallback`` until
        the pool has measured its speed, before the first audio, and while the pool does not keep up with
        its listeners (`StreamPool.keeps_up`): then every request is short of slack, shorter chunks would
        only add inferences, each paying its fixed part, and the listeners would get less audio, not more.
        """
        per_token = self.pool.measured_seconds_per_token
        if per_token is None or self.started is None or not self.pool.keeps_up():
            return fallback
        return max(floor, min(ceiling, int(self.slack_s() / per_token)))

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
    def __init__(self, slots: int, queue_size: int, *, scheduler: str = "deadline", margin_s: float = 1.0,
                 realtime_factor: float = 0.0, slack_headroom: float = 0.0, first_credit_s: float = 0.0,
                 wide_trials: int = 0, express: int = 0, max_hold_s: float = 0.0) -> None:
        if slots < 1:
            raise ValueError("a pool needs at least one slot")
        if express < 0:
            raise ValueError("express lanes cannot be negative")
        if scheduler not in SCHEDULERS:
            raise ValueError(f"scheduler must be one of {SCHEDULERS}, not {scheduler!r}")
        self.slots = slots
        self.queue_size = queue_size
        self.scheduler = scheduler
        self.margin_s = margin_s
        self.first_credit_s = first_credit_s
        """A first chunk counts as due this long before it arrives (`app.settings.Settings.first_chunk_credit_s`)."""
        self.realtime_factor = realtime_factor
        self.max_hold_s = max_hold_s
        """Longest a first chunk is held for real-time capacity before it is scheduled as if admission were off
        (0: no bound)."""
        self.slack_headroom = slack_headroom
        """`keeps_up`'s factor; 0 counts the pool as keeping up whatever its load."""
        self._free = list(range(slots))
        self.express = express
        """Express lanes: first chunks that may run beyond the slots at once (module docstring)."""
        self._express_free = list(reversed(range(slots, slots + express)))  # popped from the end: lowest first
        self.express_ok: Callable[[], bool] = lambda: True
        """Whether the runtime serving now runs an express lane concurrently (`app.engine` sets it)."""
        self._waiters: list[_Waiter] = []
        self._limiter = anyio.CapacityLimiter(slots + express)
        self._admitted = 0
        self._busy = 0
        self._playing = 0
        self._mean_request_s = 1.0
        self._orders = itertools.count()
        self._arrivals = itertools.count()
        self.seconds_per_token = 0.0
        """Average inference seconds per token (0 until measured); prices a chunk in `Playback.due`."""
        self._priced = 0
        self._audio_mean = 0.0
        self._seconds_mean = 0.0
        """Averages of the audio an inference makes and of its seconds (`_observe`); their ratio is a stream's rate."""
        self._observed = 0
        self.granted = {"first": 0, "later": 0, "wide": 0, "express": 0}
        """Slots granted to first chunks and to later ones, and of those, how many ran wide (every slot held for
        the wide session) and how many first chunks on an express lane; for tests and the info endpoint."""
        self.held_back = 0
        """First chunks that waited for real-time capacity."""
        self.hold_expired = 0
        """Of those, how many were scheduled once ``max_hold_s`` had passed, capacity or not."""
        self.wide_trials = wide_trials
        """Inferences of each path (wide, one stream of the idle pool) measured before a chunk that finds the pool
        idle is sent by their speed; 0 sends every such chunk wide, unmeasured."""
        self._lone: dict[str, deque[tuple[float, float]]] = {
            "wide": deque(maxlen=WIDE_SAMPLES), "stream": deque(maxlen=WIDE_SAMPLES)}
        self._lone_chunks = 0
        self.measurable: Callable[[], bool] = lambda: True
        """Whether a lone chunk's speed may price the two paths now: the engine makes it False while its runtime's
        bridge serves (every slot and the wide session are then the same session, which says nothing of one
        stream of the primary against the wide session)."""

    @property
    def capacity(self) -> int:
        return self.slots + self.queue_size

    @property
    def admitted(self) -> int:
        return self._admitted

    @property
    def busy(self) -> int:
        """Slots held by an inference now (all of them while one runs wide)."""
        return self._busy

    @property
    def express_busy(self) -> int:
        """Express lanes running a first chunk now."""
        return self.express - len(self._express_free)

    @property
    def waiting(self) -> int:
        """Chunks waiting for a slot."""
        return len(self._waiters)

    @property
    def playing(self) -> int:
        """Requests whose first audio has left and whose synthesis has not ended."""
        return self._playing

    @property
    def measured_seconds_per_token(self) -> float | None:
        """`seconds_per_token` once `MIN_OBSERVED` inferences have priced it; None until then."""
        if self._priced < MIN_OBSERVED or self.seconds_per_token <= 0:
            return None
        return self.seconds_per_token

    @property
    def realtime_capacity(self) -> float | None:
        """Audio-seconds per second the pool makes with every slot busy; None until measured."""
        if self._observed < MIN_OBSERVED:
            return None
        return self.slots * self._audio_mean / self._seconds_mean

    def keeps_up(self, headroom: float | None = None) -> bool:
        """Whether the pool makes audio at least ``headroom`` (default `slack_headroom`) times as fast as its requests
        listen to it at 1x, by its measured real-time capacity: every admitted request counts, playing or still
        waiting for its first chunk (each will need 1 audio-second per second). True until the capacity is measured,
        and where the headroom is 0."""
        capacity = self.realtime_capacity
        headroom = self.slack_headroom if headroom is None else headroom
        if capacity is None or headroom <= 0:
            return True
        return capacity >= headroom * max(1, self._playing, self._admitted)

    def lone_rate(self, path: str) -> float | None:
        """Recent seconds per audio-second made (per token where `run` was given no ``made_s``) of ``path``
        (``wide`` or ``stream``) for a chunk alone on the pool; None before any."""
        found = self._lone[path]
        made = sum(m for _, m in found)
        return sum(s for s, _ in found) / made if made else None

    @property
    def wide_state(self) -> str:
        """``measuring`` (`wide_trials` inferences of each path not yet seen), ``on`` or ``off`` (by the measured
        speeds), or ``unmeasured`` (``wide_trials`` 0: every lone chunk runs wide)."""
        if self.wide_trials <= 0:
            return "unmeasured"
        if self._measuring():
            return "measuring"
        return "on" if self._wide_pays() else "off"

    def _measuring(self) -> bool:
        """Whether either path has fewer than `wide_trials` samples."""
        return min(len(found) for found in self._lone.values()) < self.wide_trials

    def _grants(self) -> int:
        return self.granted["first"] + self.granted["later"]

    def _wide_pays(self) -> bool:
        wide, stream = self.lone_rate("wide"), self.lone_rate("stream")
        return wide is not None and stream is not None and wide < WIDE_GAIN * stream

    def _goes_wide(self, first: bool) -> bool:
        """Whether a chunk that finds the pool idle runs wide (see the module docstring). Trials take later chunks
        only, which have playback slack to spend: a first chunk runs wide while measuring, then by the figures."""
        if self.wide_trials <= 0:
            return True
        if self._measuring():
            return first or len(self._lone["wide"]) < self.wide_trials
        if first:
            return self._wide_pays()
        self._lone_chunks += 1
        return self._wide_pays() != (self._lone_chunks % WIDE_RETRY == 0)

    def snapshot(self) -> dict[str, object]:
        return {"scheduler": self.scheduler, "busy": self._busy, "express": self.express,
                "express_busy": self.express_busy, "waiting": self.waiting, "playing": self._playing,
                "admitted": self._admitted, "realtime_capacity": self.realtime_capacity,
                "realtime_factor": self.realtime_factor, "keeps_up": self.keeps_up(),
                "seconds_per_token": self.seconds_per_token,
                "granted": dict(self.granted), "held_back": self.held_back,
                "hold_expired": self.hold_expired,
                "wide": {"state": self.wide_state, "trials": self.wide_trials,
                         "seconds_per_audio_s": self.lone_rate("wide"),
                         "stream_alone_seconds_per_audio_s": self.lone_rate("stream")}}

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
                  audio_s: Callable[[T], float] | None = None, made_s: Callable[[T], float] | None = None,
                  wide: bool = False) -> T:
        """Run ``fn(slot)`` in a worker thread on a free slot, scheduled by ``clock``'s deadline.

        ``tokens`` prices the chunk (its expected inference time counts into its deadline and the
        measured seconds per token); ``audio_s`` reads the audio-seconds a result holds, for the
        measured real-time capacity; ``made_s`` the audio-seconds the model made for it, edge silence included,
        which price a lone chunk's path (tokens where None). With ``wide``, a chunk that finds the whole pool idle
        runs as ``fn(WIDE)`` holding every slot, where that is measured to pay (see the module docstring).
        """
        first = clock is None or clock.started is None
        lone = wide and self._idle(first)
        if lone and self._goes_wide(first):
            slot = self._take_all()
        elif lone:
            slot = self._free.pop()
        else:
            slot = await self._acquire(clock, tokens, first)
        express = self._is_express(slot)
        held = self.slots if slot == WIDE else 0 if express else 1
        self._busy += held
        self.granted["first" if first else "later"] += 1
        self.granted["wide"] += slot == WIDE
        self.granted["express"] += express
        grants = self._grants()
        measurable = lone and not first and self.measurable()
        started = time.monotonic()
        try:
            result = await anyio.to_thread.run_sync(fn, slot, limiter=self._limiter)
        finally:
            self._busy -= held
            self._release(slot)
        elapsed = time.monotonic() - started
        # A lone later chunk's speed counts for its path only if it stayed alone (no other grant while it ran) and
        # the runtime served it from its primary throughout; first chunks are left out, so both paths are priced on
        # the same kind of chunk.
        if measurable and elapsed > 0 and (slot == WIDE or self._grants() == grants) and self.measurable():
            made = made_s(result) if made_s is not None else float(tokens)
            if made > 0:
                self._lone["wide" if slot == WIDE else "stream"].append((elapsed, made))
        if slot != WIDE and not express:
            self._observe(elapsed, tokens, audio_s(result) if audio_s is not None else 0.0)
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

    def _idle(self, first: bool) -> bool:
        """Every slot free, nobody waiting, and the chunk not held for real-time capacity."""
        return len(self._free) == self.slots and not self._waiters and not self._held(first)

    def _take_all(self) -> int:
        self._free.clear()
        return WIDE

    async def _acquire(self, clock: Playback | None, tokens: int, first: bool) -> int:
        order = clock.order if clock is not None else next(self._orders)
        due = clock.due(tokens) if clock is not None else time.monotonic()
        arrival = next(self._arrivals)
        key = (0.0, arrival, order) if self.scheduler == "fifo" else (due, order, arrival)
        if self._free and not self._waiters and not self._held(first):
            return self._free.pop()
        if first and not self._free and self._express_open():
            return self._express_free.pop()
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

    def _is_express(self, slot: int) -> bool:
        return slot >= self.slots

    def _express_open(self) -> bool:
        """Whether a first chunk may take an express lane now (`express_ok`; not under ``fifo``, not while first
        chunks are held for real-time capacity)."""
        return (bool(self._express_free) and self.scheduler != "fifo" and not self._held(True)
                and self.express_ok())

    def _release(self, slot: int) -> None:
        if self._is_express(slot):
            self._express_free.append(slot)
        elif slot == WIDE:
            self._free.extend(range(self.slots))  # it held them all
        else:
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
        while self._waiters and self._express_open():
            firsts = [i for i, w in enumerate(self._waiters) if w.first and not w.future.done()]
            if not firsts:
                break
            index = min(firsts, key=lambda i: self._waiters[i].key)
            waiter = self._waiters.pop(index)
            heapq.heapify(self._waiters)
            waiter.future.set_result(self._express_free.pop())

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
            self._priced += 1
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
