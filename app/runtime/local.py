"""The backend that runs inferences in this process: one per instance, loaded, warmed, serving.

One engine serves every request of an instance, from its first after a start or a restore to its last: the same
request gives the same bytes whenever it comes (an ONNX Runtime bridge that served while OpenVINO loaded made
the first requests sound different, and was removed: docs/experiments.md).

Every load of OpenVINO ends with a **warm-up** (not ONNX Runtime's: see `WARMED_BACKENDS`): each slot runs one short
inference before the backend serves, so the first request (after start, after a restore) does not pay the runtime's
first-call costs. The warm-up calls the backend directly: it is not counted as served.

The runtime's files (model, compile cache, ONNX Runtime's saved graph) are **dropped from the page cache**
once a load has finished and then at most every `SETTLE_S` after an inference (`settle`): what a runtime
read into its own memory (ONNX Runtime's graph, most of OpenVINO's cache blob) stays cached otherwise, and a
platform that meters the container's cgroup bills it twice. Pages a runtime still maps are left alone.

Threads: `load` and `unload` run in the lifecycle's worker thread (never concurrently with each other, never while
``infer`` runs); `infer` runs in the pool's worker threads.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt

from app.runtime.backends.base import Backend, Inference, Resolved
from lifecycle import pagecache

log = logging.getLogger(__name__)

WARMED_BACKENDS = frozenset({"openvino"})
"""Backends whose first inference is slow enough to pay a warm-up for. Not ONNX Runtime: its warm-up took longer
than it saved, and the request after it came no sooner than one on a session that had not run; on the path of a
start or a restore, that time was pure cost (docs/experiments.md)."""

SETTLE_S = 10.0
"""Least time between two evictions of the runtime's files from the page cache after inferences: OpenVINO reads
more of its cache blob on the first inferences of longer inputs (on the first long chunks), then nothing. An
eviction costs a few system calls (docs/performance.md)."""


@dataclass(frozen=True)
class WarmUp:
    """The input every slot runs once after a load, before it serves."""

    tokens: npt.NDArray[np.int64]
    style: npt.NDArray[np.float32]


class LocalRuntime:
    """The backend in this process (`app.runtime.protocol.Runtime`)."""

    def __init__(self, backend: Backend, warm_up: WarmUp | None = None) -> None:
        self.backend = backend
        self.warm_up = warm_up
        self.resolved: Resolved | None = None
        """What the backend resolved at its last load."""
        self.served: Counter[str] = Counter()
        """Inferences run per backend name."""
        self._active: Backend | None = None
        self._lock = threading.Lock()
        self._settled = 0.0
        """When `settle` last evicted (monotonic seconds; 0 before the first)."""

    @property
    def loaded(self) -> bool:
        return self._active is not None

    @property
    def active_name(self) -> str | None:
        active = self._active
        return active.name if active is not None else None

    def load(self) -> Resolved:
        """Load the backend, warm it, and serve with it (a start or a restore)."""
        self.resolved = self._warm(self.backend, self.backend.load())
        self._active = self.backend
        self.settle()
        return self.resolved

    def hold(self) -> None:
        """While released, before the next load: open what the backend holds ahead of it (`Deferred.hold`)."""
        hold = getattr(self.backend, "hold", None)
        if hold is not None:
            hold()

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
        # Once per stream: slots that share one session warm together.
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
        backend = self._active
        if backend is None:
            raise RuntimeError("no backend is loaded")
        try:
            return backend.infer_timed(slot, tokens, style, speed), backend.name
        finally:
            with self._lock:
                self.served[backend.name] += 1
            if time.monotonic() - self._settled >= SETTLE_S:
                self.settle()

    def settle(self) -> int:
        """Evict the loaded runtime's files from the page cache; returns how many files were advised."""
        self._settled = time.monotonic()
        return pagecache.evict(self.files())

    def intact(self) -> bool:
        """In process, loaded state cannot vanish on its own (see `app.runtime.proxy`)."""
        return True

    def unload(self) -> None:
        self._active = None
        self.backend.unload()

    def files(self) -> list[Path]:
        return list(self.backend.files())
