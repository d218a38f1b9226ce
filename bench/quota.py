"""A slow CPU on any machine: a server run under a CPU quota scaled to a slower class on record.

Development machines change CPU from one session to the next; the class clouds hand out most (the AVX2 EPYC) makes
0.47 of Zen 4's audio per CPU-second and 0.30 of the AMX Xeon's. `Emulation.of` compares the served form's figure in
this CPU's class manifest with the target class's (`app.data.tuning`), and `CpuQuota` runs a server in a cpu cgroup
of its own whose quota is that share of the CPUs, over short periods (`PERIOD_US`, so that throttling comes in
slices of milliseconds, not whole inferences). The server keeps its shape (``TTS_STREAMS`` and
``TTS_THREADS_PER_STREAM`` fixed: a quota of 0.9 CPU would otherwise size it for one) and serves the target class's
manifest relabelled for this CPU (`Emulation.baked`), so it paces and admits as an instance of that class would.

What this does not emulate: the target's caches and memory bandwidth, and that a quota throttles whole slices where
a slow core runs slowly throughout. Results say "emulated" wherever they come from here.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from app.runtime.cpu import cpu_class, cpu_flags, cpu_vendor
from app.tune.manifest import DIRECTORY, SHIPPED, TuneKey
from lifecycle import cgroup

log = logging.getLogger(__name__)

PERIOD_US = 10_000
"""The quota's period: 10 ms slices."""
SLOWEST = "amd-avx2"
"""The slowest class on record."""


def _efficiency(cls: str, cpus: int) -> tuple[float, dict[str, Any]] | None:
    """The served form's audio per CPU-second in the shipped manifest of class ``cls`` (its chosen row), and the
    manifest."""
    for path in sorted((SHIPPED / DIRECTORY).glob("*.json")):
        made = json.loads(path.read_text())
        if made["key"].get("cpu_class") != cls or made["key"].get("cpus") != cpus:
            continue
        choice = made["choice"]
        for row in made["table"]:
            if all(row.get(k, "onnx" if k == "form" else None) == choice[k] for k in
                   ("backend", "precision", "streams", "threads_per_stream", "form")):
                return float(row["efficiency"]), made
    return None


@dataclass(frozen=True)
class Emulation:
    """Run a server as an instance of ``target`` would on this machine's CPUs."""

    target: str
    """The class emulated."""
    here: str
    """This machine's class."""
    scale: float
    """The target's audio per CPU-second over this CPU's: the share of the CPUs the quota gives."""
    cpus: int
    manifest: dict[str, Any]
    """The target's manifest."""

    @classmethod
    def of(cls, target: str = SLOWEST, cpus: int = 2, *, here: str = "") -> Emulation:
        """The emulation of ``target`` on this CPU's class (``here``: another's). Raises ValueError where either
        class has no manifest for ``cpus`` CPUs, or where this CPU is no faster than the target (nothing to
        emulate: run it as it is)."""
        here = here or cpu_class(cpu_flags(), cpu_vendor())
        theirs, ours = _efficiency(target, cpus), _efficiency(here, cpus)
        if theirs is None or ours is None:
            raise ValueError(f"no shipped manifest for {target if theirs is None else here} on {cpus} CPUs")
        if theirs[0] >= ours[0]:
            raise ValueError(f"this CPU ({here}, {ours[0]:.2f} audio-s per CPU-s) is no faster than {target} "
                             f"({theirs[0]:.2f}): run without emulation")
        return cls(target, here, theirs[0] / ours[0], cpus, theirs[1])

    @property
    def quota_cpus(self) -> float:
        return self.scale * self.cpus

    def settings(self, baked: Path) -> dict[str, str]:
        """The server's ``TTS_*`` settings: the target's shape and its manifest (written to ``baked``)."""
        choice = self.manifest["choice"]
        self.baked(baked)
        return {"TTS_STREAMS": str(choice["streams"]), "TTS_THREADS_PER_STREAM": str(choice["threads_per_stream"]),
                "TTS_BAKED_CACHE_DIR": str(baked)}

    def baked(self, folder: Path) -> Path:
        """The target's manifest relabelled as made on this CPU, in ``folder``'s ``tuning/`` (what the server looks
        at first)."""
        key = TuneKey.here(self.cpus, self.manifest["key"]["model_sha256"])
        made = {**self.manifest, "key": dataclasses.asdict(key),
                "why": f"emulating {self.target} under a CPU quota of {self.quota_cpus:.2f} CPUs: "
                       f"{self.manifest['why']}"}
        path = folder / DIRECTORY / f"emulated-{self.target}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(made, indent=2))
        return path

    def describe(self) -> str:
        return (f"{self.target} emulated on {self.here}: CPU quota {self.quota_cpus:.2f} of {self.cpus} CPUs "
                f"({self.scale:.2f} x, {PERIOD_US // 1000} ms periods)")


class CpuQuota:
    """A child cpu cgroup with a CFS quota; `remove` it once its process has exited."""

    def __init__(self, path: Path, version: int) -> None:
        self.path = path
        self.version = version

    @classmethod
    def create(cls, label: str, cpus: float, root: Path = Path("/sys/fs/cgroup")) -> CpuQuota:
        """A fresh group under this process's own cpu cgroup, limited to ``cpus`` CPUs. Raises OSError where
        cgroups are not writable here (not root, or cgroup v2 without the cpu controller delegated)."""
        own = sorted(cgroup.groups("cpu", root, mounts=False), key=lambda g: g.version)
        found = next((g for g in own if (g.path / ("cpu.cfs_quota_us" if g.version == 1 else "cgroup.controllers"))
                      .is_file()), None)
        if found is None:
            raise OSError("no cpu cgroup of this process found")
        path = found.path / f"bench-{label}-{uuid.uuid4().hex[:8]}"
        path.mkdir()
        quota_us = max(1000, round(cpus * PERIOD_US))
        if found.version == 1:
            (path / "cpu.cfs_period_us").write_text(str(PERIOD_US))
            (path / "cpu.cfs_quota_us").write_text(str(quota_us))
        else:
            if not (path / "cpu.max").is_file():
                path.rmdir()
                raise OSError(f"{path} has no cpu.max: the cpu controller is not delegated")
            (path / "cpu.max").write_text(f"{quota_us} {PERIOD_US}")
        return cls(path, found.version)

    def wrap(self, argv: Sequence[str]) -> list[str]:
        """``argv`` run by a shell that first moves itself into this group, then execs (same pid)."""
        return ["/bin/sh", "-c", 'echo $$ > "$0" && exec "$@"', str(self.path / "cgroup.procs"), *argv]

    def throttled_s(self) -> float:
        """Seconds the group was held back by its quota so far."""
        stat = cgroup.read_stat(self.path / "cpu.stat")
        return stat.get("throttled_time", 0) / 1e9 if self.version == 1 else stat.get("throttled_usec", 0) / 1e6

    def remove(self) -> None:
        try:
            self.path.rmdir()
        except OSError as exc:
            log.warning("could not remove %s: %s", self.path, exc)
