"""Which backend runs inferences: the primary, or, under an OpenVINO primary, a fast-loading bridge while it loads.

After a release, importing OpenVINO's compiled model from the cache is the slowest part of a
restore (seconds, more with the cache evicted from the page cache), while an ONNX Runtime
session on the same model file opens in a fraction of that. With a bridge, a restore
opens the bridge, serves the first requests with it, and loads the primary in a background
thread once the bridge's first inference is done; new inferences switch to the primary as
soon as it is ready and the bridge is dropped when its last inference ends. Nothing loaded is
thrown away unused.

At start the same holds (`load_bridged` with ``wait_for_request=False``): the bridge opens, the
server turns ready, and the primary loads at once behind it, at the lowest CPU priority, since no
request is waiting yet to be served first. A primary that fails to load behind the bridge leaves the
bridge serving: the failure is logged, kept in `primary_error` (shown by ``/v1/info``) and handed
to `on_primary_failed`; the next load (a restore) tries the primary again.

Every load of OpenVINO ends with a **warm-up** (not ONNX Runtime's: see `WARMED_BACKENDS`): each slot
runs one short inference before the backend serves,
so the first request (after start, after a restore, or the first inference of the primary taking
over from the bridge) does not pay the runtime's first-call costs. The warm-up calls the backend
directly: it is not counted as served, and it does not count as the bridge's first inference.

The runtime's files (model, compile cache, ONNX Runtime's saved graph) are **dropped from the page cache**
once a load has finished and then at most every `SETTLE_S` after an inference (`settle`): what a runtime
read into its own memory (ONNX Runtime's graph, most of OpenVINO's cache blob) stays cached otherwise, and a
platform that meters the container's cgroup bills it twice. Pages a runtime still maps are left alone.

Threads: `load_*` and `unload` run in the lifecycle's worker thread (never concurrently with
each other); `infer` runs in the pool's worker threads; the background loader is joined by
`unload`, so a release never races a load.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt

from app.runtime.backends.base import Backend, Inference, Resolved
from lifecycle import pagecache, trim

log = logging.getLogger(__name__)

WARMED_BACKENDS = frozenset({"openvino"})
"""Backends whose first inference is slow enough to pay a warm-up for. Not ONNX Runtime: its warm-up took longer
than it saved, and the request after it came no sooner than one on a session that had not run; on the path of a
start or a restore, that time was pure cost (docs/experiments.md)."""

SETTLE_S = 10.0
"""Least time between two evictions of the runtime's files from the page cache after inferences: OpenVINO reads
more of its cache blob on the first inferences of longer inputs (on the first long chunks), then nothing. An
eviction costs a few system calls (docs/performance.md)."""

PRIMARY_WAIT_S = 5.0
"""Longest wait for the bridge's first inference before the primary starts loading anyway."""


@dataclass(frozen=True)
class WarmUp:
    """The input every slot runs once after a load, before it serves."""

    tokens: npt.NDArray[np.int64]
    style: npt.NDArray[np.float32]


