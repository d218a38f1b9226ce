"""Evict files from the page cache, and see how much of a file is resident.

A platform that meters cgroup memory counts page cache: the model and compile-cache files stay
cached after a release unless told otherwise. ``POSIX_FADV_DONTNEED`` drops only clean pages
that nothing maps, so dirty pages are written back first (fsync) and callers evict only after
the runtime has unmapped the files.

Files a process keeps mapped (its shared libraries) are left alone by ``DONTNEED``;
`page_out_mappings` asks the kernel to reclaim their clean pages instead (``MADV_PAGEOUT``,
Linux 5.4+): pages still in use fault back in from the file on their next touch. `loaded_files`
lists what a process read to run (mapped files and imported modules' sources), so that a
process that ends can have its reads evicted by the one that outlives it.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import mmap
import os
import sys
from pathlib import Path

log = logging.getLogger(__name__)
_PAGE = mmap.PAGESIZE
MADV_PAGEOUT = 21


def evict(paths: list[Path]) -> int:
    """Write back and drop each file's cached pages; returns how many files were advised."""
    return _advise(paths, os.POSIX_FADV_DONTNEED, flush=True)


def read_ahead(paths: list[Path]) -> int:
    """Ask the kernel to read each file into the page cache in the background (``POSIX_FADV_WILLNEED``): one
    sequential sweep instead of the page faults of its first readers; returns how many files were advised."""
    return _advise(paths, os.POSIX_FADV_WILLNEED)


def _advise(paths: list[Path], advice: int, *, flush: bool = False) -> int:
    """``posix_fadvise(advice)`` on each whole file, after an fsync where ``flush``; how many files were advised."""
    done = 0
    for path in paths:
        try:
            fd = os.open(path, os.O_RDONLY)
        except OSError as exc:
            log.debug("cannot open %s to advise the page cache: %s", path, exc)
            continue
        try:
            if flush:
                try:
                    os.fsync(fd)
                except OSError:
                    pass  # read-only file systems refuse fsync; their pages are clean anyway
            os.posix_fadvise(fd, 0, 0, advice)
            done += 1
        except OSError as exc:
            log.debug("cannot advise the page cache of %s: %s", path, exc)
        finally:
            os.close(fd)
    return done


def resident_bytes(path: Path) -> int:
    """Bytes of ``path`` now in the page cache (``mincore`` over a fresh read-only mapping)."""
    size = path.stat().st_size
    if size == 0:
        return 0
    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
    libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p]
    fd = os.open(path, os.O_RDONLY)
    try:
        address = libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
        if address in (None, ctypes.c_void_p(-1).value):
            raise OSError(ctypes.get_errno(), f"mmap of {path} failed")
        try:
            pages = (size + _PAGE - 1) // _PAGE
            vector = ctypes.create_string_buffer(pages)
            if libc.mincore(ctypes.c_void_p(address), size, vector) != 0:
                raise OSError(ctypes.get_errno(), f"mincore of {path} failed")
            return sum(b & 1 for b in vector.raw) * _PAGE
        finally:
            libc.munmap(ctypes.c_void_p(address), size)
    finally:
        os.close(fd)


def loaded_files(maps: Path = Path("/proc/self/maps")) -> list[Path]:
    """Files this process maps, and the sources and bytecode of the modules it imported."""
    found: dict[str, None] = {}
    try:
        for line in maps.read_text().splitlines():
            parts = line.split(maxsplit=5)
            if len(parts) == 6 and parts[5].startswith("/") and not parts[5].endswith("(deleted)"):
                found[parts[5]] = None
    except OSError:
        pass
    for module in list(sys.modules.values()):
        source = getattr(module, "__file__", None)
        cached = getattr(getattr(module, "__spec__", None), "cached", None)
        for name in (source, cached):
            if isinstance(name, str):
                found[name] = None
    return [Path(name) for name in found]


def page_out_mappings(maps: Path = Path("/proc/self/maps")) -> int:
    """Ask the kernel to reclaim the clean pages of every file this process maps; returns bytes advised.

    0 where the kernel does not support ``MADV_PAGEOUT`` (before Linux 5.4, gVisor)."""
    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    advised = 0
    try:
        lines = maps.read_text().splitlines()
    except OSError:
        return 0
    for line in lines:
        parts = line.split(maxsplit=5)
        if len(parts) < 6 or not parts[5].startswith("/"):
            continue
        low, high = (int(x, 16) for x in parts[0].split("-"))
        if libc.madvise(ctypes.c_void_p(low), high - low, MADV_PAGEOUT) == 0:
            advised += high - low
        elif ctypes.get_errno() == 22 and advised == 0:  # EINVAL: this kernel has no MADV_PAGEOUT
            log.info("MADV_PAGEOUT is not supported here; mapped library pages stay resident")
            return 0
    return advised
