"""The runtime, run in a child process (`app.runtime.child`) that a release ends.

`ProcessRuntime` offers what `app.runtime.local.Runtime` offers (load, infer, unload, files) and
forwards each call over two pipes. ``load_*`` starts the child when none runs; ``unload``
tells it to exit and waits, so after a release the server holds no runtime memory at all:
no heap, no plugin state, no library pages.

Threads: ``load_*``/``unload``/``files`` come from the lifecycle's worker thread, one at a
time; ``infer`` from the pool's worker threads, each waiting for its own answer. One reader
thread per child hands answers to their callers. If the child dies, every waiting call fails
with `WorkerGone`, `intact` turns False, and the lifecycle restores a fresh child for the next
request.
"""

from __future__ import annotations

import importlib.util
import itertools
import logging
import os
import subprocess
import sys
import threading
from collections import Counter
from concurrent.futures import Future
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from app.runtime.backends.base import Resolved
from app.runtime.spec import Spec

log = logging.getLogger(__name__)

EXIT_WAIT_S = 10.0


class WorkerGone(RuntimeError):
    """The inference process ended while a call waited for it."""


class _Child:
    """One running inference process and its pipes."""

    def __init__(self, module: str, spec: Spec) -> None:
        to_child_r, to_child_w = os.pipe()
        from_child_r, from_child_w = os.pipe()
        try:
            self.process = subprocess.Popen(
                [sys.executable, "-m", module, str(to_child_r), str(from_child_w)],
                pass_fds=(to_child_r, from_child_w), close_fds=True)
        finally:
            os.close(to_child_r)
            os.close(from_child_w)
        self.outbox = Connection(to_child_w, readable=False)
        self.inbox = Connection(from_child_r, writable=False)
        self.send_lock = threading.Lock()
        self.ended = False
        """Set (under the runtime's lock) once its reader saw the end of the pipe."""
        self.send(spec)

    def send(self, message: Any) -> None:
        with self.send_lock:
            self.outbox.send(message)

    def close(self) -> None:
        for connection in (self.outbox, self.inbox):
            try:
                connection.close()
            except OSError:
                pass


