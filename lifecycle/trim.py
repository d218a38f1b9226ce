"""Give freed heap memory back to the OS."""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import gc
import logging

log = logging.getLogger(__name__)


def collect_and_trim() -> bool:
    """Run the garbage collector, then glibc's ``malloc_trim(0)``; False where there is no glibc.

    Python frees the runtime's buffers back to malloc, but glibc keeps freed arenas mapped;
    without the trim the RSS (and a metered bill) barely drops after a release.
    """
    gc.collect()
    try:
        return bool(_libc().malloc_trim(0))
    except (OSError, AttributeError):
        log.info("malloc_trim is not available (not glibc); freed memory stays with the allocator")
        return False


M_ARENA_MAX = -8


def limit_arenas(arenas: int) -> bool:
    """Cap glibc's malloc arenas (``mallopt(M_ARENA_MAX)``); call before threads start.

    Every thread that allocates gets an arena of its own up to 8 × cores; freed memory
    fragments across them and ``malloc_trim`` cannot return it all. Two arenas took the
    released server from 176 to 147 MB here, with no measurable cost to speed.
    """
    if arenas <= 0:
        return False
    try:
        return bool(_libc().mallopt(M_ARENA_MAX, arenas))
    except (OSError, AttributeError):
        return False


@functools.cache
def _libc() -> ctypes.CDLL:
    # find_library runs ``ldconfig -p`` (a subprocess) on every call: look the library up once per process.
    return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
