"""The CPU's instruction set family, which names the caches that hold CPU-specific code."""

from __future__ import annotations

from pathlib import Path

from app.runtime.cpu import cpu_flags, isa_family


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
