"""Where the server may write: the configured cache directory, or a private temporary one.

A read-only or missing-and-uncreatable ``TTS_CACHE_DIR`` (a read-only root file system, a mount
that went away) must not stop the server: it logs why and writes into a directory of its own
under the system's temporary directory instead. What the configured directory already holds
(an assembled model, compiled blobs) is still read from it (see `app.services`).
"""

from __future__ import annotations

import logging
import os
import tempfile
from pathlib import Path

log = logging.getLogger(__name__)


class CacheDirError(RuntimeError):
    """No directory the server may write to; the message names each one tried and why."""


def writable(preferred: Path) -> Path:
    """``preferred`` if it can be created and written to, else a private temporary directory."""
    reason = _probe(preferred)
    if reason is None:
        return preferred
    fallback = Path(tempfile.gettempdir()) / f"kokoro-tts-{os.getuid()}"
    fallback_reason = _probe(fallback)
    if fallback_reason is not None:
        raise CacheDirError(f"cache directory {preferred} is not writable ({reason}) and neither is "
                            f"{fallback} ({fallback_reason}): set TTS_CACHE_DIR to a writable directory")
    log.warning("cache directory %s is not writable (%s): writing to %s instead", preferred, reason, fallback)
    return fallback


def _probe(directory: Path) -> str | None:
    """None if ``directory`` exists (or was created) and a file can be written in it; else why not."""
    try:
        directory.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=directory, prefix=".probe-"):
            pass
    except OSError as exc:
        return exc.strerror or type(exc).__name__
    return None
