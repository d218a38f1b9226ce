"""The lifecycle manager with a fake state holder: windows, serialization, no stampede."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path

import pytest

import lifecycle.manager as manager_module
from lifecycle.manager import Busy, LifecycleManager, NotReady
from lifecycle.states import State
from tests.clock import FakeClock


class Holder:
    """A Reclaimable whose state is a flag; counts calls and refuses misuse loudly."""

    def __init__(self, restore_s: float = 0.05, fail_restores: int = 0) -> None:
        self.loaded = False
        self.restores = 0
        self.releases = 0
        self.restore_s = restore_s
        self.fail_restores = fail_restores
        self.users = 0
        self._lock = threading.Lock()

    def restore(self) -> dict[str, float]:
        with self._lock:
            assert not self.loaded
        time.sleep(self.restore_s)
        if self.fail_restores:
            self.fail_restores -= 1
            raise RuntimeError("disk on fire")
        self.loaded = True
        self.restores += 1
        return {"total_s": self.restore_s}

    def release(self) -> None:
        assert self.users == 0, "released while in use"
        self.loaded = False
        self.releases += 1

    def files(self) -> list[Path]:
        return []

    def intact(self) -> bool:
        return True

    def use(self) -> None:
        assert self.loaded, "used while released"


@pytest.fixture(autouse=True)
def trims(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """A release's gc.collect + malloc_trim, counted instead of run: in a pytest process whose heap holds
    earlier tests' models a collection takes ~0.2 s (40 s over the race test's releases, and enough for the
    windows below to see RELEASING where they wait for RELEASED). What is tested is the lock and the windows;
    the trim itself is tested live (tests/lifecycle/test_release_live.py)."""
    calls: list[bool] = []
    monkeypatch.setattr(manager_module.trim, "collect_and_trim", lambda: calls.append(True) or True)
    return calls


def run(coro: object) -> object:
    return asyncio.run(coro)  # type: ignore[arg-type]


def test_release_after_the_window_and_not_before() -> None:
    async def scenario() -> None:
        clock = FakeClock()
        holder = Holder(restore_s=0.0)
        manager = LifecycleManager(holder, quiet_window_s=45.0, evict_files=False, clock=clock)
        await manager.start()
        clock.advance(44.9)
        assert not await manager.release_if_quiet()
        assert manager.state is State.WARM and manager.snapshot()["idle_for_s"] == 44.9
        clock.advance(0.1)
        await manager.release_if_quiet()  # or the watcher's own tick, if it came first
        assert manager.state is State.RELEASED and holder.releases == 1
        await manager.stop()

    run(scenario())


def test_the_watcher_releases_by_itself() -> None:
    async def scenario() -> None:
        holder = Holder(restore_s=0.0)
        manager = LifecycleManager(holder, quiet_window_s=0.04, evict_files=False)
        await manager.start()
        for _ in range(500):
            await asyncio.sleep(0.01)
            if manager.state is State.RELEASED:
                break
        assert manager.state is State.RELEASED and holder.releases == 1
        await manager.stop()

    run(scenario())


def test_zero_window_never_releases() -> None:
    async def scenario() -> None:
        clock = FakeClock()
        manager = LifecycleManager(Holder(restore_s=0.0), quiet_window_s=0, evict_files=False, clock=clock)
        await manager.start()
        clock.advance(3600.0)
        assert not await manager.release_if_quiet()
        assert manager.state is State.WARM
        await manager.stop()

    run(scenario())


def test_a_request_longer_than_the_window_is_never_released_under() -> None:
    async def scenario() -> None:
        clock = FakeClock()
        holder = Holder(restore_s=0.0)
        manager = LifecycleManager(holder, quiet_window_s=45.0, evict_files=False, clock=clock)
        await manager.start()
        async with manager.in_use():
            holder.users += 1
            for _ in range(10):
                clock.advance(10.0)
                assert not await manager.release_if_quiet()
                holder.use()
                assert manager.state is State.WARM
            holder.users -= 1
        clock.advance(44.0)  # the window counts from the request's end
        assert not await manager.release_if_quiet()
        clock.advance(1.0)
        await manager.release_if_quiet()
        assert manager.state is State.RELEASED
        await manager.stop()

    run(scenario())


def test_concurrent_arrivals_share_one_restore() -> None:
    async def scenario() -> None:
        holder = Holder(restore_s=0.2)
        manager = LifecycleManager(holder, quiet_window_s=0, evict_files=False)
        await manager.start()
        assert await manager.release()

        async def request() -> None:
            async with manager.in_use():
                holder.use()

        await asyncio.gather(*(request() for _ in range(20)))
        assert holder.restores == 2  # the start, then exactly one restore for 20 arrivals
        assert manager.machine.counts["released->restoring"] == 1
        await manager.stop()

    run(scenario())


def test_failed_restore_is_retried_by_the_next_request() -> None:
    async def scenario() -> None:
        holder = Holder(fail_restores=0)
        manager = LifecycleManager(holder, quiet_window_s=0, evict_files=False)
        await manager.start()
        await manager.release()
        holder.fail_restores = 1
        with pytest.raises(NotReady):
            async with manager.in_use():
                pass
        assert manager.state is State.FAILED and "disk on fire" in (manager.last_error or "")
        async with manager.in_use():
            holder.use()
        assert manager.state is State.WARM
        await manager.stop()

    run(scenario())


def test_manual_release_refuses_while_in_flight() -> None:
    async def scenario() -> None:
        manager = LifecycleManager(Holder(), quiet_window_s=0, evict_files=False)
        await manager.start()
        async with manager.in_use():
            with pytest.raises(Busy):
                await manager.release(manual=True)
        assert await manager.release(manual=True)
        await manager.stop()

    run(scenario())


def test_hundreds_of_cycles_with_requests_landing_at_the_release_moment(trims: list[bool]) -> None:
    """Requests race the watcher's release: none may see released state, none may be lost."""

    async def scenario() -> None:
        holder = Holder(restore_s=0.001)
        manager = LifecycleManager(holder, quiet_window_s=0.01, evict_files=False)
        await manager.start()
        served = 0

        async def request(delay: float) -> None:
            nonlocal served
            await asyncio.sleep(delay)
            async with manager.in_use():
                holder.users += 1
                holder.use()
                await asyncio.sleep(0.001)
                holder.use()
                holder.users -= 1
            served += 1

        for cycle in range(200):
            # Wait for the quiet window to elapse, then land a burst right around the release.
            await asyncio.sleep(0.012 + (cycle % 7) * 0.003)
            await asyncio.gather(*(request(j * 0.001) for j in range(4)))
        assert served == 800
        assert holder.releases >= 60 and holder.restores >= 60
        assert len(trims) == holder.releases
        await manager.stop()

    run(scenario())


