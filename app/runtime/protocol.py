"""What the engine needs from a runtime, wherever the model runs.

Two implementations: `app.runtime.local.LocalRuntime` runs the backends in this process, and
`app.runtime.proxy.ProcessRuntime` forwards every call to an inference process that a release
ends. The engine and the routes see only this.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Protocol

import numpy as np
import numpy.typing as npt

from app.runtime.backends.base import Inference, Resolved


class Runtime(Protocol):
    """Loads, runs and drops the model's inference state.

    ``load_*``, ``unload`` and ``files`` are called one at a time (the lifecycle's worker
    thread), never while ``infer`` runs; ``infer`` is called from the pool's worker threads, at
    most one call per slot at a time.
    """

    resolved: Resolved | None
    """What the primary backend resolved at its last load (None before it)."""
    served: Counter[str]
    """Inferences run, per backend name."""
    primary_error: str | None
    """Why the primary failed to load behind the bridge, which serves on; None when it did not fail."""

    @property
    def loaded(self) -> bool:
        """Whether inferences can run now."""
        ...

    @property
    def active_name(self) -> str | None:
        """The backend that serves new inferences (the bridge or the primary), None when unloaded."""
        ...

    @property
    def bridge_serving(self) -> bool:
        """Whether new inferences go to the bridge (the primary still loading behind it, or failed to)."""
        ...

    @property
    def has_bridge(self) -> bool:
        """Whether a load may open the fast-loading bridge first (`load_bridged`)."""
        ...

    def load_primary(self) -> Resolved:
        """Load the primary backend and serve with it."""
        ...

    def load_bridged(self, wait_for_request: bool = True) -> Resolved:
        """Open the bridge and serve with it; the primary loads behind it (once the bridge has served its first
        inference when ``wait_for_request``, else at once) and takes over."""
        ...

    def infer(self, slot: int, tokens: npt.NDArray[np.int64], style: npt.NDArray[np.float32],
              speed: float) -> npt.NDArray[np.float32]:
        """One inference on ``slot``; a fresh array the caller owns."""
        ...

    def infer_timed(self, slot: int, tokens: npt.NDArray[np.int64], style: npt.NDArray[np.float32],
                    speed: float) -> Inference:
        """`infer`, with the per-token durations where the served model outputs them."""
        ...

    def intact(self) -> bool:
        """False when loaded state vanished without an unload (the inference process died)."""
        ...

    def unload(self) -> None:
        """Drop all inference state."""
        ...

    def files(self) -> list[Path]:
        """Files read to build the state: evicted from the page cache after a release."""
        ...
