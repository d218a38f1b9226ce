"""glibc's malloc settings (`lifecycle.trim`), in fresh interpreters: what they change is process-wide."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

PROBE = """
import ctypes, sys
from lifecycle import trim
libc = ctypes.CDLL("libc.so.6")
libc.malloc.restype = ctypes.c_void_p
libc.malloc.argtypes = [ctypes.c_size_t]
libc.free.argtypes = [ctypes.c_void_p]
def rss_mb():
    return int(open("/proc/self/statm").read().split()[1]) * 4096 / 2**20
if sys.argv[1] == "fixed":
    assert trim.fix_mmap_threshold(256)
big = 4 << 20
first = libc.malloc(big); ctypes.memset(first, 1, big); libc.free(first)  # glibc's sliding threshold rises here
base = rss_mb()
blocks, pins = [], []
for _ in range(32):
    block = libc.malloc(big); ctypes.memset(block, 1, big); blocks.append(block)
    pins.append(libc.malloc(100_000))  # long-lived, fresh from the heap's top: the heap cannot shrink there
for block in blocks:
    libc.free(block)
print(round(rss_mb() - base))
"""


def held_after_free(mode: str) -> int:
    done = subprocess.run([sys.executable, "-c", PROBE, mode], cwd=ROOT, capture_output=True, text=True, check=True)
    return int(done.stdout.strip())


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
def test_a_fixed_mmap_threshold_gives_freed_large_blocks_back() -> None:
    # The control: with glibc's sliding threshold, 32 freed 4 MiB blocks stay in the heap (128 MiB here).
    assert held_after_free("default") >= 100
    assert held_after_free("fixed") <= 8


def test_zero_keeps_glibcs_threshold() -> None:
    from lifecycle import trim

    assert trim.fix_mmap_threshold(0) is False