def test_a_failed_restore_is_retried_in_the_background_with_no_traffic() -> None:
    async def scenario() -> None:
        holder = Holder(restore_s=0.01)
        manager = LifecycleManager(holder, quiet_window_s=0, evict_files=False, backoff_s=0.1, max_failures=3)
        await manager.start()
        await manager.release()
        holder.fail_restores = 2
        with pytest.raises(NotReady):
            async with manager.in_use():
                pass
        assert manager.state is State.FAILED and manager.alive
        for _ in range(100):  # nothing but the recovery task: 0.1 s, then 0.2 s
            await asyncio.sleep(0.02)
            if manager.state is State.WARM:
                break
        assert manager.state is State.WARM and manager.alive and manager.failures == 0
        assert manager.machine.counts["failed->restoring"] == 2
        async with manager.in_use():
            holder.use()
        await manager.stop()

    run(scenario())


def test_a_first_load_that_fails_does_not_raise_and_recovers() -> None:
    async def scenario() -> None:
        holder = Holder(restore_s=0.01, fail_restores=1)
        manager = LifecycleManager(holder, quiet_window_s=0, evict_files=False, backoff_s=0.05, max_failures=3)
        await manager.start()
        assert manager.state is State.FAILED
        await asyncio.sleep(0.3)
        assert manager.state is State.WARM and holder.restores == 1
        await manager.stop()

    run(scenario())


def test_failures_in_a_row_turn_liveness_off_and_a_later_success_turns_it_on() -> None:
    async def scenario() -> None:
        holder = Holder(restore_s=0.01, fail_restores=10**6)
        manager = LifecycleManager(holder, quiet_window_s=0, evict_files=False, backoff_s=0.05, max_failures=3)
        await manager.start()
        for _ in range(100):  # waits of 0.05 and 0.1 s, then the third failure
            await asyncio.sleep(0.02)
            if manager.state is State.BROKEN:
                break
        assert manager.state is State.BROKEN and not manager.alive and manager.failures == 3
        with pytest.raises(NotReady, match="3 times in a row"):  # refused at once, no restore of its own
            async with manager.in_use():
                pass
        holder.fail_restores = 0  # the cause passes: the retries, still going, bring it back
        for _ in range(100):
            await asyncio.sleep(0.05)
            if manager.alive:
                break
        assert manager.state is State.WARM and manager.alive
        await manager.stop()

    run(scenario())


def test_stop_ends_the_retries() -> None:
    async def scenario() -> None:
        holder = Holder(restore_s=0.01, fail_restores=10**6)
        manager = LifecycleManager(holder, quiet_window_s=0, evict_files=False, backoff_s=0.05, max_failures=0)
        await manager.start()
        await asyncio.sleep(0.2)
        # Failed, or in a retry (on a busy machine one may be running at any moment): never given up on.
        assert manager.state in (State.FAILED, State.RESTORING) and manager.alive  # 0: liveness never turns off
        assert holder.fail_restores < 10**6 - 1  # retried at least once
        await manager.stop()
        await asyncio.sleep(0.1)  # a retry that was running in its worker thread ends
        tried = holder.fail_restores
        await asyncio.sleep(0.3)
        assert holder.fail_restores == tried

    run(scenario())
