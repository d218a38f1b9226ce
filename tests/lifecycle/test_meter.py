"""The billable memory meter on simulated cgroup v1 and v2 trees, and its fallback."""

from __future__ import annotations

from pathlib import Path

from lifecycle.meter import Meter


def _proc(tmp_path: Path, text: str) -> Path:
    (tmp_path / "proc" / "self").mkdir(parents=True)
    (tmp_path / "proc" / "self" / "cgroup").write_text(text)
    return tmp_path / "proc"


def test_cgroup_v2_reads_memory_current_and_breakdown(tmp_path: Path) -> None:
    group = tmp_path / "cg" / "svc"
    group.mkdir(parents=True)
    (group / "memory.current").write_text("300000000\n")
    (group / "memory.stat").write_text("anon 200000000\nfile 100000000\nfile_mapped 40000000\n")
    reading = Meter(tmp_path / "cg", _proc(tmp_path, "0::/svc\n")).read()
    assert reading.billable == 300_000_000 and reading.file == 100_000_000 and reading.mapped == 40_000_000
    assert "cgroup v2" in reading.source and reading.rss > 0


def test_cgroup_v1_reads_usage_including_cache(tmp_path: Path) -> None:
    group = tmp_path / "cg" / "memory"
    group.mkdir(parents=True)
    (group / "memory.usage_in_bytes").write_text("500\n")
    (group / "memory.stat").write_text("cache 300\nrss 200\nmapped_file 10\ntotal_cache 300\ntotal_rss 200\n")
    reading = Meter(tmp_path / "cg", _proc(tmp_path, "4:memory:/\n")).read()
    assert (reading.billable, reading.anon, reading.file, reading.mapped) == (500, 200, 300, 10)
    assert "cgroup v1" in reading.source


def test_falls_back_to_rss_and_says_so(tmp_path: Path) -> None:
    reading = Meter(tmp_path / "nothing", _proc(tmp_path, "")).read()
    assert reading.billable == reading.rss > 0
    assert reading.source == "process rss (no cgroup readable)" and reading.anon is None
