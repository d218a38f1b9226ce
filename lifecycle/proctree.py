"""A process and everything it started (the server and its inference process), measured together.

The model runs in a child of the server, so memory and CPU time read from the server's pid alone
would leave out the part that matters. Each function sums over the process and its living
descendants; a member that ends between the listing and the read is skipped.
"""

from __future__ import annotations

from pathlib import Path

import psutil


def members(pid: int) -> list[psutil.Process]:
    """``pid`` and its living descendants; empty when ``pid`` itself is gone."""
    try:
        root = psutil.Process(pid)
        return [root, *root.children(recursive=True)]
    except psutil.Error:
        return []


def rss(pid: int) -> int | None:
    """Resident set of the tree, bytes; None when ``pid`` is gone."""
    total = None
    for member in members(pid):
        try:
            total = (total or 0) + int(member.memory_info().rss)
        except psutil.Error:
            continue  # ended since the listing
    return total


def status_bytes(pid: int, field: str) -> int | None:
    """A ``kB`` field of ``/proc/<pid>/status`` (``RssFile``, ``VmHWM``), bytes, summed over the tree;
    None when no member has it."""
    total = None
    for member in members(pid):
        try:
            for line in Path(f"/proc/{member.pid}/status").read_text().splitlines():
                if line.startswith(field + ":"):
                    total = (total or 0) + int(line.split()[1]) * 1024
        except (OSError, ValueError, IndexError):
            continue
    return total


def cpu_seconds(pid: int) -> float:
    """CPU time of the tree: user + system time of every member's threads, plus the time of the
    children each member has waited for (an inference process ended by a release)."""
    total = 0.0
    for member in members(pid):
        try:
            times = member.cpu_times()
        except psutil.Error:
            continue  # ended between the listing and the read: its time is in its parent's children time
        total += times.user + times.system + times.children_user + times.children_system
    return total
