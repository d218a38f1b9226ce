"""OpenVINO: one compiled model with N streams × T threads and one infer request per stream.

``INFERENCE_NUM_THREADS`` is the total across streams and both are capped by the CPUs the
runtime sees, so the values actually used are read back from the compiled model. Precision is
always set: on AMX CPUs the default (bf16) changes the audio and has crashed inside ``infer``.
"""

from __future__ import annotations

import logging
import shutil
import time
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from app.forms import timed
from app.runtime.backends.base import Inference, Resolved, last_line, package_dirs
from app.sizing import PoolShape

log = logging.getLogger(__name__)


class OpenVinoBackend:
    name = "openvino"

    def __init__(self, model_path: Path, shape: PoolShape, *, runtime_defaults: bool, precision: str,
                 cache_dir: Path | None, fallback_cache_dir: Path | None = None, shape_cache: int = 0) -> None:
        self._model_path = model_path
        self._shape = shape
        self._runtime_defaults = runtime_defaults
        self._precision = precision
        self._cache_dir = cache_dir
        self._fallback_cache_dir = fallback_cache_dir
        self._shape_cache = shape_cache
        self._core: Any = None
        self._compiled: Any = None
        self._requests: list[Any] = []
        self._timed = False
        """Whether the model outputs the per-token durations (its second output, `app.forms.timed`)."""

    @property
    def loaded(self) -> bool:
        return self._compiled is not None

    def config(self) -> dict[str, str]:
        """Properties passed to ``compile_model``."""
        # CPU_DENORMALS_OPTIMIZATION is faster (docs/experiments.md) but
        # it breaks the duration predictor on some inputs ("Hello there." gave 0 samples or a
        # Broadcast shape error) and its flush-to-zero flags leak to later compiles: never set it.
        config = {"INFERENCE_PRECISION_HINT": self._precision}
        if self._shape_cache >= 0:
            # Not part of OpenVINO's cache key: a blob compiled with any value imports with any other.
            config["CPU_RUNTIME_CACHE_CAPACITY"] = str(self._shape_cache)
        if not self._runtime_defaults:
            config["NUM_STREAMS"] = str(self._shape.streams)
            config["INFERENCE_NUM_THREADS"] = str(self._shape.threads)
            # OpenVINO pins each stream's threads to cores by default. Alone that neither helps nor hurts; but
            # two processes sharing the cores (a second server, the tests side by side, a container's
            # neighbours) then wait on each other's pinned threads and run much slower (docs/experiments.md).
            config["ENABLE_CPU_PINNING"] = "NO"
        return config

    def load(self) -> Resolved:
        import openvino as ov

        start = time.perf_counter()
        had_blobs = self._cache_dir is not None and any(self._cache_dir.glob("*.blob"))
        core, compiled = self._compile(ov)
        streams = int(compiled.get_property("NUM_STREAMS"))
        slots = self._shape.streams if self._runtime_defaults else streams
        self._requests = [compiled.create_infer_request() for _ in range(slots)]
        self._core, self._compiled = core, compiled
        self._timed = len(compiled.outputs) > 1 and any(timed.is_duration_output(n) for n in compiled.outputs[1].names)
        from_cache = bool(_property(compiled, "LOADED_FROM_CACHE", False))
        if not from_cache and had_blobs:
            log.warning("the compile cache in %s held blobs but none could be imported (damaged, unreadable or "
                        "stale): compiled again in %.1f s", self._cache_dir, time.perf_counter() - start)
        return Resolved(
            backend=self.name,
            slots=slots,
            streams=streams,
            threads=int(compiled.get_property("INFERENCE_NUM_THREADS")),
            precision=_type_name(compiled.get_property("INFERENCE_PRECISION_HINT")),
            load_s=time.perf_counter() - start,
            from_cache=from_cache if self._cache_dir is not None else None,
            extra={"openvino": ov.get_version(), "performance_hint": str(_property(compiled, "PERFORMANCE_HINT", "")),
                   "config": self.config()},
        )

    def _compile(self, ov: Any) -> tuple[Any, Any]:
        """Compile, or import from the cache. OpenVINO recompiles over a damaged blob in a writable cache,
        but where it cannot delete a stale or damaged blob (a read-only baked cache) ``compile_model``
        raises: then compile into the writable fallback, emptied first, and last without any cache."""
        attempts: list[tuple[Path | None, bool]] = [(self._cache_dir, False), (self._fallback_cache_dir, True)]
        attempts = [(cache, wipe) for cache, wipe in attempts if cache is not None] + [(None, False)]
        for number, (cache, wipe) in enumerate(attempts):
            core = ov.Core()
            try:
                if cache is not None:
                    if wipe:
                        shutil.rmtree(cache, ignore_errors=True)
                    cache.mkdir(parents=True, exist_ok=True)
                    core.set_property({"CACHE_DIR": str(cache)})
                compiled = core.compile_model(str(self._model_path), "CPU", self.config())
            except (RuntimeError, OSError) as exc:
                if cache is None:
                    raise
                after = attempts[number + 1][0]
                log.warning("compiling with CACHE_DIR=%s failed (%s); trying again %s", cache,
                            last_line(exc), f"in {after}, emptied" if after else "uncached")
                continue
            self._cache_dir = cache  # later restores use the directory that worked
            return core, compiled
        raise AssertionError("unreachable: the uncached attempt re-raises")

    def unload(self) -> None:
        self._requests = []
        self._compiled = None
        self._core = None

    def infer(self, slot: int, tokens: npt.NDArray[np.int64], style: npt.NDArray[np.float32],
              speed: float) -> npt.NDArray[np.float32]:
        return self.infer_timed(slot, tokens, style, speed).audio

    def infer_timed(self, slot: int, tokens: npt.NDArray[np.int64], style: npt.NDArray[np.float32],
                    speed: float) -> Inference:
        request = self._requests[slot]
        request.infer({"tokens": tokens, "style": style, "speed": np.array([speed], dtype=np.float32)})
        # The output tensors are the request's own buffers, reused by its next inference: copy them.
        audio = np.array(request.get_output_tensor(0).data, dtype=np.float32).reshape(-1)
        durations = (np.array(request.get_output_tensor(1).data, dtype=np.int64).reshape(-1) if self._timed
                     else None)
        return Inference(audio, durations)

    def files(self) -> list[Path]:
        found = [self._model_path]
        weights = self._model_path.with_suffix(".bin")
        if self._model_path.suffix == ".xml" and weights.is_file():
            found.append(weights)  # an IR form's weights, mapped by a load that used no compile cache
        if self._cache_dir is not None and self._cache_dir.is_dir():
            found.extend(p for p in self._cache_dir.iterdir() if p.is_file())
        return found


def page_cache_roots(writable: Path, configured: Path, baked: Path | None) -> list[Path]:
    """Where an OpenVINO process may have read files it did not list yet (a background load cut short
    by a release): its compile caches (writable, the configured one when read-only, the baked ones) and
    OpenVINO's own libraries and plugins."""
    roots = [writable / "openvino", configured / "openvino"]
    if baked is not None:
        roots.append(baked)
    return roots + package_dirs("openvino")


def _property(compiled: Any, name: str, default: Any) -> Any:
    try:
        return compiled.get_property(name)
    except RuntimeError:
        return default


def _type_name(value: Any) -> str:
    """``<Type: 'float32'>`` → ``f32``: OpenVINO element types print awkwardly."""
    name = getattr(value, "get_type_name", None)
    return str(name()) if callable(name) else str(value)
