"""Ahead-of-time OpenVINO compile cache: which cache directory a server uses.

What OpenVINO 2026.4 does, measured on this project's model:

* It names a cached blob by a hash of the model's absolute path, the compile properties it deems
  relevant (not streams, threads or precision) and the CPU plugin's caching properties, which are
  just ``FULL_DEVICE_NAME``, the CPU's brand string. A blob made on another CPU model is therefore
  never found: OpenVINO compiles again (12-20 s on 2 cores) and, in a read-only directory, silently
  fails to save the result.
* The blob records the model's size and mtime; when they differ OpenVINO deletes the blob and
  compiles again. In a read-only directory the delete fails and ``compile_model`` *raises*
  ("cannot remove: Read-only file system"). A truncated, empty or garbage blob does the same.
* Nothing checks the blob's bytes: 4 KiB of noise written into the middle of a blob loaded
  without complaint (``LOADED_FROM_CACHE`` true).

So each baked cache lives in ``<baked>/<key>/`` next to a manifest naming what it was built
for and the sha256 of each file, and `choose` only hands OpenVINO a baked directory when the key,
the model file (path, size, mtime) and every file's digest match; anything else compiles into the
writable directory and says why. The key is the OpenVINO version, the CPU instruction set family,
the CPU brand string (because OpenVINO keys on it) and the model's sha256.

The build-time compile that makes a baked cache is `app.tune.build`.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from app.forms.modelfile import sha256_of
from app.runtime.cpu import cpu_flags, isa_family

log = logging.getLogger(__name__)

MANIFEST = "manifest.json"
FORMAT = 1


@dataclass(frozen=True)
class Target:
    """What a compiled blob is valid for, apart from the model."""

    openvino: str
    """``openvino.get_version()`` of the runtime."""
    isa: str
    """CPU instruction set family (`app.runtime.cpu.isa_family`)."""
    device: str
    """OpenVINO's ``FULL_DEVICE_NAME`` for the CPU, the only caching property of its CPU plugin."""

    @classmethod
    def here(cls) -> Target:
        import openvino as ov

        return cls(openvino=ov.get_version(), isa=isa_family(cpu_flags()),
                   device=str(ov.Core().get_property("CPU", "FULL_DEVICE_NAME")))


def cache_key(model_path: Path, model_sha256: str | None = None, *, target: Target | None = None,
              precision: str = "f32") -> str:
    """Filesystem-safe key of a compile cache: OpenVINO version, ISA family, CPU model and model hash,
    and the inference precision when it is not f32.

    ``model_sha256`` saves hashing the model when the caller knows it; ``target`` defaults to this machine.
    OpenVINO's own blob name leaves the precision hint out, so a bf16 blob in an f32 cache directory would
    be imported for f32: each precision other than f32 gets a directory of its own.
    """
    target = target or Target.here()
    digest = model_sha256 or sha256_of(model_path)
    # "2026.4.1-22982-e213a147257-releases/2026/4" -> "2026.4.1-22982": release and build number.
    version = "-".join(target.openvino.split("-")[:2])
    device = _slug(target.device)[:40] + "-" + hashlib.sha256(target.device.encode()).hexdigest()[:6]
    suffix = "" if precision == "f32" else f"_{precision}"
    return _slug(f"ov{version}_{target.isa}_{device}_{digest[:16]}{suffix}", keep="._")


def choose(baked: Path | None, writable: Path, model_path: Path, model_sha256: str | None, *,
           verify: bool = True, target: Target | None = None, precision: str = "f32") -> tuple[Path, str]:
    """The directory to hand OpenVINO as ``CACHE_DIR``, and why.

    ``baked`` holds read-only caches made at build time, one ``<key>/`` each; ``writable`` is the root
    of the server's own cache, used as ``writable/<key>`` when no baked cache fits. ``verify`` checks
    each baked file's sha256 (about 0.3 s for the 316 MiB blob here), because OpenVINO does not.
    """
    target = target or Target.here()
    model_path = model_path.resolve()
    manifests = _manifests(baked) if baked is not None else {}
    model_sha256 = model_sha256 or _known_digest(model_path, manifests.values()) or sha256_of(model_path)
    key = cache_key(model_path, model_sha256, target=target, precision=precision)
    fallback = writable / key
    if baked is None:
        return fallback, f"no baked cache configured: using {fallback}"
    manifest = manifests.get(key)
    if manifest is None:
        built_for = ", ".join(sorted(manifests)) or "nothing readable"
        return fallback, f"no baked cache for key {key} (image built for {built_for}): compiling into {fallback}"
    problem = _problem(baked / key, manifest, model_path, verify)
    if problem:
        return fallback, f"baked cache {baked / key} is unusable ({problem}): compiling into {fallback}"
    return baked / key, f"baked cache matches key {key}: {baked / key}"


