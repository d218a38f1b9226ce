"""A server's billable memory, read from a memory cgroup that holds that server and nothing else.

A platform that meters memory bills the container's cgroup, page cache included. On a development machine
every process shares one cgroup, so the harness (running as root) makes a child memory cgroup per server
process, under its own cgroup so any limit above still applies, and the server joins it before it loads
anything (`MemoryCgroup.wrap`). The server's own ``/v1/lifecycle`` meter then reads the same group.

Page cache is charged to the cgroup that first reads a page: the runner evicts the model and compile-cache files
before each server starts (`lifecycle.pagecache.evict`) so each server pays for its own reads, as a fresh container
would. Shared libraries cannot be evicted while any other process maps them (the runner maps numpy; other servers
and tools map the runtimes), so their pages stay charged elsewhere. In a fresh container they would be the server's,
so the billable figure adds them back: the file pages the server has resident (``RssFile`` in
``/proc/<pid>/status``) less the mapped file pages its own group was charged for (``mapped_file``). The raw cgroup
usage is kept next to it (``cgroup``). The server's process tree counts (it runs the model in a child process): a
library page mapped by both, or a file mapped twice by one (the compile-cache blob under the wide session's primary
form, removed since), is counted once (`lifecycle.proctree.resident_file_bytes`), or the figure errs high.

Where no cgroup can be made (not root, read-only mount, cgroup v2 without the memory controller delegated),
`RssMeter` reads the process's RSS instead and every figure says so: RSS leaves out page cache.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from lifecycle import cgroup, proctree

log = logging.getLogger(__name__)
MB = 1024.0 * 1024.0
RECOUNT_S = 10.0
"""Seconds between two counts of the file pages the tree maps more than once (`MemoryCgroup._counted_twice`)."""
CGROUP_ROOT = Path("/sys/fs/cgroup")


@dataclass(frozen=True)
class Reading:
    """One reading, bytes; ``t`` is ``time.monotonic()``."""

    t: float
    billable: int
    """Cgroup usage (page cache included) plus the server's resident file pages charged to other groups; RSS
    under the fallback."""
    anon: int | None
    file: int | None
    """Page cache charged to the group."""
    mapped: int | None
    """Page cache mapped into the process (cannot be dropped while mapped)."""
    rss: int | None
    """Resident set of the server process."""
    cgroup: int | None = None
    """Raw cgroup usage (None under the fallback)."""
    uncharged_file: int | None = None
    """Resident file pages of the server charged to other groups (added to ``billable``)."""

    @property
    def billable_mb(self) -> float:
        return self.billable / MB


class Meter(Protocol):
    """Reads one server's memory."""

    source: str
    """What ``billable`` means here, for the report."""
    pid: int | None
    """The server process (set once it is spawned)."""

    def read(self) -> Reading: ...

    def peak(self) -> int:
        """Highest billable bytes since the server started."""
        ...


def _own_memory_cgroup(root: Path) -> tuple[Path, int] | None:
    """This process's own memory cgroup directory and its version, if it can be found (v1 first)."""
    own = sorted(cgroup.groups("memory", root, mounts=False), key=lambda g: g.version)
    found = next((g for g in own if (g.path / ("memory.usage_in_bytes" if g.version == 1 else "cgroup.controllers"))
                  .is_file()), None)
    return (found.path, found.version) if found is not None else None


