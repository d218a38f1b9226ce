"""Where this process's cgroups are, and how their files read: the one parser of both cgroup versions.

``/proc/self/cgroup`` names each hierarchy the process is in: ``0::/path`` for the unified (v2)
hierarchy, ``N:cpu,cpuacct:/path`` for a v1 controller. On a host those paths lead to the process's
own group; inside a container they name the host's path, which is not mounted there, and the group
is the mount's root instead. `groups` returns both, own first, and callers take the first directory
that has the file they need. Used for the CPU quota (`app.sizing`), the memory meter
(`lifecycle.meter`) and the benchmark's per-server memory groups (`bench.meter`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

ROOT = Path("/sys/fs/cgroup")
PROC = Path("/proc")


@dataclass(frozen=True)
class Group:
    """A cgroup directory that exists."""

    path: Path
    version: int
    """2 for the unified hierarchy, 1 for a v1 controller's."""


def _membership(proc: Path) -> list[tuple[str, str]]:
    """(controllers, path) of each line of ``proc/self/cgroup``; controllers is "" for v2."""
    try:
        lines = (proc / "self" / "cgroup").read_text().splitlines()
    except OSError:
        return []
    found = []
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) == 3:
            found.append((parts[1], parts[2]))
    return found


def groups(controller: str, root: Path = ROOT, proc: Path = PROC, *, mounts: bool = True) -> list[Group]:
    """The directories of this process's ``controller`` cgroup: its own v2 and v1 groups in the order
    ``/proc/self/cgroup`` lists them, then (with ``mounts``) the mount's roots; only those that exist."""
    own: list[Group] = []
    names = [controller]
    for controllers, path in _membership(proc):
        rel = path.lstrip("/")
        if controllers == "":
            own.append(Group(root / rel, 2))
        elif controller in controllers.split(","):
            # v1 mounts a co-mounted hierarchy as "cpu,cpuacct" with "cpu" as a link to it, or not.
            names.append(controllers)
            own.extend(Group(root / name / rel, 1) for name in dict.fromkeys([controllers, controller]))
    candidates = own + ([Group(root, 2)] + [Group(root / name, 1) for name in dict.fromkeys(names)] if mounts else [])
    return [g for g in dict.fromkeys(candidates) if g.path.is_dir()]


def first_with(name: str, candidates: list[Group]) -> Group | None:
    """The first group whose directory holds the file ``name``."""
    return next((g for g in candidates if (g.path / name).is_file()), None)


def read_stat(path: Path) -> dict[str, int]:
    """The numeric ``key value`` lines of a cgroup ``*.stat`` file; empty when unreadable."""
    out: dict[str, int] = {}
    try:
        for line in path.read_text().splitlines():
            key, _, value = line.partition(" ")
            if value.strip().isdigit():
                out[key] = int(value)
    except OSError:
        pass
    return out


def read_int(path: Path) -> int:
    return int(path.read_text().strip())
