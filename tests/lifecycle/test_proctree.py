"""Memory and CPU time of a process tree: the server and the inference process it starts."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import psutil

from lifecycle import proctree


def test_cpu_seconds_reads_this_process() -> None:
    before = proctree.cpu_seconds(os.getpid())
    end = time.process_time() + 0.05
    while time.process_time() < end:
        pass
    assert proctree.cpu_seconds(os.getpid()) >= before + 0.03


def test_the_tree_includes_a_child_and_the_time_of_a_child_that_ended() -> None:
    burn = "import time\nend = time.process_time() + 0.3\nwhile time.process_time() < end: pass\n"
    child = subprocess.Popen([sys.executable, "-c", "x = bytearray(64 << 20); input()"], stdin=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 10
        while psutil.Process(child.pid).memory_info().rss < 64 << 20 and time.monotonic() < deadline:
            time.sleep(0.05)
        own = psutil.Process().memory_info().rss
        assert (proctree.rss(os.getpid()) or 0) >= own + (64 << 20)
        assert (proctree.status_bytes(os.getpid(), "VmRSS") or 0) >= own + (60 << 20)
    finally:
        child.communicate(b"\n", timeout=10)
    before = proctree.cpu_seconds(os.getpid())
    subprocess.run([sys.executable, "-c", burn], check=True)  # waited for: counted in our children's time
    assert proctree.cpu_seconds(os.getpid()) >= before + 0.25


def test_a_file_mapped_twice_and_a_child_that_copies_a_page_count_their_file_pages_once(tmp_path: Path) -> None:
    """Two mappings of one file (as two compiled models of one compile-cache blob): ``RssFile`` counts its pages
    twice, `resident_file_bytes` once; a private mapping's written page is anonymous memory, not the file's."""
    data = tmp_path / "blob"
    data.write_bytes(os.urandom(32 << 20))
    code = ("import mmap, sys\n"
            "f = open(sys.argv[1], 'rb')\n"
            "maps = [mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ) for _ in range(2)]\n"
            "total = sum(m[i] for m in maps for i in range(0, len(m), 4096))\n"
            "private = mmap.mmap(f.fileno(), 0, flags=mmap.MAP_PRIVATE)\n"
            "private[0] = 1\n"
            "print('ready', flush=True); input()\n")
    child = subprocess.Popen([sys.executable, "-c", code, str(data)], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == b"ready"
        summed = proctree.status_bytes(child.pid, "RssFile") or 0
        distinct = proctree.resident_file_bytes(child.pid) or 0
        assert summed >= 2 * (32 << 20)
        assert 32 << 20 <= distinct < (32 << 20) + (24 << 20)  # the blob once, and the interpreter's own files
        assert summed - distinct >= 30 << 20
    finally:
        child.communicate(b"\n", timeout=10)
    assert proctree.resident_file_bytes(child.pid) is None


def test_a_process_that_is_gone_reads_as_nothing() -> None:
    done = subprocess.run([sys.executable, "-c", "pass"], check=True)
    assert done.returncode == 0
    gone = max(p.pid for p in psutil.process_iter()) + 100_000
    assert proctree.rss(gone) is None and proctree.status_bytes(gone, "VmRSS") is None
    assert proctree.cpu_seconds(gone) == 0.0
