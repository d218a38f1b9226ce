"""The CPU's instruction set family, which names the caches that hold CPU-specific code."""

from __future__ import annotations

from pathlib import Path

from app.runtime.cpu import cpu_class, cpu_flags, cpu_vendor, isa_family


def test_isa_family_picks_the_best_complete_family() -> None:
    assert isa_family({"sse4_2", "avx2", "fma", "avx512f", "avx512bw", "avx512vl", "avx512dq", "amx_tile",
                       "amx_bf16"}) == "amx"
    assert isa_family({"sse4_2", "avx2", "fma", "avx512f", "avx512bw", "avx512vl", "avx512dq"}) == "avx512"
    assert isa_family({"sse4_2", "avx2", "fma", "avx512f"}) == "avx2"  # avx512f alone is not the avx512 family
    assert isa_family({"sse4_2"}) == "sse4"
    assert isa_family(set()) == "generic"


def test_cpu_flags_reads_the_first_processor(tmp_path: Path) -> None:
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nmodel name\t: AMD EPYC\nflags\t\t: fpu sse4_2 avx2 fma\n\n"
                       "processor\t: 1\nflags\t\t: fpu\n")
    assert cpu_flags(cpuinfo) == {"fpu", "sse4_2", "avx2", "fma"}
    assert cpu_flags(tmp_path / "missing") == frozenset()


def test_the_cpu_class_is_the_vendor_and_the_best_complete_tier(tmp_path: Path) -> None:
    avx512 = {"sse4_2", "avx2", "fma", "avx512f", "avx512bw", "avx512vl", "avx512dq"}
    assert cpu_class(avx512 | {"amx_tile", "amx_bf16", "avx512_vnni", "avx512_bf16"}, "intel") == "intel-amx"
    assert cpu_class(avx512 | {"avx512_vnni", "avx512_bf16"}, "amd") == "amd-avx512-bf16"  # Zen 4, Zen 5
    assert cpu_class(avx512 | {"avx512_vnni"}, "intel") == "intel-avx512-vnni"  # Cascade Lake, Ice Lake
    assert cpu_class(avx512 | {"avx512_bf16"}, "intel") == "intel-avx512"  # BF16 without VNNI is no tier of its own
    assert cpu_class({"sse4_2", "avx2", "fma"}, "amd") == "amd-avx2"  # Zen 2, Zen 3
    assert cpu_class(set(), "other") == "other-generic"
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nvendor_id\t: AuthenticAMD\n\nprocessor\t: 1\nvendor_id\t: GenuineIntel\n")
    assert cpu_vendor(cpuinfo) == "amd" and cpu_vendor(tmp_path / "missing") == "other"
