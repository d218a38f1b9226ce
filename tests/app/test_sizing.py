"""The pool-sizing rule, on simulated cgroup trees."""

from __future__ import annotations

from pathlib import Path

from app.sizing import CpuBudget, read_quota, shape_for


def _proc(tmp_path: Path, lines: str) -> Path:
    proc = tmp_path / "proc"
    (proc / "self").mkdir(parents=True)
    (proc / "self" / "cgroup").write_text(lines)
    return proc


def test_32_vcpu_with_16_physical_cores_is_8_by_2() -> None:
    shape = shape_for(CpuBudget(host_logical=32, host_physical=16, affinity=32, quota=None))
    assert (shape.streams, shape.threads_per_stream) == (8, 2)


def test_32_vcpu_quota_on_a_bigger_host_is_8_by_2() -> None:
    shape = shape_for(CpuBudget(host_logical=128, host_physical=64, affinity=128, quota=32.0))
    assert (shape.streams, shape.threads_per_stream) == (8, 2)


def test_2_cpus_without_smt_is_2_by_1() -> None:
    shape = shape_for(CpuBudget(host_logical=2, host_physical=2, affinity=2, quota=None))
    assert (shape.streams, shape.threads_per_stream) == (2, 1)


def test_fractional_quota_rounds_down_but_never_to_zero() -> None:
    assert CpuBudget(64, 64, 64, quota=1.5).cpus == 1
    assert CpuBudget(64, 64, 64, quota=0.25).cpus == 1
    assert shape_for(CpuBudget(64, 64, 64, quota=0.5)).streams == 1


def test_affinity_bounds_as_well_as_quota() -> None:
    assert CpuBudget(64, 64, affinity=4, quota=16.0).cpus == 4


def test_settings_override_the_rule() -> None:
    shape = shape_for(CpuBudget(8, 8, 8, None), streams=3, threads_per_stream=2)
    assert (shape.streams, shape.threads_per_stream) == (3, 2)


def test_the_pool_never_asks_for_more_threads_than_the_cpus() -> None:
    two = CpuBudget(2, 2, 2, None)
    # TTS_STREAMS=2 with a shape tuned 1 x 2: the streams stay, each gets what the budget leaves.
    shape = shape_for(two, streams=2, threads_per_stream=2)
    assert (shape.streams, shape.threads_per_stream, shape.threads) == (2, 1, 2)
    # Explicit streams on a bigger budget: the rule's 2 threads shrink to fit.
    shape = shape_for(CpuBudget(8, 8, 8, None), streams=6)
    assert (shape.streams, shape.threads_per_stream) == (6, 1)
    # Within the budget a shape stays as asked.
    assert shape_for(CpuBudget(8, 8, 8, None), threads_per_stream=4).threads == 8


def test_more_streams_than_cpus_get_one_thread_each() -> None:
    shape = shape_for(CpuBudget(2, 2, 2, None), streams=3, threads_per_stream=2)
    assert (shape.streams, shape.threads_per_stream) == (3, 1)


def test_cgroup_v2_cpu_max(tmp_path: Path) -> None:
    root = tmp_path / "cg"
    (root / "app").mkdir(parents=True)
    (root / "app" / "cpu.max").write_text("3200000 100000\n")
    assert read_quota(root, _proc(tmp_path, "0::/app\n")) == 32.0


def test_cgroup_v2_unlimited(tmp_path: Path) -> None:
    root = tmp_path / "cg"
    root.mkdir()
    (root / "cpu.max").write_text("max 100000\n")
    assert read_quota(root, _proc(tmp_path, "0::/\n")) is None


def test_cgroup_v1_fractional_quota(tmp_path: Path) -> None:
    cpu = tmp_path / "cg" / "cpu,cpuacct"
    cpu.mkdir(parents=True)
    (cpu / "cpu.cfs_quota_us").write_text("150000\n")
    (cpu / "cpu.cfs_period_us").write_text("100000\n")
    quota = read_quota(tmp_path / "cg", _proc(tmp_path, "3:cpu,cpuacct:/\n"))
    assert quota == 1.5
    assert CpuBudget(8, 8, 8, quota).cpus == 1


def test_cgroup_v1_unlimited(tmp_path: Path) -> None:
    cpu = tmp_path / "cg" / "cpu"
    cpu.mkdir(parents=True)
    (cpu / "cpu.cfs_quota_us").write_text("-1\n")
    (cpu / "cpu.cfs_period_us").write_text("100000\n")
    assert read_quota(tmp_path / "cg", _proc(tmp_path, "3:cpu:/\n")) is None
