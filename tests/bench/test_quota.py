"""A slow CPU on any machine (bench/quota.py): the quota's share from the classes on record, a cpu cgroup that holds
a process to it, and the target class's tuning served as this CPU's."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from app.tune.manifest import TuneKey, find
from bench.quota import SLOWEST, CpuQuota, Emulation
from tests.conftest import require


def test_the_quota_is_the_slower_class_share_of_this_one() -> None:
    """The AVX2 EPYC's served form makes 0.47 of Zen 4's audio per CPU-second and 0.30 of the AMX Xeon's."""
    zen4 = Emulation.of(SLOWEST, here="amd-avx512-bf16")
    xeon = Emulation.of(SLOWEST, here="intel-amx")
    assert zen4.scale == pytest.approx(0.47, abs=0.01) and xeon.scale == pytest.approx(0.30, abs=0.01)
    assert zen4.quota_cpus == pytest.approx(2 * zen4.scale) and "emulated" in zen4.describe()
    with pytest.raises(ValueError, match="no faster"):
        Emulation.of(SLOWEST, here=SLOWEST)
    with pytest.raises(ValueError, match="no shipped manifest"):
        Emulation.of("arm-neon", here="intel-amx")


def test_the_server_finds_the_emulated_class_tuning_as_its_own(tmp_path: Path) -> None:
    emulation = Emulation.of(SLOWEST, here="intel-amx")
    settings = emulation.settings(tmp_path)
    assert settings["TTS_STREAMS"] == "2" and settings["TTS_THREADS_PER_STREAM"] == "1"
    key = TuneKey.here(2, emulation.manifest["key"]["model_sha256"])
    found = find([Path(settings["TTS_BAKED_CACHE_DIR"])], key)
    assert found.match == "cpu" and found.manifest is not None
    assert found.manifest.choice.form == emulation.manifest["choice"]["form"]
    assert "emulating amd-avx2" in found.manifest.why


def test_a_process_in_the_quota_group_gets_its_share_of_a_cpu() -> None:
    """A busy loop of 1.5 s of wall time in a group held to a quarter of a CPU computes about 0.4 s."""
    try:
        quota = CpuQuota.create("test", 0.25)
    except OSError as exc:
        require(False, f"cpu cgroups are not writable here ({exc})")
        return
    try:
        busy = "import time\nt = time.monotonic()\nwhile time.monotonic() - t < 1.5: pass\nprint(time.process_time())"
        done = subprocess.run(quota.wrap([sys.executable, "-c", busy]), capture_output=True, text=True, timeout=30,
                              check=True)
        assert float(done.stdout) < 0.75  # a quarter of 1.5 s, with room for a period's rounding and the start
        assert quota.throttled_s() > 0.5
    finally:
        time.sleep(0.1)
        quota.remove()