def _manifests(baked: Path) -> dict[str, dict[str, Any]]:
    """Readable manifests under ``baked``, by key; an unreadable one is skipped with a warning."""
    found: dict[str, dict[str, Any]] = {}
    try:
        entries = sorted(p for p in baked.iterdir() if p.is_dir())
    except OSError as exc:
        log.warning("cannot list baked compile caches in %s: %s", baked, exc)
        return found
    for entry in entries:
        path = entry / MANIFEST
        try:
            manifest = json.loads(path.read_text())
            if manifest.get("format") == FORMAT and manifest.get("key") == entry.name:
                found[entry.name] = manifest
            else:
                log.warning("ignoring %s: not a format-%d manifest for key %s", path, FORMAT, entry.name)
        except (OSError, ValueError, AttributeError) as exc:
            log.warning("ignoring baked cache %s: %s", entry, exc)
    return found


def _known_digest(model_path: Path, manifests: Iterable[dict[str, Any]]) -> str | None:
    """The model's sha256 from a manifest made for this very file (same path, size, mtime), so a
    start need not hash a 92-310 MB model to find its key."""
    stat = model_path.stat()
    for manifest in manifests:
        model = manifest.get("model", {})
        if (model.get("path"), model.get("size"), model.get("mtime_ns")) == (
                str(model_path), stat.st_size, stat.st_mtime_ns):
            digest = model.get("sha256")
            return str(digest) if digest else None
    return None


def _problem(directory: Path, manifest: dict[str, Any], model_path: Path, verify: bool) -> str:
    """Why OpenVINO could not use ``directory`` as it is, or ``""``."""
    model = manifest.get("model", {})
    stat = model_path.stat()
    # OpenVINO's own checks: its hash covers the absolute path, the blob records size and mtime.
    if model.get("path") != str(model_path):
        return f"built for the model at {model.get('path')}, this server loads {model_path}"
    if (model.get("size"), model.get("mtime_ns")) != (stat.st_size, stat.st_mtime_ns):
        return (f"model file changed since the cache was built (size/mtime {model.get('size')}/{model.get('mtime_ns')}"
                f" then, {stat.st_size}/{stat.st_mtime_ns} now)")
    files: dict[str, dict[str, Any]] = manifest.get("files", {})
    if not any(name.endswith(".blob") for name in files):
        return "the manifest lists no blob"
    for name, expected in files.items():
        path = directory / name
        try:
            size = path.stat().st_size
            if size != expected.get("size"):
                return f"{name} has {size} bytes, expected {expected.get('size')}"
            if verify and sha256_of(path) != expected.get("sha256"):
                return f"{name} does not match its sha256"
        except OSError as exc:
            return f"{name}: {exc.strerror or exc}"
    return ""


def write_manifest(directory: Path, key: str, model_path: Path, model_sha256: str, target: Target,
                   extra: dict[str, Any]) -> dict[str, Any]:
    """Describe the cache in ``directory`` (what it is for, each file's size and sha256)."""
    stat = model_path.stat()
    files = {p.name: {"size": p.stat().st_size, "sha256": sha256_of(p)}
             for p in sorted(directory.iterdir()) if p.is_file() and p.name != MANIFEST}
    manifest = {
        "format": FORMAT,
        "key": key,
        "openvino": target.openvino,
        "isa": target.isa,
        "device": target.device,
        "model": {"path": str(model_path), "size": stat.st_size, "mtime_ns": stat.st_mtime_ns,
                  "sha256": model_sha256},
        "files": files,
        **extra,
    }
    (directory / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
    return manifest


def _slug(text: str, keep: str = "") -> str:
    allowed = re.escape(keep)
    return re.sub(rf"[^a-z0-9{allowed}-]+", "-", text.lower()).strip("-") or "unknown"
