"""The lifecycle manager: warm → released after a quiet window, released → warm on demand.

Threads and tasks:
- Requests wrap their whole life in `in_use` (on the event loop). The in-flight count rises
  before the state is checked, and the watcher checks the count and moves to RELEASING with no
  ``await`` in between, so a request either keeps the state from being released or sees that a
  release has begun and waits for it.
- `_lock` (an asyncio lock) serializes release and restore: requests that arrive while
  released all wait for one restore (no stampede); a request arriving during a release waits
  for the release to finish, then restores.
- The `Reclaimable`'s `release`/`restore` run in a worker thread so the loop keeps serving
  health checks and refusing overload while they run.
- A load or restore that fails starts the recovery task (`_recover`), which retries under the same
  lock after a wait that doubles from ``backoff_s`` up to `MAX_BACKOFF_S`, so readiness comes back
  with no request to trigger it. After ``max_failures`` failures in a row the state is BROKEN:
  `alive` turns False (liveness fails, the platform restarts the container) and requests are refused
  at once; the retries go on at the longest wait, and one that succeeds makes it WARM again.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import anyio.to_thread

from lifecycle import pagecache, trim
from lifecycle.meter import Meter, Reading
from lifecycle.protocol import Reclaimable
from lifecycle.states import State, StateMachine, Transition

log = logging.getLogger(__name__)

BACKOFF_S = 2.0
"""Seconds before the first background retry of a load or restore that failed; the wait doubles after each."""
MAX_BACKOFF_S = 60.0
"""The longest wait between background retries."""
MAX_FAILURES = 5
"""Loads or restores failed in a row after which the state is BROKEN and liveness fails, so the platform restarts
the container (the retries go on meanwhile)."""
# Why 5: with the backoff doubling from `BACKOFF_S`, the fifth failure in a row comes 2 + 4 + 8 + 16 = 30 s of waits
# after the first. A passing fault (memory short for a moment) has that long to clear before the instance pays a
# restart and a cold start, and one that stays broken is replaced within about a minute (those 30 s, then the
# liveness probe's 3 failures 10 s apart in deploy/). No deployment calls for another trade, so it is a constant,
# not a setting (TTS_RECOVERY_ATTEMPTS was removed).


class NotReady(RuntimeError):
    """Inference state could not be built; the request cannot be served now."""


class Busy(RuntimeError):
    """A manual release was asked for while requests are in flight."""


@dataclass(frozen=True)
class Event:
    """A transition with its cost: what observers (metrics, logs) receive."""

    transition: Transition
    seconds: float
    """Duration of the work the transition ends (release, restore, load); 0 for a start."""
    memory_before: Reading
    memory_after: Reading


class LifecycleManager:
    def __init__(self, target: Reclaimable, *, quiet_window_s: float, meter: Meter | None = None,
                 evict_files: bool = True, on_event: Callable[[Event], None] | None = None,
                 backoff_s: float = BACKOFF_S, max_failures: int = MAX_FAILURES,
                 clock: Callable[[], float] = time.monotonic) -> None:
        """``clock``: what the quiet window is measured on (a test passes its own)."""
        self.target = target
        self.quiet_window_s = quiet_window_s
        self.meter = meter or Meter()
        self.evict_files = evict_files
        self.machine = StateMachine()
        self._on_event = on_event
        self._lock = asyncio.Lock()
        self._in_flight = 0
        self._clock = clock
        self._idle_since = clock()
        self._watcher: asyncio.Task[None] | None = None
        self.last_restore_s: float | None = None
        self.last_release_s: float | None = None
        self.last_restore_parts: dict[str, float] = {}
        self.last_error: str | None = None
        self.backoff_s = backoff_s
        self.max_failures = max_failures
        """Failures in a row after which the state is BROKEN (`MAX_FAILURES`); 0 never (tests only)."""
        self.failures = 0
        """Loads and restores failed in a row (0 once one succeeds)."""
        self._recovery: asyncio.Task[None] | None = None

    @property
    def state(self) -> State:
        return self.machine.state

    @property
    def alive(self) -> bool:
        """False once loads or restores have failed ``max_failures`` times in a row (for liveness)."""
        # The count, not the state: a retry from BROKEN passes through RESTORING, and liveness must not
        # flap back to healthy for the length of an attempt that may fail again.
        return not 0 < self.max_failures <= self.failures

    @property
    def in_flight(self) -> int:
        return self._in_flight

    async def start(self) -> None:
        """LOADING → WARM (the first load), then watch for quiet windows. A load that fails does not
        raise: the state is FAILED (not ready) and the recovery task retries it in the background."""
        if self.quiet_window_s > 0:
            self._watcher = asyncio.create_task(self._watch(), name="lifecycle-watcher")
        async with self._lock:
            await self._restore_locked()

    async def stop(self) -> None:
        for task in (self._watcher, self._recovery):
            if task is not None:
                task.cancel()
                try:
                    await task
                except asyncio.CancelledError:
                    pass
        self._watcher = self._recovery = None

    @asynccontextmanager
    async def in_use(self) -> AsyncIterator[None]:
        """Hold the state warm for the block; restore it first if it was released."""
        self._in_flight += 1
        try:
            if self.machine.state is State.WARM and not self.target.intact():
                self._lost()
            if self.machine.state is not State.WARM:
                await self._ensure_warm()
            yield
        finally:
            self._in_flight -= 1
            if self._in_flight == 0:
                self._idle_since = self._clock()

    async def release(self, *, manual: bool = False) -> bool:
        """Release now if nothing is in flight; False if there was nothing to release.

        ``manual`` raises `Busy` instead of waiting when requests are in flight.
        """
        if manual and self._in_flight:
            raise Busy(f"{self._in_flight} requests in flight")
        async with self._lock:
            if self._in_flight or self.machine.state is not State.WARM:
                if manual and self._in_flight:
                    raise Busy(f"{self._in_flight} requests in flight")
                return False
            await self._release_locked()
            return True

    def snapshot(self) -> dict[str, Any]:
        """State for the lifecycle endpoint."""
        idle_for = 0.0 if self._in_flight else self._clock() - self._idle_since
        return {
            "state": self.machine.state.value,
            "since": self.machine.since,
            "quiet_window_s": self.quiet_window_s,
            "in_flight": self._in_flight,
            "idle_for_s": round(idle_for, 3),
            "transitions": dict(self.machine.counts),
            "last_restore_s": self.last_restore_s,
            "last_restore_parts": self.last_restore_parts,
            "last_release_s": self.last_release_s,
            "last_error": self.last_error,
            "failures_in_a_row": self.failures,
            "memory": self.meter.read().as_dict(),
        }

    def _lost(self) -> None:
        """WARM → FAILED: the state vanished without a release (its process died); the caller restores."""
        self.last_error = "inference state lost without a release (the inference process ended)"
        log.error("%s; restoring it for the next request", self.last_error)
        self._emit(self.machine.move(State.FAILED), 0.0, self.meter.read())

    async def _ensure_warm(self) -> None:
        if not self.alive:
            raise NotReady(f"inference state could not be built {self.failures} times in a row: {self.last_error}")
        async with self._lock:
            if self.machine.state is State.WARM:
                return
            if self.machine.state is State.LOADING:
                raise NotReady("the model is still loading")
            if not await self._restore_locked():
                raise NotReady(f"inference state could not be restored: {self.last_error}")

    async def _restore_locked(self) -> bool:
        """Build the state (the first load from LOADING, else through RESTORING); True if it is WARM.

        A failure moves to FAILED, or BROKEN at ``max_failures`` in a row, and starts the recovery task."""
        before = self.meter.read()
        if self.machine.state is not State.LOADING:
            self.machine.move(State.RESTORING)
        started = time.perf_counter()
        try:
            parts = await anyio.to_thread.run_sync(self.target.restore)
        except Exception as exc:
            self.failures += 1
            self.last_error = f"{type(exc).__name__}: {exc}"
            log.exception("building the inference state failed (%d in a row)", self.failures)
            broken = 0 < self.max_failures <= self.failures
            if broken:
                log.error("%d failures in a row: liveness now fails so the container is restarted", self.failures)
            self._emit(self.machine.move(State.BROKEN if broken else State.FAILED), time.perf_counter() - started,
                       before)
            if self._recovery is None or self._recovery.done():
                self._recovery = asyncio.create_task(self._recover(), name="lifecycle-recovery")
            return False
        self.last_restore_parts = parts
        self.failures = 0
        first = self.machine.state is State.LOADING
        if not first:
            self.last_restore_s = time.perf_counter() - started
        self._emit(self.machine.move(State.WARM), time.perf_counter() - started, before)
        self._idle_since = self._clock()
        return True

    async def _recover(self) -> None:
        """Retry a failed load or restore in the background until the state is built (see the module docstring)."""
        while self.machine.state in (State.FAILED, State.BROKEN):
            wait = min(MAX_BACKOFF_S, self.backoff_s * 2 ** max(0, self.failures - 1))
            log.info("retrying in %.1f s (failure %d in a row)", wait, self.failures)
            await asyncio.sleep(wait)
            async with self._lock:
                if self.machine.state in (State.FAILED, State.BROKEN):
                    await self._restore_locked()  # a failure here sees this task running: no second one

    async def _release_locked(self) -> None:
        before = self.meter.read()
        self.machine.move(State.RELEASING)
        started = time.perf_counter()
        try:
            await anyio.to_thread.run_sync(self._release_blocking)
        except Exception as exc:
            self.last_error = f"{type(exc).__name__}: {exc}"
            log.exception("release failed")
            self._emit(self.machine.move(State.FAILED), time.perf_counter() - started, before)
            return
        self.last_release_s = time.perf_counter() - started
        self._emit(self.machine.move(State.RELEASED), self.last_release_s, before)

    def _release_blocking(self) -> None:
        files = self.target.files()
        self.target.release()
        trim.collect_and_trim()
        if self.evict_files:
            # What the released state was built from, what this process itself read to run (the
            # modules it imported), and the clean pages of the libraries it keeps mapped.
            pagecache.evict(files + pagecache.loaded_files())
            pagecache.page_out_mappings()

    async def release_if_quiet(self) -> bool:
        """Release if nothing has been in flight for the quiet window (what the watcher does at every tick); False
        if it did not."""
        quiet = 0 < self.quiet_window_s <= self._clock() - self._idle_since
        # Checked and acted on with no await in between: see the module docstring.
        if quiet and self._in_flight == 0 and self.machine.state is State.WARM and not self._lock.locked():
            return await self.release()
        return False

    async def _watch(self) -> None:
        tick = min(1.0, max(0.01, self.quiet_window_s / 4))
        while True:
            await asyncio.sleep(tick)
            await self.release_if_quiet()

    def _emit(self, transition: Transition, seconds: float, before: Reading) -> None:
        after = self.meter.read()
        log.info("lifecycle now %s: %.3f s, billable %.0f MB -> %.0f MB, rss %.0f MB -> %.0f MB",
                 transition.target.value, seconds, before.billable / 1e6, after.billable / 1e6,
                 before.rss / 1e6, after.rss / 1e6)
        if self._on_event is not None:
            self._on_event(Event(transition, seconds, before, after))
