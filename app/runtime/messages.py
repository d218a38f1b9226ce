"""What the server and the inference process say to each other over their pipes.

Pickled over `multiprocessing.connection.Connection`: the server (`app.runtime.proxy`) sends a
`Spec <app.runtime.spec.Spec>` once, then `ToChild` messages; the inference process
(`app.runtime.child`) answers with `FromChild` messages. A request that expects an answer carries
an ``ident`` that its answer repeats, so answers may come back in any order.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt

from app.runtime.backends.base import Resolved

# --- server -> inference process ---------------------------------------------------------------


@dataclass(frozen=True)
class Load:
    """Load the backend and serve with it."""


@dataclass(frozen=True)
class Preload:
    """Begin the first load now, before the server asks (`app.runtime.early`); the `Load` that follows is answered
    with its outcome. Sent only to a process started before the server's imports."""


@dataclass(frozen=True)
class Infer:
    ident: int
    slot: int
    tokens: npt.NDArray[np.int64]
    style: npt.NDArray[np.float32]
    speed: float


@dataclass(frozen=True)
class ListFiles:
    """Which files the process read (to evict from the page cache once it has ended)."""

    ident: int


@dataclass(frozen=True)
class Shed:
    """Open what the runtime holds ahead of a load (one ONNX Runtime session: `app.runtime.local.LocalRuntime.hold`),
    give back what this process read, and wait for a load (an idle standby after a release:
    `app.runtime.proxy.ProcessRuntime.idle_standby`): its mapped files' clean pages (libraries, the held session's
    weights) are paged out and the files it read leave the page cache."""


@dataclass(frozen=True)
class Exit:
    """End now; nothing is in flight (the lifecycle releases only when idle)."""


ToChild = Load | Preload | Infer | ListFiles | Shed | Exit

# --- inference process -> server ---------------------------------------------------------------


@dataclass(frozen=True)
class Loaded:
    resolved: Resolved


@dataclass(frozen=True)
class LoadFailed:
    message: str


@dataclass(frozen=True)
class Audio:
    ident: int
    audio: npt.NDArray[np.float32]
    backend: str
    """The backend that made it."""
    durations: npt.NDArray[np.int64] | None = None
    """Frames per input token, where the model outputs them (`app.runtime.backends.base.Inference`)."""


@dataclass(frozen=True)
class Failed:
    """One inference failed; the process serves on."""

    ident: int
    message: str


@dataclass(frozen=True)
class Files:
    ident: int
    paths: list[Path]


FromChild = Loaded | LoadFailed | Audio | Failed | Files
