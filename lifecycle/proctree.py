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


def resident_file_bytes(pid: int) -> int | None:
    """Resident pages of the files the tree maps, bytes, each mapping of the same file range counted once (the
    largest resident count among them); None when ``pid`` is gone.

    ``RssFile`` summed over the tree counts a page once per mapping: a library both processes map, or a file one
    process maps twice (OpenVINO's compile-cache blob, imported by two compiled models of one form), would count
    twice, while the page cache holds it once. Mappings of one file at different offsets still add up."""
    largest: dict[tuple[str, str, int, int], int] = {}
    found = False
    for member in members(pid):
        try:
            text = Path(f"/proc/{member.pid}/smaps").read_text()
        except OSError:
            continue  # ended since the listing
        found = True
        key: tuple[str, str, int, int] | None = None
        resident = 0
        for line in text.splitlines():
            head = line.split(maxsplit=6)
            if head and "-" in head[0] and len(head) >= 5 and not head[0].endswith(":"):
                # A mapping's header: range, perms, offset, device, inode, path.
                key = None
                if len(head) >= 6 and head[5].startswith("/") and head[4] != "0":
                    low, high = (int(x, 16) for x in head[0].split("-"))
                    key = (head[3], head[4], int(head[2], 16), high - low)
            elif key is not None and line.startswith("Rss:"):
                resident = int(head[1]) * 1024
            elif key is not None and line.startswith("Anonymous:"):
                # A private mapping's copied-on-write pages are anonymous memory, not the file's.
                largest[key] = max(largest.get(key, 0), resident - int(head[1]) * 1024)
                key = None
    return sum(largest.values()) if found else None


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
