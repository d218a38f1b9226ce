"""The tuning manifest: what `python -m app tune` measured and chose on this CPU, and how the server finds it.

A manifest names one `Candidate` (backend, precision, streams x threads) chosen for a `TuneKey`: the
CPU (brand string, a digest of every feature flag, its class: vendor and instruction-set tier), the CPU
budget, the runtime versions and the model's sha256. At start the server takes, for the model it serves, a
manifest made on this exact CPU (brand string and flags) first, else one made on a CPU of the same class
(`app.runtime.cpu.cpu_class`), searching the cache directories before the manifests that ship with the package
(`SHIPPED`), so that ``python -m app tune`` on the machine wins over what was measured elsewhere. With none,
it serves the portable default (`app.tune.choice`).

Light on purpose: the server reads this at start, before anything heavy is imported (runtime versions
come from package metadata, the CPU from ``/proc/cpuinfo``; nothing here imports a runtime).
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import asdict, dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

from app.runtime.cpu import cpu_class, cpu_flags, cpu_model_name, cpu_vendor, flags_digest, isa_family

FORMAT = 1
DIRECTORY = "tuning"
"""Manifests live in ``<cache dir>/tuning/`` (and ``<baked cache dir>/tuning/`` in the image)."""
SHIPPED = Path(__file__).resolve().parents[1] / "data"
"""The package's own ``tuning/``: a manifest for every CPU class the project has tuned on, with the command and date
that made it (docs/performance.md)."""


@dataclass(frozen=True)
class Candidate:
    """One way to run the model that the tuner can measure and the server can serve with."""

    backend: str
    """``openvino`` or ``onnxruntime``."""
    precision: str
    """OpenVINO's inference precision hint (``f32``, ``bf16``); ``f32`` for ONNX Runtime."""
    streams: int
    """Concurrent inferences (OpenVINO streams or ONNX Runtime sessions), one pool slot each."""
    threads_per_stream: int
    form: str = "onnx"
    """The model file it runs (`app.forms.store`): ``onnx`` is the model as shipped."""

    @property
    def name(self) -> str:
        form = "" if self.form == "onnx" else f"{self.form}-"
        return f"{self.backend}-{form}{self.precision}-{self.streams}x{self.threads_per_stream}"

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Candidate:
        return cls(backend=str(data["backend"]), precision=str(data["precision"]), streams=int(data["streams"]),
                   threads_per_stream=int(data["threads_per_stream"]), form=str(data.get("form", "onnx")))


@dataclass(frozen=True)
class TuneKey:
    """What a tuning result is valid for."""

    cpu: str
    """The CPU's brand string (``model name`` in /proc/cpuinfo)."""
    isa: str
    """Instruction-set family (`app.runtime.cpu.isa_family`)."""
    flags: str
    """First 16 hex digits of the sha256 of the sorted CPU feature flags: a VM that hides AMX or AVX-512
    from the guest gets another key even under the same brand string."""
    cpus: int
    """Usable CPUs of the budget the pool was sized for."""
    openvino: str
    onnxruntime: str
    model_sha256: str
    cpu_class: str = ""
    """Vendor and instruction-set tier (`app.runtime.cpu.cpu_class`): what a manifest is shared within."""

    @classmethod
    def here(cls, cpus: int, model_sha256: str) -> TuneKey:
        flags = cpu_flags()
        return cls(cpu=cpu_model_name(), isa=isa_family(flags),
                   flags=flags_digest(flags), cpus=cpus,
                   openvino=_version("openvino"), onnxruntime=_version("onnxruntime"), model_sha256=model_sha256,
                   cpu_class=cpu_class(flags, cpu_vendor()))

    def same_cpu(self, other: TuneKey) -> bool:
        """The same CPU model with the same features visible (a VM hiding AMX is another CPU)."""
        return (self.cpu, self.flags) == (other.cpu, other.flags)

    def slug(self) -> str:
        """File name stem: the ISA family, budget and a digest of everything else."""
        digest = hashlib.sha256(json.dumps(asdict(self), sort_keys=True).encode()).hexdigest()[:16]
        return f"{self.isa}-{self.cpus}cpu-{digest}"


