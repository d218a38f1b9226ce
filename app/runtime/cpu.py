"""The CPU's instruction set family: part of every cache that holds CPU-specific code or layouts.

OpenVINO's compiled blobs (`app.runtime.compile_cache`) and ONNX Runtime's saved, optimized graph
(`app.runtime.backends.onnxruntime`) both hold kernels or layouts chosen for the CPU they were
made on, so both name their caches by the family found here.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

# Most capable first; the names follow the oneDNN ISA levels the CPU plugin picks kernels by.
_ISA_FAMILIES: tuple[tuple[str, frozenset[str]], ...] = (
    ("amx", frozenset({"amx_tile", "amx_bf16", "avx512f"})),
    ("avx512", frozenset({"avx512f", "avx512bw", "avx512vl", "avx512dq"})),
    ("avx2", frozenset({"avx2", "fma"})),
    ("sse4", frozenset({"sse4_2"})),
)


def cpu_flags(cpuinfo: Path = Path("/proc/cpuinfo")) -> frozenset[str]:
    """The CPU feature flags the kernel reports (first processor); empty when unreadable."""
    try:
        text = cpuinfo.read_text()
    except OSError:
        return frozenset()
    for line in text.splitlines():
        name, _, value = line.partition(":")
        if name.strip() in ("flags", "Features"):
            return frozenset(value.split())
    return frozenset()


def isa_family(flags: Iterable[str]) -> str:
    """``amx``, ``avx512``, ``avx2``, ``sse4`` or ``generic``: the best family all of whose flags are present."""
    present = set(flags)
    for name, needed in _ISA_FAMILIES:
        if needed <= present:
            return name
    return "generic"


# The tiers a tuning result travels by (`cpu_class`): what decides which kernels ONNX Runtime's MLAS and OpenVINO's
# oneDNN run, most capable first. VNNI gives int8 dot products (the int8 forms' GEMMs); BF16 gives OpenVINO's bf16
# hint native arithmetic; AMX adds the tile units.
CLASS_TIERS: tuple[tuple[str, frozenset[str]], ...] = (
    ("amx", frozenset({"amx_tile", "amx_bf16", "avx512f"})),
    ("avx512-bf16", frozenset({"avx512f", "avx512bw", "avx512vl", "avx512_vnni", "avx512_bf16"})),
    ("avx512-vnni", frozenset({"avx512f", "avx512bw", "avx512vl", "avx512_vnni"})),
    ("avx512", frozenset({"avx512f", "avx512bw", "avx512vl", "avx512dq"})),
    ("avx2", frozenset({"avx2", "fma"})),
    ("sse4", frozenset({"sse4_2"})),
)
_VENDORS = {"GenuineIntel": "intel", "AuthenticAMD": "amd"}


def cpu_class(flags: Iterable[str], vendor: str) -> str:
    """The class a tuning result is shared within: the vendor and the best instruction-set tier all of whose flags
    are present (``amd-avx512-bf16``, ``intel-amx``, ``intel-avx2``). Two CPUs of one class run the same kernels, so
    the ranking measured on one holds on the other within the noise."""
    present = set(flags)
    tier = next((name for name, needed in CLASS_TIERS if needed <= present), "generic")
    return f"{vendor}-{tier}"


def tier_flags(cpu_class_name: str) -> frozenset[str]:
    """The flags every CPU of a class (`cpu_class`'s name) has: what the tuner would try there."""
    tier = cpu_class_name.split("-", 1)[1] if "-" in cpu_class_name else cpu_class_name
    return next((needed for name, needed in CLASS_TIERS if name == tier), frozenset())


def cpu_vendor(cpuinfo: Path = Path("/proc/cpuinfo")) -> str:
    """``intel``, ``amd``, or the kernel's ``vendor_id`` in lower case (``other`` where it says none)."""
    value = _field(cpuinfo, ("vendor_id",))
    return _VENDORS.get(value, value.lower() or "other")


def family() -> str:
    """This machine's family."""
    return isa_family(cpu_flags())


def flags_digest(flags: Iterable[str] | None = None) -> str:
    """First 16 hex digits of the sha256 of the sorted feature flags (this machine's where ``flags`` is None): the
    same CPU model with a feature hidden (a VM without AMX or AVX-512) gets another digest."""
    import hashlib

    present = cpu_flags() if flags is None else flags
    return hashlib.sha256(" ".join(sorted(present)).encode()).hexdigest()[:16]


def cpu_model_name(cpuinfo: Path = Path("/proc/cpuinfo")) -> str:
    """The CPU's brand string (``model name``), or ``unknown`` where the kernel does not say."""
    return _field(cpuinfo, ("model name", "Model", "cpu model")) or "unknown"


def _field(cpuinfo: Path, names: tuple[str, ...]) -> str:
    """The first processor's value of the first of ``names`` that /proc/cpuinfo has, or ``""``."""
    try:
        text = cpuinfo.read_text()
    except OSError:
        return ""
    for line in text.splitlines():
        name, _, value = line.partition(":")
        if name.strip() in names:
            return value.strip()
    return ""
