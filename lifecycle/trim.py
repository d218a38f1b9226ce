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
M_MMAP_THRESHOLD = -3
MALLOC_ARENAS = 2
"""glibc malloc arenas of the server's processes: fewer arenas return more memory on release (`limit_arenas`)."""
MMAP_THRESHOLD_KB = 256
"""Allocations of this many KiB or more get a mapping of their own, given back when freed: a lower warm peak under
load at the same speed than glibc's sliding threshold (`fix_mmap_threshold`)."""


def limit_arenas(arenas: int) -> bool:
    """Cap glibc's malloc arenas (``mallopt(M_ARENA_MAX)``); call before threads start.

    Every thread that allocates gets an arena of its own up to 8 × cores; freed memory
    fragments across them and ``malloc_trim`` cannot return it all. Two arenas made the
    released server smaller, with no measurable cost to speed (docs/experiments.md).
    """
    if arenas <= 0:
        return False
    try:
        return bool(_libc().mallopt(M_ARENA_MAX, arenas))
    except (OSError, AttributeError):
        return False


def fix_mmap_threshold(kib: int) -> bool:
    """Serve every allocation of ``kib`` KiB or more with a mapping of its own (``mallopt(M_MMAP_THRESHOLD)``),
    returned to the system when it is freed; call before threads start.

    glibc's default threshold starts at 128 KiB and rises to the size of each large block freed (up to 32
    MiB), after which such blocks come from the heap and stay there: the server's audio buffers and the
    runtimes' scratch memory then hold the highest water mark of every arena. A fixed threshold lowers the
    server's warm peak under long requests at the same speed (docs/experiments.md). 0 keeps glibc's sliding
    threshold."""
    if kib <= 0:
        return False
    try:
        return bool(_libc().mallopt(M_MMAP_THRESHOLD, kib * 1024))
    except (OSError, AttributeError):
        return False


def configure_malloc(arenas: int = MALLOC_ARENAS, mmap_threshold_kb: int = MMAP_THRESHOLD_KB) -> dict[str, bool]:
    """`limit_arenas` and `fix_mmap_threshold` together, as the server's processes set them at start (before
    threads); what each call applied."""
    return {"arenas": limit_arenas(arenas), "mmap_threshold": fix_mmap_threshold(mmap_threshold_kb)}


@functools.cache
def _libc() -> ctypes.CDLL:
    # find_library runs ``ldconfig -p`` (a subprocess) on every call: look the library up once per process.
    return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
