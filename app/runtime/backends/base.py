"""The interface every inference runtime offers the pool."""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt


@dataclass(frozen=True)
class Resolved:
    """What the runtime actually runs, read back from it after loading."""

    backend: str
    """``openvino`` or ``onnxruntime``."""
    slots: int
    """Inferences that may run at once (one infer request or session each)."""
    streams: int
    """Streams the runtime resolved (OpenVINO ``NUM_STREAMS``; ONNX Runtime: sessions)."""
    threads: int
    """Threads across all streams (OpenVINO ``INFERENCE_NUM_THREADS``; 0 = runtime default)."""
    precision: str
    """Inference precision the runtime reports."""
    load_s: float
    """Seconds the last load took."""
    from_cache: bool | None
    """Whether OpenVINO imported the compiled model from its cache (None where not applicable)."""
    extra: dict[str, Any] = field(default_factory=dict)
    """Runtime-specific properties worth showing."""
    warmed: int = 0
    """Streams that ran their warm-up inference after this load, before serving (`app.runtime.local`)."""
    warm_up_s: float = 0.0
    """Seconds the warm-up took (all slots at once)."""


@dataclass(frozen=True)
class Inference:
    """One inference's outputs."""

    audio: npt.NDArray[np.float32]
    """24 kHz samples, a fresh array the caller owns."""
    durations: npt.NDArray[np.int64] | None = None
    """Frames of 600 samples (25 ms) per input token, the pads at both ends included: they sum to the audio's
    length. None where the model does not output them (`app.forms.timed`)."""


class Backend(Protocol):
    """A loaded model that runs one inference per slot at a time.

    `load` and `unload` are called by one thread at a time, never while `infer` runs (the
    lifecycle guarantees that). `infer` is called from worker threads, at most one call per slot
    at a time, and returns a fresh array the caller owns. Slots are ``0 .. Resolved.slots - 1``.
    """

    name: str

    @property
    def loaded(self) -> bool: ...

    def load(self) -> Resolved: ...

    def unload(self) -> None: ...

    def infer(self, slot: int, tokens: npt.NDArray[np.int64], style: npt.NDArray[np.float32],
              speed: float) -> npt.NDArray[np.float32]: ...

    def infer_timed(self, slot: int, tokens: npt.NDArray[np.int64], style: npt.NDArray[np.float32],
                    speed: float) -> Inference:
        """`infer`, with the per-token durations where the model outputs them."""
        ...

    def files(self) -> list[Path]:
        """Files read to build inference state (model, compile cache): evicted on release."""
        ...


def package_dirs(package: str) -> list[Path]:
    """Where an installed runtime's files live (its libraries and plugins), found without importing it."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        return []
    return [Path(p) for p in spec.submodule_search_locations]


def last_line(exc: BaseException, limit: int = 200) -> str:
    """The last line of a runtime's error (native runtimes put the cause there, after pages of context), or the
    exception's type where it has no text: for one-line log messages."""
    text = str(exc).strip()
    return text.splitlines()[-1][:limit] if text else type(exc).__name__