class ProcessRuntime:
    child_module = "app.runtime.child"
    """The module run as the child; tests swap in one that injects faults."""

    def __init__(self, spec: Spec) -> None:
        self.spec = spec
        self.resolved: Resolved | None = None
        self.served: Counter[str] = Counter()
        self.load_error: str | None = None
        self._active: str | None = None
        self._child: _Child | None = None
        self._reader: threading.Thread | None = None
        self._pending: dict[int, Future[Any]] = {}
        self._loaded: Future[Any] | None = None
        self._ids = itertools.count()
        self._lock = threading.Lock()

    # --- what the engine and the routes read -------------------------------------------------

    @property
    def loaded(self) -> bool:
        return self._active is not None and self.intact()

    @property
    def active_name(self) -> str | None:
        return self._active

    @property
    def has_bridge(self) -> bool:
        return self.spec.has_bridge

    def intact(self) -> bool:
        """False once a loaded child has died: its state is gone and must be restored."""
        child = self._child
        return self._active is None or (child is not None and not child.ended and child.process.poll() is None)

    # --- lifecycle (called one at a time) ----------------------------------------------------

    def load_primary(self) -> Resolved:
        return self._load("primary")

    def load_bridged(self) -> Resolved:
        return self._load("bridged")

    def _load(self, mode: str) -> Resolved:
        if self._child is not None and self._child.process.poll() is not None:
            self._reap()  # died since: start afresh
        if self._child is None:
            self._start()
        assert self._child is not None
        self._loaded = Future()
        self._child.send(("load", mode))
        try:
            resolved: Resolved = self._loaded.result()
        except WorkerGone:
            self._reap()
            raise
        self._active = resolved.backend
        if mode == "primary":
            self.resolved = resolved
        return resolved

    def _start(self) -> None:
        self._child = _Child(self.child_module, self.spec)
        self._reader = threading.Thread(target=self._read, args=(self._child,), name="inference-reader", daemon=True)
        self._reader.start()
        log.info("inference process %d started", self._child.process.pid)

    def files(self) -> list[Path]:
        """What the inference process read: what it lists, and what it may have been reading
        without having listed it yet (a background load cut short by the release)."""
        found: list[Path] = []
        if self._child is not None and self._child.process.poll() is None:
            try:
                found = self._call(("files",), timeout=EXIT_WAIT_S)
            except (WorkerGone, TimeoutError):
                pass
        listed = set(found)
        return found + [p for p in self._candidates() if p not in listed]

    def _candidates(self) -> list[Path]:
        """The model, every compile cache and bridge graph, and the runtimes' libraries."""
        settings = self.spec.settings
        roots = [self.spec.writable / "openvino", self.spec.writable / "onnxruntime", settings.cache_dir / "openvino"]
        if settings.baked_cache_dir is not None:
            roots.append(settings.baked_cache_dir)
        for package in ("openvino", "onnxruntime"):
            spec = importlib.util.find_spec(package)
            if spec is not None and spec.submodule_search_locations:
                roots.extend(Path(p) for p in spec.submodule_search_locations)
        found = [self.spec.model_path]
        for root in dict.fromkeys(roots):
            if root.is_dir():
                found.extend(p for p in root.rglob("*") if p.is_file())
        return found

    def unload(self) -> None:
        """End the child and wait for it: its memory is the operating system's again."""
        child = self._child
        self._active = None
        if child is None:
            return
        try:
            child.send(("exit",))
        except OSError:
            pass  # already gone
        try:
            child.process.wait(EXIT_WAIT_S)
        except subprocess.TimeoutExpired:
            log.warning("inference process %d did not exit in %.0f s; killing it", child.process.pid, EXIT_WAIT_S)
            child.process.kill()
            child.process.wait()
        self._reap()

    # --- requests ------------------------------------------------------------------------------

    def infer(self, slot: int, tokens: npt.NDArray[np.int64], style: npt.NDArray[np.float32],
              speed: float) -> npt.NDArray[np.float32]:
        if self._active is None:
            raise RuntimeError("no backend is loaded")
        audio, backend = self._call(("infer", slot, tokens, style, speed))
        with self._lock:
            self.served[backend] += 1
        result: npt.NDArray[np.float32] = audio
        return result

    # --- plumbing ------------------------------------------------------------------------------

    def _call(self, message: tuple[Any, ...], timeout: float | None = None) -> Any:
        child = self._child
        if child is None:
            raise WorkerGone("the inference process is not running")
        ident = next(self._ids)
        future: Future[Any] = Future()
        with self._lock:
            if child.ended:
                raise WorkerGone(f"the inference process ended (exit status {child.process.poll()})")
            self._pending[ident] = future
        try:
            child.send((message[0], ident, *message[1:]))
        except OSError as exc:
            with self._lock:
                self._pending.pop(ident, None)
            raise WorkerGone(f"the inference process is gone ({exc})") from exc
        return future.result(timeout)

    def _read(self, child: _Child) -> None:
        while True:
            try:
                message = child.inbox.recv()
            except (EOFError, OSError):
                break
            kind = message[0]
            if kind in ("audio", "failed", "files"):
                with self._lock:
                    future = self._pending.pop(message[1], None)
                if future is None:
                    continue
                if kind == "audio":
                    future.set_result((message[2], message[3]))
                elif kind == "failed":
                    future.set_exception(RuntimeError(message[2]))
                else:
                    future.set_result(message[2])
            elif kind in ("loaded", "load_failed") and self._loaded is not None:
                if kind == "loaded":
                    self._loaded.set_result(message[1])
                else:
                    self.load_error = message[1]
                    self._loaded.set_exception(RuntimeError(message[1]))
            elif kind == "primary":
                self.resolved = message[1]
                if self._active is not None:
                    self._active = message[1].backend
        self._fail_waiting(child)

    def _fail_waiting(self, child: _Child) -> None:
        code = child.process.poll()
        gone = WorkerGone(f"the inference process ended (exit status {code})")
        with self._lock:
            child.ended = True
            pending, self._pending = self._pending, {}
        for future in pending.values():
            future.set_exception(gone)
        if self._loaded is not None and not self._loaded.done():
            self._loaded.set_exception(gone)
        if self._active is not None and child is self._child:
            log.error("the inference process %d ended unexpectedly (exit status %s): %d calls failed",
                      child.process.pid, code, len(pending))

    def _reap(self) -> None:
        child, reader = self._child, self._reader
        self._child = self._reader = None
        if child is None:
            return
        if child.process.poll() is None:
            child.process.kill()
        child.process.wait()
        if reader is not None:
            reader.join(EXIT_WAIT_S)
        child.close()
