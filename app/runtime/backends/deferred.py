"""A backend built at its first load rather than up front.

Building OpenVINO's backend chooses its compile cache, which starts OpenVINO's CPU plugin (about 0.3 s here): a
process that waits released for the next restore (`app.runtime.messages.Shed`) holds none of it until it loads.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import numpy.typing as npt

from app.runtime.backends.base import Backend, Inference, Resolved

HOLDS = frozenset({"onnxruntime"})
"""Backends that open a session ahead of their load while released (`Deferred.hold`)."""


class Deferred:
    def __init__(self, name: str, build: Callable[[], Backend]) -> None:
        self.name = name
        self._build = build
        self._inner: Backend | None = None

    @property
    def loaded(self) -> bool:
        return self._inner is not None and self._inner.loaded

    def load(self) -> Resolved:
        if self._inner is None:
            self._inner = self._build()
        return self._inner.load()

    def hold(self) -> None:
        """Open ahead of the next load what the backend can hold while released (ONNX Runtime's `hold`); nothing for
        one that cannot (OpenVINO: building it would start its CPU plugin for nothing)."""
        if self.name not in HOLDS:
            return
        if self._inner is None:
            self._inner = self._build()
        hold = getattr(self._inner, "hold", None)
        if hold is not None:
            hold()

    def unload(self) -> None:
        if self._inner is not None:
            self._inner.unload()

    def infer(self, slot: int, tokens: npt.NDArray[np.int64], style: npt.NDArray[np.float32],
              speed: float) -> npt.NDArray[np.float32]:
        if self._inner is None:
            raise RuntimeError(f"the {self.name} backend is not loaded")
        return self._inner.infer(slot, tokens, style, speed)

    def infer_timed(self, slot: int, tokens: npt.NDArray[np.int64], style: npt.NDArray[np.float32],
                    speed: float) -> Inference:
        if self._inner is None:
            raise RuntimeError(f"the {self.name} backend is not loaded")
        return self._inner.infer_timed(slot, tokens, style, speed)

    def files(self) -> list[Path]:
        return self._inner.files() if self._inner is not None else []