class MemoryCgroup:
    """A child memory cgroup for one server process; `remove` it once the process has exited."""

    def __init__(self, path: Path, version: int) -> None:
        self.path = path
        self.version = version
        self.pid: int | None = None
        self._uncharged = 0
        self._twice = 0
        self._recounted = float("-inf")
        self.source = (f"cgroup v1 {path}/memory.usage_in_bytes (page cache included) + the server's resident "
                       "file pages charged to other groups" if version == 1
                       else f"cgroup v2 {path}/memory.current (page cache included) + the server's resident file "
                            "pages charged to other groups")

    @classmethod
    def create(cls, label: str, root: Path = CGROUP_ROOT) -> MemoryCgroup | None:
        """A fresh group next to nothing else, or None (logged) when cgroups are not writable here."""
        own = _own_memory_cgroup(root)
        if own is None:
            log.warning("no memory cgroup found; memory falls back to RSS (page cache not counted)")
            return None
        parent, version = own
        path = parent / f"bench-{label}-{uuid.uuid4().hex[:8]}"
        try:
            path.mkdir()
        except OSError as exc:
            log.warning("cannot create %s (%s); memory falls back to RSS (page cache not counted)", path, exc)
            return None
        probe = "memory.usage_in_bytes" if version == 1 else "memory.current"
        if not (path / probe).is_file():  # cgroup v2 without the memory controller delegated to children
            log.warning("%s has no %s; memory falls back to RSS (page cache not counted)", path, probe)
            path.rmdir()
            return None
        return cls(path, version)

    def wrap(self, argv: Sequence[str]) -> list[str]:
        """``argv`` run by a shell that first moves itself into this group, then execs (same pid)."""
        # The process joins before Python starts, so every page it ever touches is charged here.
        return ["/bin/sh", "-c", 'echo $$ > "$0" && exec "$@"', str(self.path / "cgroup.procs"), *argv]

    def read(self) -> Reading:
        stat = cgroup.read_stat(self.path / "memory.stat")
        rss = proctree.rss(self.pid) if self.pid else None
        if self.version == 1:
            usage = int((self.path / "memory.usage_in_bytes").read_text())
            anon, cache, mapped = stat.get("total_rss"), stat.get("total_cache"), stat.get("total_mapped_file")
        else:
            usage = int((self.path / "memory.current").read_text())
            anon, cache, mapped = stat.get("anon"), stat.get("file"), stat.get("file_mapped")
        rss_file = proctree.status_bytes(self.pid, "RssFile") if self.pid else None
        if rss_file is not None:
            rss_file -= self._counted_twice(rss_file)
        uncharged = max(0, rss_file - (mapped or 0)) if rss_file is not None else 0
        self._uncharged = uncharged
        return Reading(time.monotonic(), usage + uncharged, anon, cache, mapped, rss, usage, uncharged)

    def _counted_twice(self, rss_file: int) -> int:
        """How much of the tree's summed ``RssFile`` maps pages another mapping of the tree already counts
        (`lifecycle.proctree.resident_file_bytes`), refreshed every `RECOUNT_S` (reading every mapping takes tens
        of milliseconds of the harness's CPU, and the figure moves only when something is loaded or freed)."""
        now = time.monotonic()
        if self.pid and now - self._recounted >= RECOUNT_S:
            distinct = proctree.resident_file_bytes(self.pid)
            if distinct is not None:
                self._twice = max(0, rss_file - distinct)
                self._recounted = now
        return self._twice

    def peak(self) -> int:
        """The group's high-water mark plus the latest shared-library correction (it hardly moves)."""
        name = "memory.max_usage_in_bytes" if self.version == 1 else "memory.peak"
        try:
            return int((self.path / name).read_text()) + self._uncharged
        except (OSError, ValueError):
            return self.read().billable

    def remove(self) -> None:
        """Drop the group (its leftover page-cache charges go to the parent); call after the process exits."""
        if self.version == 1:
            try:
                (self.path / "memory.force_empty").write_text("0")
            except OSError:
                pass  # best effort: rmdir reparents whatever is left
        for _ in range(50):
            try:
                self.path.rmdir()
                return
            except FileNotFoundError:
                return
            except OSError:
                time.sleep(0.1)  # the exited process may take a moment to leave the group
        log.warning("could not remove %s", self.path)


class RssMeter:
    """Fallback: the process's RSS, which leaves out page cache; the peak is the highest value read."""

    def __init__(self) -> None:
        self.pid: int | None = None
        self.source = "process RSS (no writable memory cgroup; page cache NOT included)"
        self._peak = 0

    def read(self) -> Reading:
        rss = (proctree.rss(self.pid) if self.pid else None) or 0
        self._peak = max(self._peak, rss)
        return Reading(time.monotonic(), rss, None, None, None, rss)

    def peak(self) -> int:
        if self.pid:
            # The kernel's high-water marks cover moments between readings (summed over the tree:
            # an upper bound, the processes may peak at different times).
            self._peak = max(self._peak, proctree.status_bytes(self.pid, "VmHWM") or 0)
        return self._peak


class Sampler:
    """Reads a meter every ``interval_s`` in a background thread until stopped."""

    def __init__(self, meter: Meter, interval_s: float) -> None:
        self._meter = meter
        self._interval = interval_s
        self._readings: list[Reading] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="memory-sampler", daemon=True)

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> tuple[Reading, ...]:
        """Stop, with one last reading so the series reaches the moment of stopping."""
        if not self._stop.is_set():
            self._stop.set()
            if self._thread.is_alive():
                self._thread.join()
            try:
                self._readings.append(self._meter.read())
            except (OSError, ValueError):
                pass
        return tuple(self._readings)

    @property
    def readings(self) -> tuple[Reading, ...]:
        return tuple(self._readings)

    def _run(self) -> None:
        while True:
            try:
                self._readings.append(self._meter.read())
            except (OSError, ValueError) as exc:  # the group vanishes when the server exits mid-sample
                log.debug("memory reading failed: %s", exc)
            if self._stop.wait(self._interval):
                return


def files_under(directory: Path) -> list[Path]:
    return [p for p in directory.rglob("*") if p.is_file()] if directory.is_dir() else []
