"""Finding this process's cgroups from /proc/self/cgroup, on simulated v1 and v2 trees."""

from __future__ import annotations

from pathlib import Path

from lifecycle import cgroup


def _proc(tmp_path: Path, text: str) -> Path:
    (tmp_path / "proc" / "self").mkdir(parents=True)
    (tmp_path / "proc" / "self" / "cgroup").write_text(text)
    return tmp_path / "proc"


def test_own_groups_come_before_the_mount_roots(tmp_path: Path) -> None:
    root = tmp_path / "cg"
    for rel in ("svc", "memory/svc", "memory", "cpu,cpuacct/svc", "cpu,cpuacct"):
        (root / rel).mkdir(parents=True, exist_ok=True)
    proc = _proc(tmp_path, "5:memory:/svc\n3:cpu,cpuacct:/svc\n0::/svc\n")
    assert cgroup.groups("memory", root, proc) == [
        cgroup.Group(root / "memory" / "svc", 1), cgroup.Group(root / "svc", 2),
        cgroup.Group(root, 2), cgroup.Group(root / "memory", 1)]
    assert cgroup.groups("cpu", root, proc, mounts=False) == [
        cgroup.Group(root / "cpu,cpuacct" / "svc", 1), cgroup.Group(root / "svc", 2)]


def test_a_container_sees_the_hosts_path_and_falls_back_to_the_mount(tmp_path: Path) -> None:
    root = tmp_path / "cg"
    root.mkdir()
    (root / "memory.current").write_text("1\n")
    proc = _proc(tmp_path, "0::/kubepods/pod1/abc\n")  # not mounted here
    candidates = cgroup.groups("memory", root, proc)
    assert candidates == [cgroup.Group(root, 2)]
    assert cgroup.first_with("memory.current", candidates) == cgroup.Group(root, 2)
    assert cgroup.first_with("memory.usage_in_bytes", candidates) is None


def test_read_stat_keeps_numeric_lines(tmp_path: Path) -> None:
    stat = tmp_path / "memory.stat"
    stat.write_text("anon 10\nfile 20\nbogus x\n\n")
    assert cgroup.read_stat(stat) == {"anon": 10, "file": 20}
    assert cgroup.read_stat(tmp_path / "missing") == {}
