"""What the inference runtime is built from, and the building: used by the inference process
(`app.runtime.child`) and, with `Options.in_process`, by the server itself.

Light on purpose: the inference process imports this before its first load, so what it imports is on a restore's
path. The backend is built at its first load (`app.runtime.backends.deferred`): choosing OpenVINO's compile cache
starts its CPU plugin, which a process waiting released (`app.runtime.messages.Shed`) would otherwise hold.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from app.forms import modelfile, store, timed
from app.runtime import backends
from app.runtime.backends.base import Backend
from app.runtime.backends.deferred import Deferred
from app.runtime.local import LocalRuntime, WarmUp
from app.settings import Settings
from app.sizing import PoolShape

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Options:
    """How the model runs, where a test or the benchmark asks for other than the product. Never read from the
    environment (`app.settings` holds what an operator sets): the defaults are the server."""

    in_process: bool = False
    """Run the model in the server's process instead of an inference process (`app.runtime.proxy`): the benchmark
    reads CPU time from its own process, and tests build an engine in process."""
    warm_up: bool = True
    """Run one inference on every stream after each load (`app.runtime.local.WarmUp`)."""
    compile_cache: bool = True
    """Use OpenVINO's compile cache and ONNX Runtime's saved graph under the cache directory; False compiles at every
    load (the benchmark's cold starts without a cache)."""
    runtime_defaults: bool = False
    """Leave streams and threads to the runtime's own defaults (the benchmark's baseline)."""
    shipped_tuning: bool = True
    """Serve with a tuning manifest shipped in the package where one covers this CPU or its class (`app.tune.choice`);
    False serves as an instance on a CPU class never measured would (the benchmark's foreign instance)."""
    shape_cache: int = 0
    """OpenVINO's cache of per-input-shape kernels (``CPU_RUNTIME_CACHE_CAPACITY``, entries): at OpenVINO's default
    memory grows with every new input length without bound; 0 bounds it at a small cost in speed
    (docs/experiments.md). -1 keeps OpenVINO's default (the benchmark's baseline)."""


SERVER = Options()
"""The server's own options."""


@dataclass(frozen=True)
class Spec:
    """Everything needed to build the runtime (sent to the inference process once, pickled)."""

    settings: Settings
    model_path: Path
    shape: PoolShape
    writable: Path
    """The writable cache directory (compile cache, ONNX Runtime's optimized graph)."""
    warm_up: WarmUp | None = None
    """What every slot runs once after each load, before serving; None skips the warm-up."""
    options: Options = SERVER
    """Where a test or the benchmark runs the model otherwise than the server does."""

    @property
    def baked_graphs(self) -> Path | None:
        """Where the image build saved ONNX Runtime's optimized graphs (`app.tune.build.save_graph`); None
        where the baked cache is the writable one: what the server saved there itself follows the writable cache's
        rules (a portable graph an earlier version left there is replaced by a packed one, not opened as baked)."""
        baked = self.settings.baked_cache_dir
        if baked is None or baked.resolve() == self.writable.resolve():
            return None
        return baked / "onnxruntime"


def build_runtime(spec: Spec) -> LocalRuntime:
    """The backend, unloaded: run by the inference process, or by the server itself with `Options.in_process`
    (the compile-cache choice imports OpenVINO, so it happens here)."""
    return LocalRuntime(Deferred(spec.settings.backend, lambda: _backend(spec)), spec.warm_up)


def _backend(spec: Spec) -> Backend:
    """The backend, with OpenVINO's compile cache chosen at its first build (it verifies a baked cache's
    files)."""
    settings, options = spec.settings, spec.options
    cache = _compile_cache(settings, options, spec.model_path, spec.writable)
    fallback = spec.writable / "openvino" / cache.name if cache else None
    return backends.create(settings.backend, spec.model_path, spec.shape, runtime_defaults=options.runtime_defaults,
                           precision=settings.precision, cache_dir=cache, fallback_cache_dir=fallback,
                           shape_cache=options.shape_cache,
                           optimized_dir=spec.writable / "onnxruntime" if options.compile_cache else None,
                           baked_optimized_dir=spec.baked_graphs)


def _compile_cache(settings: Settings, options: Options, model_path: Path, writable: Path) -> Path | None:
    """OpenVINO's CACHE_DIR: the cache baked into the image when its key matches, else the writable one
    (or, when the configured cache directory is read-only, what it already holds)."""
    if not options.compile_cache or settings.backend != "openvino":
        return None
    from app.runtime import compile_cache

    # A derived form is a model file of its own: its cache is keyed by the digest recorded when it was made.
    # So is the timed copy of the model (app.forms.timed): its digest was recorded when it was made.
    digest = store.digest(model_path) or timed.digest(model_path) or (
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
