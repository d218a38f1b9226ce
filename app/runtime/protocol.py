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


class StateLost(RuntimeError):
    """Raised by a runtime's call when the process that held its state ended under it: nothing is wrong with the
    call itself, and a fresh load may serve it (`app.retry`)."""


class Runtime(Protocol):
    """Loads, runs and drops the model's inference state.

    ``load``, ``unload`` and ``files`` are called one at a time (the lifecycle's worker
    thread), never while ``infer`` runs; ``infer`` is called from the pool's worker threads, at
    most one call per slot at a time.
    """

    resolved: Resolved | None
    """What the backend resolved at its last load (None before it)."""
    served: Counter[str]
    """Inferences run, per backend name."""

    @property
    def loaded(self) -> bool:
        """Whether inferences can run now."""
        ...

    @property
    def active_name(self) -> str | None:
        """The backend that serves inferences, None when unloaded."""
        ...

    def load(self) -> Resolved:
        """Load the backend and serve with it (one backend serves every request: the same bytes whenever)."""
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
        """False when loaded state vanished without an unload (the inference process died); a call that was running
        on it raises `StateLost`."""
        ...

    def unload(self) -> None:
        """Drop all inference state."""
        ...

    def files(self) -> list[Path]:
        """Files read to build the state: evicted from the page cache after a release."""
        ...