class LocalRuntime:
    """The backends in this process (`app.runtime.protocol.Runtime`): the primary, and the bridge if any."""

    def __init__(self, primary: Backend, bridge: Backend | None = None, warm_up: WarmUp | None = None) -> None:
        self.primary = primary
        self.bridge = bridge
        self.warm_up = warm_up
        self.resolved: Resolved | None = None
        """What the primary resolved at its last load."""
        self.served: Counter[str] = Counter()
        """Inferences run per backend name."""
        self._active: Backend | None = None
        self._users: Counter[int] = Counter()
        self._lock = threading.Lock()
        self._loader: threading.Thread | None = None
        self._bridge_served = threading.Event()
        self._stop_loading = False
        self.on_primary: Callable[[Resolved], None] | None = None
        """Called (from the loader thread) when the primary takes over from the bridge."""
        self.primary_error: str | None = None
        """Why the primary failed to load behind the bridge (the bridge serves on); None once a load succeeds."""
        self.on_primary_failed: Callable[[str], None] | None = None
        """Called (from the loader thread) with `primary_error` when the background load fails."""
        self._settled = 0.0
        """When `settle` last evicted (monotonic seconds; 0 before the first)."""

    @property
    def has_bridge(self) -> bool:
        return self.bridge is not None

    @property
    def loaded(self) -> bool:
        return self._active is not None

    @property
    def bridge_serving(self) -> bool:
        return self._active is not None and self._active is self.bridge

    @property
    def active_name(self) -> str | None:
        active = self._active
        return active.name if active is not None else None

    def load_primary(self) -> Resolved:
        """Load the primary and serve with it (a start or a restore without a bridge)."""
        self.resolved = self._warm(self.primary, self.primary.load())
        self.primary_error = None
        with self._lock:
            self._active = self.primary
        self.settle()
        return self.resolved

    def load_bridged(self, wait_for_request: bool = True) -> Resolved:
        """Open the bridge and serve with it now; load the primary in the background, once the bridge has
        served its first inference when ``wait_for_request`` (a restore: a request is waiting), else at once."""
        assert self.bridge is not None
        # Unpacked only where a request waits on the opening (a restore): at a start the bridge opens beside the
        # server's imports, and its first inference, which the primary's load then competes with, would pay for it.
        _pack_at_open(self.bridge, not wait_for_request)
        opened = self._warm(self.bridge, self.bridge.load())
        with self._lock:
            self._active = self.bridge
        self._bridge_served = threading.Event()
        if not wait_for_request:
            self._bridge_served.set()
        self._stop_loading = False
        self._loader = threading.Thread(target=self._load_primary_behind, name="primary-load", daemon=True)
        self._loader.start()
        return opened

    def _load_primary_behind(self) -> None:
        # Start once the bridge has served its first inference: the request that caused the restore
        # is waiting for it, and on few CPUs the load would slow it down (docs/experiments.md).
        self._bridge_served.wait(PRIMARY_WAIT_S)
        if self._stop_loading:
            return  # released meanwhile: loading now would be thrown away
        # Lowest CPU priority for this thread and the runtime threads it spawns: the bridge is
        # serving requests that are waiting right now, the primary only needs to be ready later.
        # Those threads keep it once the primary serves (an unprivileged process cannot raise it
        # back); measured harmless (docs/experiments.md).
        _lowest_priority()
        try:
            resolved = self._warm(self.primary, self.primary.load())
        except Exception as exc:  # the bridge keeps serving; the next release/restore retries
            log.exception("primary backend failed to load behind the bridge; the bridge keeps serving")
            self.primary_error = f"{type(exc).__name__}: {exc}"
            if self.on_primary_failed is not None:
                self.on_primary_failed(self.primary_error)
            return
        self.resolved = resolved
        self.primary_error = None
        with self._lock:
            self._active = self.primary
            idle_bridge = self.bridge is not None and self._users[id(self.bridge)] == 0
        log.info("primary backend took over from the bridge after %.2f s", resolved.load_s)
        if self.on_primary is not None:
            self.on_primary(resolved)
        if idle_bridge and self.bridge is not None:
            self._drop(self.bridge)
        self.settle()

    def _warm(self, backend: Backend, resolved: Resolved) -> Resolved:
        """One inference on every stream of a freshly loaded ``backend``, one after another.

        Not all at once: once, a server whose model had just been imported from the compile cache
        never finished two concurrent warm-up inferences (not reproduced since, in process or in
        the inference process); one at a time, each infer request has run before any runs beside
        another, and the input is short enough that the sum costs little.
        """
        warm_up = self.warm_up
        if warm_up is None or backend.name not in WARMED_BACKENDS:
            return resolved
        start = time.perf_counter()
        # Once per stream: slots that share one session (the bridge, ONNX Runtime defaults) warm together.
        streams = max(1, min(resolved.slots, resolved.streams))
        for slot in range(streams):
            try:
                backend.infer(slot, warm_up.tokens, warm_up.style, 1.0)
            except Exception as exc:  # a backend that cannot infer must not serve
                raise RuntimeError(f"the {backend.name} warm-up inference failed on slot {slot}: {exc!r}") from exc
        seconds = time.perf_counter() - start
        log.info("%s warmed up: %d streams in %.2f s", backend.name, streams, seconds)
        return dataclasses.replace(resolved, warmed=streams, warm_up_s=seconds)

    def infer(self, slot: int, tokens: npt.NDArray[np.int64], style: npt.NDArray[np.float32],
              speed: float) -> npt.NDArray[np.float32]:
        return self.infer_named(slot, tokens, style, speed)[0].audio

    def infer_timed(self, slot: int, tokens: npt.NDArray[np.int64], style: npt.NDArray[np.float32],
                    speed: float) -> Inference:
        return self.infer_named(slot, tokens, style, speed)[0]

    def infer_named(self, slot: int, tokens: npt.NDArray[np.int64], style: npt.NDArray[np.float32],
                    speed: float) -> tuple[Inference, str]:
        """The inference's outputs, and the name of the backend that made them."""
        with self._lock:
            backend = self._active
            if backend is None:
                raise RuntimeError("no backend is loaded")
            self._users[id(backend)] += 1
        try:
            return backend.infer_timed(slot, tokens, style, speed), backend.name
        finally:
            with self._lock:
                self._users[id(backend)] -= 1
                self.served[backend.name] += 1
                if backend is self.bridge:
                    self._bridge_served.set()
                drop = backend is self.bridge and self._active is not backend and self._users[id(backend)] == 0
            if drop:
                self._drop(backend)
            if time.monotonic() - self._settled >= SETTLE_S:
                self.settle()

    def settle(self) -> int:
        """Evict the loaded runtimes' files from the page cache (not while a background load reads them);
        returns how many files were advised."""
        loader = self._loader
        if loader is not None and loader.is_alive() and threading.current_thread() is not loader:
            return 0
        self._settled = time.monotonic()
        return pagecache.evict(self.files())

    @staticmethod
    def _drop(bridge: Backend) -> None:
        """Unload the bridge once the primary serves, and hand what it freed back to the system: without the
        trim glibc kept it as part of the warm process tree (docs/experiments.md)."""
        bridge.unload()
        trim.collect_and_trim()

    def intact(self) -> bool:
        """In process, loaded state cannot vanish on its own (see `app.runtime.proxy`)."""
        return True

    def unload(self) -> None:
        """Drop everything; waits for a background load first."""
        if self._loader is not None:
            self._stop_loading = True
            self._bridge_served.set()
            self._loader.join()
            self._loader = None
        with self._lock:
            self._active = None
        self.primary.unload()
        if self.bridge is not None:
            self.bridge.unload()

    def files(self) -> list[Path]:
        found = list(self.primary.files())
        if self.bridge is not None:
            found.extend(p for p in self.bridge.files() if p not in found)
        return found


def _pack_at_open(bridge: Backend, pack: bool) -> None:
    """Whether ``bridge`` (where it can choose: `app.runtime.backends.onnxruntime.OnnxRuntimeBackend.pack_at_open`)
    packs its weights as it opens, or opens at once with them unpacked."""
    if hasattr(bridge, "pack_at_open"):
        bridge.pack_at_open = pack


def _lowest_priority() -> None:
    """Nice 19 for the calling thread (and the runtime threads it spawns), where the system allows it."""
    try:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 19)
    except (OSError, AttributeError):
        pass
