"""How many inference streams, of how many threads, fit the CPUs this container really has.

Containers see the host's CPU count in ``os.cpu_count()``; what they may use is bounded by the
CFS quota (cgroup v1 ``cpu.cfs_quota_us``/``cpu.cfs_period_us``, v2 ``cpu.max``) and the affinity
mask. The study this server follows ran one thread per physical core, two per stream, so a
32-vCPU container with 16 physical cores gets 8 streams × 2 threads. Small containers get one
thread per stream, which measured most efficient on 2 cores (RUNTIME-FACTS).
"""

from __future__ import annotations

import logging
import math
import os
from dataclasses import dataclass
from pathlib import Path

from lifecycle import cgroup

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class CpuBudget:
    """What the container may use, and where each figure came from."""

    host_logical: int
    """Logical CPUs of the host (``os.cpu_count``)."""
    host_physical: int
    """Physical cores of the host."""
    affinity: int
    """CPUs in this process's affinity mask."""
    quota: float | None
    """CFS quota in CPUs (quota / period), None when unlimited or unreadable."""

    @property
    def cpus(self) -> int:
        """Whole CPUs usable: the smaller of affinity and quota (a fraction rounds down, at least 1)."""
        usable = float(self.affinity)
        if self.quota is not None:
            usable = min(usable, self.quota)
        return max(1, math.floor(usable + 1e-9))

    @property
    def smt(self) -> int:
        """Hardware threads per physical core on the host (1 without SMT)."""
        return max(1, round(self.host_logical / max(1, self.host_physical)))

    @property
    def cores(self) -> int:
        """Physical-core equivalents of the usable CPUs."""
        return max(1, self.cpus // self.smt)


@dataclass(frozen=True)
class PoolShape:
    """Streams × threads the inference pool runs."""

    streams: int
    threads_per_stream: int

    @property
    def threads(self) -> int:
        return self.streams * self.threads_per_stream


def shape_for(budget: CpuBudget, streams: int = 0, threads_per_stream: int = 0) -> PoolShape:
    """The pool shape for a CPU budget; non-zero arguments override the rule, within the budget.

    The threads never outnumber ``budget.cpus`` where the streams allow it: where ``streams`` x
    ``threads_per_stream`` would (``TTS_STREAMS=2`` with a manifest tuned 1 x 2 on 2 CPUs), the streams stay (they
    are the concurrency the deployment's limits follow) and each gets ``cpus // streams`` threads, logged: threads
    beyond the CPUs only take turns on them.
    More streams than CPUs get one thread each, with a warning: the benchmark's runtime-defaults baseline runs 4
    sessions on any machine on purpose, so this is not refused."""
    cores = budget.cores
    threads = threads_per_stream or (2 if cores >= 4 else 1)
    streams = streams or max(1, cores // threads)
    cpus = budget.cpus
    if streams * threads > cpus:
        fitted = max(1, cpus // streams)
        log.warning("pool: %d streams x %d threads would be %d threads on %d CPUs; serving %d x %d%s", streams,
                    threads, streams * threads, cpus, streams, fitted,
                    f" (TTS_STREAMS above {cpus} still oversubscribes)" if streams > cpus else "")
        threads = fitted
    return PoolShape(streams=streams, threads_per_stream=threads)


def read_budget(root: Path = Path("/sys/fs/cgroup"), proc: Path = Path("/proc")) -> CpuBudget:
    """Read the CPU budget from cgroup files under ``root`` (tests point it at fake trees)."""
    logical = os.cpu_count() or 1
    try:
        affinity = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        affinity = logical
    return CpuBudget(
        host_logical=logical,
        host_physical=_physical_cores(Path("/sys/devices/system/cpu")) or logical,
        affinity=affinity,
        quota=read_quota(root, proc),
    )


def read_quota(root: Path, proc: Path = Path("/proc")) -> float | None:
    """CFS quota in CPUs from cgroup v2 ``cpu.max`` or v1 ``cpu.cfs_quota_us``; None if unlimited."""
    for group in cgroup.groups("cpu", root, proc):
        v2 = group.path / "cpu.max"
        if v2.is_file():
            quota, _, period = v2.read_text().partition(" ")
            return None if quota.strip() == "max" else int(quota) / int(period or "100000")
        v1 = group.path / "cpu.cfs_quota_us"
        if v1.is_file():
            quota_us = cgroup.read_int(v1)
            return None if quota_us <= 0 else quota_us / cgroup.read_int(group.path / "cpu.cfs_period_us")
    return None


def _physical_cores(cpu_dir: Path) -> int:
    """Distinct (package, core) pairs under sysfs topology; 0 when unreadable."""
    seen: set[tuple[str, str]] = set()
    for topo in cpu_dir.glob("cpu[0-9]*/topology"):
        try:
            seen.add(((topo / "physical_package_id").read_text(), (topo / "core_id").read_text()))
        except OSError:
            continue
    return len(seen)