@dataclass(frozen=True)
class Manifest:
    """A tuning run's outcome: the choice and the table behind it."""

    key: TuneKey
    choice: Candidate
    why: str
    """One sentence: why this candidate won (figures included)."""
    table: list[dict[str, Any]] = field(default_factory=list)
    """Every candidate measured: name, median efficiency, output check, peak memory, error."""
    made: str = ""
    """ISO time of the tuning run."""
    format: int = FORMAT
    command: str = ""
    """The command that made it (``python -m app tune ...``)."""

    def to_json(self) -> dict[str, Any]:
        return {"format": self.format, "made": self.made, "command": self.command, "key": asdict(self.key),
                "choice": asdict(self.choice), "why": self.why, "table": self.table}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Manifest:
        return cls(key=TuneKey(**data["key"]), choice=Candidate.from_json(data["choice"]), why=str(data["why"]),
                   table=list(data.get("table", [])), made=str(data.get("made", "")),
                   format=int(data.get("format", 0)), command=str(data.get("command", "")))


def write(directory: Path, manifest: Manifest) -> Path:
    """Save under ``directory/tuning/<slug>.json`` (whole or not at all)."""
    target = directory / DIRECTORY / f"{manifest.key.slug()}.json"
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(f".{target.name}.{os.getpid()}")
    partial.write_text(json.dumps(manifest.to_json(), indent=2) + "\n")
    os.replace(partial, target)
    return target


@dataclass(frozen=True)
class Lookup:
    """What the server found: a manifest for this CPU or its class, or why none applies."""

    manifest: Manifest | None
    path: Path | None
    reason: str
    match: str = ""
    """``cpu`` (made on this CPU model), ``class`` (on another CPU of its class) or ``""`` (none)."""


def find(directories: list[Path], key: TuneKey) -> Lookup:
    """The manifest to serve with for ``key``'s model: one made on this CPU model, else one made on a CPU of the same
    class; within each, the first of ``directories`` that has one, and there one made for the same CPU budget
    before another. Runtime versions may differ (a manifest still ranks the forms: the why says so)."""
    found: list[tuple[tuple[int, int, int], Path, Manifest]] = []
    others: list[str] = []
    for order, directory in enumerate(directories):
        folder = directory / DIRECTORY
        for path in sorted(folder.glob("*.json")) if folder.is_dir() else []:
            try:
                manifest = Manifest.from_json(json.loads(path.read_text()))
            except (OSError, ValueError, KeyError, TypeError) as exc:
                others.append(f"{path.name}: unreadable ({type(exc).__name__})")
                continue
            theirs = manifest.key
            if manifest.format != FORMAT:
                others.append(f"{path.name}: format {manifest.format}")
            elif theirs.model_sha256 != key.model_sha256 or not (
                    theirs.same_cpu(key) or (key.cpu_class and theirs.cpu_class == key.cpu_class)):
                others.append(f"{path.name}: made for {_difference(theirs, key)}")
            else:
                found.append(((0 if theirs.same_cpu(key) else 1, order, 0 if theirs.cpus == key.cpus else 1),
                              path, manifest))
    if found:
        _, path, manifest = min(found, key=lambda f: f[0])
        match = "cpu" if manifest.key.same_cpu(key) else "class"
        where = "tuned on this CPU" if match == "cpu" else f"tuned on another {key.cpu_class} CPU ({manifest.key.cpu})"
        notes = _difference(manifest.key, key, ("cpus", "openvino", "onnxruntime"))
        return Lookup(manifest, path, f"{where} ({path})" + (f"; made for {notes}" if notes else ""), match)
    if others:
        return Lookup(None, None, f"no tuning manifest for this CPU ({key.cpu_class or key.isa}) nor its class ("
                      + "; ".join(others) + ")")
    return Lookup(None, None, "no tuning manifest (run `python -m app tune`)")


def _difference(found: TuneKey, here: TuneKey, names: tuple[str, ...] = ()) -> str:
    mine, theirs = asdict(here), asdict(found)
    return ", ".join(f"{name} {theirs[name]!r} (here {mine[name]!r})" for name in names or mine
                     if mine[name] != theirs[name])


def _version(package: str) -> str:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return ""
