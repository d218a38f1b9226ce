"""What the platform would bill for memory: the container's cgroup meter, page cache included.

cgroup v2: ``memory.current`` with ``anon``/``file``/``file_mapped`` from ``memory.stat``.
cgroup v1: ``memory.usage_in_bytes`` with ``rss``/``cache``/``mapped_file``. The process's own
cgroup is used when it is visible (as on a host), else the mount's root (as in a container).
Where nothing is readable the meter falls back to the process RSS and says so.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from lifecycle import cgroup, proctree


@dataclass(frozen=True)
class Reading:
    """One reading of the memory meters, in bytes."""

    billable: int
    """What a platform metering cgroup memory bills (page cache included)."""
    source: str
    """Which file ``billable`` came from, or ``process rss (no cgroup readable)``."""
    anon: int | None
    """Anonymous memory of the cgroup (heap, runtime buffers)."""
    file: int | None
    """Page cache charged to the cgroup."""
    mapped: int | None
    """Page cache that is mapped into a process (cannot be evicted while mapped)."""
    rss: int
    """Resident set of this process and its children (the inference process, while one runs)."""

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


class Meter:
    def __init__(self, root: Path = Path("/sys/fs/cgroup"), proc: Path = Path("/proc"), pid: int | None = None) -> None:
        self._pid = pid or os.getpid()
        self._dir, self._version = _find(root, proc)

    @property
    def source(self) -> str:
        if self._version == 2:
            return f"cgroup v2 {self._dir}/memory.current"
        if self._version == 1:
            return f"cgroup v1 {self._dir}/memory.usage_in_bytes"
        return "process rss (no cgroup readable)"

    def read(self) -> Reading:
        rss = proctree.rss(self._pid) or 0
        if self._dir is None:
            return Reading(billable=rss, source=self.source, anon=None, file=None, mapped=None, rss=rss)
        stat = cgroup.read_stat(self._dir / "memory.stat")
        if self._version == 2:
            current = int((self._dir / "memory.current").read_text())
            return Reading(current, self.source, stat.get("anon"), stat.get("file"), stat.get("file_mapped"), rss)
        usage = int((self._dir / "memory.usage_in_bytes").read_text())
        return Reading(usage, self.source, stat.get("total_rss", stat.get("rss")),
                       stat.get("total_cache", stat.get("cache")),
                       stat.get("total_mapped_file", stat.get("mapped_file")), rss)


def _find(root: Path, proc: Path) -> tuple[Path | None, int]:
    candidates = cgroup.groups("memory", root, proc)
    found = cgroup.first_with("memory.current", candidates) or cgroup.first_with("memory.usage_in_bytes", candidates)
    if found is None:
        return None, 0
    return found.path, 2 if (found.path / "memory.current").is_file() else 1
