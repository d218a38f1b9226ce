"""What the inference runtime is built from, and the building: used by the inference process
(`app.runtime.child`) and, with ``TTS_INFERENCE_PROCESS=0``, by the server itself.

Light on purpose: the inference process imports this before it can open the bridge, so what
it imports is on a restore's path. The primary backend is built at its first load
(`app.runtime.backends.deferred`): choosing OpenVINO's compile cache imports OpenVINO and starts its
CPU plugin, work a restore served by the bridge does in the background.
"""

from __future__ import annotations

import functools
import logging
from dataclasses import dataclass
from pathlib import Path

from app.runtime import backends, forms, modelfile, timed
from app.runtime.backends.base import Backend
from app.runtime.backends.deferred import Deferred
from app.runtime.local import LocalRuntime, WarmUp
from app.settings import Settings
from app.sizing import PoolShape

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Spec:
    """Everything needed to build the runtime (sent to the inference process once, pickled)."""

    settings: Settings
    model_path: Path
    shape: PoolShape
    writable: Path
    """The writable cache directory (compile cache, the bridge's optimized graph)."""
    warm_up: WarmUp | None = None
    """What every slot runs once after each load, before serving; None skips the warm-up."""
    bridge_path: Path | None = None
    """The file the ONNX Runtime bridge runs when it is not ``model_path`` (`app.served`): under an OpenVINO form,
    the ONNX file it was derived from (ONNX Runtime cannot run OpenVINO's IR) or the ONNX Runtime form the tuning
    run measured faster as one session on all threads (`app.runtime.tuning.bridge_choice`). None: the bridge runs
    ``model_path`` (the file as shipped, or a form ONNX Runtime runs)."""

    @property
    def baked_graphs(self) -> Path | None:
        """Where the image build saved ONNX Runtime's optimized graphs (`app.runtime.build.save_bridge_graph`); None
        where the baked cache is the writable one: what the server saved there itself follows the writable cache's
        rules (a portable graph an earlier version left there is replaced by a packed one, not opened as baked)."""
        baked = self.settings.baked_cache_dir
        if baked is None or baked.resolve() == self.writable.resolve():
            return None
        return baked / "onnxruntime"

    @property
    def has_bridge(self) -> bool:
        """A bridge opens faster than the primary and serves a request alone faster: OpenVINO's compiled model
        takes seconds to import, and ONNX Runtime sized as N sessions of T threads opens N sessions, each
        running a lone request on T threads, where the bridge opens one with all N x T."""
        settings = self.settings
        if not settings.restore_bridge:
            return False
        if settings.backend == "openvino":
            return True
        return settings.backend == "onnxruntime" and not settings.runtime_defaults and self.shape.streams > 1

    @property
    def wide_primary(self) -> bool:
        """Whether the wide session is OpenVINO's primary form compiled as one stream on all the pool's threads
        (``TTS_WIDE_FORM=primary``; `app.runtime.tuning.AUTO_WIDE_FORMS` says why ``auto`` never picks it)."""
        settings = self.settings
        return (settings.wide_form == "primary" and settings.backend == "openvino" and settings.wide_chunk_tokens > 0
                and self.shape.streams > 1)

    @property
    def wide(self) -> bool:
        """Whether the pool has a wide session (`app.runtime.local`): the primary's form on every thread, or the
        bridge kept loaded beside the primary; only where it is wider than a slot, that is where the pool has
        more than one stream."""
        return self.wide_primary or (self.settings.wide_chunk_tokens > 0 and self.has_bridge
                                     and self.shape.streams > 1)


def build_runtime(spec: Spec) -> LocalRuntime:
    """The backends, unloaded: run by the inference process, or by the server itself when
    ``TTS_INFERENCE_PROCESS=0`` (the compile-cache choice imports OpenVINO, so it happens here)."""
    bridge = (backends.bridge(spec.bridge_path or spec.model_path, spec.shape, spec.writable / "onnxruntime",
                              spec.baked_graphs, spin_us=spec.settings.bridge_spin_us) if spec.has_bridge else None)
    # Chosen once, at the primary's first build (it verifies a baked cache's files): the wide form shares it.
    cache = functools.cache(lambda: _compile_cache(spec.settings, spec.model_path, spec.writable))
    wide = (Deferred(spec.settings.backend, lambda: _primary(spec, cache(), PoolShape(1, spec.shape.threads)))
            if spec.wide_primary else None)
    return LocalRuntime(Deferred(spec.settings.backend, lambda: _primary(spec, cache())), bridge, spec.warm_up,
                        keep_bridge=spec.wide and not spec.wide_primary, wide=wide)


def _primary(spec: Spec, cache: Path | None, shape: PoolShape | None = None) -> Backend:
    """The primary backend with OpenVINO's ``cache`` directory, in the pool's shape or (the wide session's form) in
    ``shape``."""
    settings = spec.settings
    fallback = spec.writable / "openvino" / cache.name if cache else None
    return backends.create(settings.backend, spec.model_path, shape or spec.shape,
                           runtime_defaults=settings.runtime_defaults,
                           precision=settings.precision, cache_dir=cache, fallback_cache_dir=fallback,
                           shape_cache=settings.shape_cache,
                           optimized_dir=spec.writable / "onnxruntime" if settings.compile_cache else None,
                           baked_optimized_dir=spec.baked_graphs)


def _compile_cache(settings: Settings, model_path: Path, writable: Path) -> Path | None:
    """OpenVINO's CACHE_DIR: the cache baked into the image when its key matches, else the writable one
    (or, when the configured cache directory is read-only, what it already holds)."""
    if not settings.compile_cache or settings.backend != "openvino":
        return None
    from app.runtime import compile_cache

    # A derived form is a model file of its own: its cache is keyed by the digest recorded when it was made.
    # So is the timed copy of the model (app.runtime.timed): its digest was recorded when it was made.
    digest = forms.digest(model_path) or timed.digest(model_path) or (
        modelfile.expected_sha256() if settings.model_path is None else None)
    directory, why = compile_cache.choose(settings.baked_cache_dir, writable / "openvino", model_path, digest,
                                          precision=settings.precision)
    readonly = settings.cache_dir / "openvino" / directory.name
    if writable != settings.cache_dir and directory.parent == writable / "openvino" and readonly.is_dir():
        # What a read-only cache directory already compiled is imported from there; when OpenVINO
        # cannot use it, the backend compiles into the writable fallback.
        directory, why = readonly, f"{why}; importing what the read-only {readonly} holds first"
    log.info("compile cache: %s", why)
    return directory
