"""Evict files from the page cache, and see how much of a file is resident.

A platform that meters cgroup memory counts page cache: the model and compile-cache files stay
cached after a release unless told otherwise. ``POSIX_FADV_DONTNEED`` drops only clean pages
that nothing maps, so dirty pages are written back first (fsync) and callers evict only after
the runtime has unmapped the files.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import mmap
import os
from pathlib import Path

log = logging.getLogger(__name__)
_PAGE = mmap.PAGESIZE


def evict(paths: list[Path]) -> int:
    """Write back and drop each file's cached pages; returns how many files were advised."""
    done = 0
    for path in paths:
        try:
            fd = os.open(path, os.O_RDONLY)
        except OSError as exc:
            log.debug("cannot open %s to evict it: %s", path, exc)
            continue
        try:
            try:
                os.fsync(fd)
            except OSError:
                pass  # read-only file systems refuse fsync; their pages are clean anyway
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            done += 1
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
