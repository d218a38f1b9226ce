"""Inference runtimes behind one small interface (`app.runtime.backends.base.Backend`)."""

from __future__ import annotations

from pathlib import Path

from app.runtime.backends.base import Backend
from app.sizing import PoolShape


def create(name: str, model_path: Path, shape: PoolShape, *, runtime_defaults: bool, precision: str,
           cache_dir: Path | None, fallback_cache_dir: Path | None = None, shape_cache: int = 0,
           optimized_dir: Path | None = None, baked_optimized_dir: Path | None = None) -> Backend:
    """Build (but do not load) the backend called ``name``. ``optimized_dir`` keeps ONNX Runtime's optimized
    graph between loads (opens in about half the time, bit-identical audio); ``baked_optimized_dir`` is where
    the image build saved one (read-only, looked in first)."""
    if name == "openvino":
        from app.runtime.backends.openvino import OpenVinoBackend

        return OpenVinoBackend(model_path, shape, runtime_defaults=runtime_defaults, precision=precision,
                               cache_dir=cache_dir, fallback_cache_dir=fallback_cache_dir, shape_cache=shape_cache)
    if name == "onnxruntime":
        from app.runtime.backends.onnxruntime import OnnxRuntimeBackend

        return OnnxRuntimeBackend(model_path, shape, runtime_defaults=runtime_defaults,
                                  optimized_dir=None if runtime_defaults else optimized_dir,
                                  baked_optimized_dir=baked_optimized_dir)
    raise ValueError(f"unknown backend {name!r}")


def unlisted_files(models: list[Path], writable: Path, configured: Path, baked: Path | None) -> list[Path]:
    """Every file an inference process may have read, listed or not: the models, and what lies under each backend's
    `page_cache_roots` (both backends, whichever served: a file read is evicted, one not read costs nothing)."""
    from app.runtime.backends import onnxruntime, openvino

    roots = openvino.page_cache_roots(writable, configured, baked) + onnxruntime.page_cache_roots(writable)
    found = list(dict.fromkeys(models))
    for root in dict.fromkeys(roots):
        if root.is_dir():
            found.extend(p for p in root.rglob("*") if p.is_file())
    return found
