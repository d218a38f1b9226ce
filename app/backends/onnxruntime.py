"""ONNX Runtime: the reference backend for output checks.

Sized: one session per stream, each with its own intra-op pool of T threads and no spinning,
so streams never share a thread pool. Runtime defaults (benchmark baseline): one session with
ONNX Runtime's default threading, shared by all slots (``run`` is thread-safe).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from app.backends.base import Resolved
from app.sizing import PoolShape


class OnnxRuntimeBackend:
    name = "onnxruntime"

    def __init__(self, model_path: Path, shape: PoolShape, *, runtime_defaults: bool, shared: bool = False) -> None:
        self._model_path = model_path
        self._shape = shape
        self._runtime_defaults = runtime_defaults
        self._shared = shared
        """One session with ``threads_per_stream`` threads shared by all slots (opens N times faster)."""
        self._sessions: list[Any] = []

    @property
    def loaded(self) -> bool:
        return bool(self._sessions)

    def load(self) -> Resolved:
        import onnxruntime as ort

        start = time.perf_counter()
        if self._runtime_defaults:
            session = ort.InferenceSession(str(self._model_path), providers=["CPUExecutionProvider"])
            self._sessions = [session] * self._shape.streams
            streams, threads = 1, 0
        elif self._shared:
            session = self._sized_session(ort)
            self._sessions = [session] * self._shape.streams
            streams, threads = 1, self._shape.threads_per_stream
        else:
            self._sessions = [self._sized_session(ort) for _ in range(self._shape.streams)]
            streams, threads = self._shape.streams, self._shape.threads
        return Resolved(
            backend=self.name, slots=len(self._sessions), streams=streams, threads=threads, precision="f32",
            load_s=time.perf_counter() - start, from_cache=None, extra={"onnxruntime": ort.__version__},
        )

    def _sized_session(self, ort: Any) -> Any:
        options = ort.SessionOptions()
        options.intra_op_num_threads = self._shape.threads_per_stream
        options.inter_op_num_threads = 1
        options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        # Spinning workers burn CPU that the bill counts while other streams need it.
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        return ort.InferenceSession(str(self._model_path), sess_options=options, providers=["CPUExecutionProvider"])

    def unload(self) -> None:
        self._sessions = []

    def infer(self, slot: int, tokens: npt.NDArray[np.int64], style: npt.NDArray[np.float32],
              speed: float) -> npt.NDArray[np.float32]:
        feed = {"tokens": tokens, "style": style, "speed": np.array([speed], dtype=np.float32)}
        (audio,) = self._sessions[slot].run(["audio"], feed)
        return np.asarray(audio, dtype=np.float32).reshape(-1)

    def files(self) -> list[Path]:
        return [self._model_path]
