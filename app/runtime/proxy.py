"""The runtime, run in a child process (`app.runtime.child`) that a release ends.

`ProcessRuntime` is an `app.runtime.protocol.Runtime`, as `app.runtime.local.LocalRuntime` is, and
forwards each call over two pipes (the messages are `app.runtime.messages`). ``load`` starts the
child when none runs; ``unload`` tells it to exit and waits, so after a release the server holds
no runtime memory at all: no heap, no plugin state, no library pages.

Threads: ``load``/``unload``/``files`` come from the lifecycle's worker thread, one at a
time; ``infer`` from the pool's worker threads, each waiting for its own answer. One reader
thread per child hands answers to their callers. If the child dies, every waiting call fails
with `WorkerGone`, `intact` turns False, and the lifecycle restores a fresh child for the next
request.
"""

from __future__ import annotations

import itertools
import logging
import subprocess
import threading
from collections import Counter
from collections.abc import Callable
from concurrent.futures import Future
from pathlib import Path

import numpy as np
import numpy.typing as npt

from app.runtime import backends, early, messages
from app.runtime.backends.base import Inference, Resolved
from app.runtime.protocol import StateLost
from app.runtime.spec import Spec

log = logging.getLogger(__name__)

EXIT_WAIT_S = 10.0


class WorkerGone(StateLost):
    """The inference process ended while a call waited for it."""


class _ChildProcess:
    """One running inference process and its pipes."""

    def __init__(self, module: str, spec: Spec) -> None:
        # The process ``python -m app`` started before its imports (`app.runtime.early`), else a new one.
        spawned = early.take(module)
        self.early = False
        """Started before the server's imports (`app.runtime.early`)."""
        if spawned is not None and not early.same_spec(spawned, spec):
            log.warning("the inference process started early (%d) was sent another spec; starting another",
                        spawned.process.pid)
            early.discard(spawned)
            spawned = None
        if spawned is not None:
            self._adopt(spawned)
            try:
                if spawned.sent is None:
                    self.send(spec)
                self.early = True
                return
            except OSError:  # it ended before its Spec reached it: start one as usual
                log.warning("the inference process started early (%d) had ended; starting another",
                            spawned.process.pid)
                early.discard(spawned)
        self._adopt(early.Spawned(module))
        self.send(spec)

    def _adopt(self, spawned: early.Spawned) -> None:
        self.process = spawned.process
        self.outbox = spawned.outbox
        self.inbox = spawned.inbox
        self.send_lock = threading.Lock()
        self.ended = False
        """Set (under the runtime's lock) once its reader saw the end of the pipe."""

    @property
    def alive(self) -> bool:
        """Neither its pipe ended nor its exit reported. Both: a killed process closes its pipes before the kernel
        reports it gone, and with its threads busy that takes seconds (CI saw a restore send its load to such a
        process and wait forever for the answer)."""
        return not self.ended and self.process.poll() is None

    def send(self, message: messages.ToChild | Spec) -> None:
        with self.send_lock:
            self.outbox.send(message)

    def close(self) -> None:
        for connection in (self.outbox, self.inbox):
            try:
                connection.close()
            except OSError:
                pass


class ProcessRuntime:
    """The runtime in an inference process (see the module docstring)."""

    child_module = "app.runtime.child"
    """The module run as the child; tests swap in one that injects faults."""

    def __init__(self, spec: Spec) -> None:
        self.spec = spec
        self.resolved: Resolved | None = None
        self.served: Counter[str] = Counter()
        self._active: str | None = None
        self._child: _ChildProcess | None = None
        self._reader: threading.Thread | None = None
        self._pending: dict[int, Future[messages.FromChild]] = {}
        self._loaded: Future[Resolved] | None = None
        self._ids = itertools.count()
        self._lock = threading.Lock()

    # --- what the engine and the routes read -------------------------------------------------

    @property
    def loaded(self) -> bool:
        return self._active is not None and self.intact()

    @property
    def active_name(self) -> str | None:
        return self._active

    def intact(self) -> bool:
        """False once a loaded child has died: its state is gone and must be restored."""
        child = self._child
        return self._active is None or (child is not None and child.alive)

    # --- lifecycle (called one at a time) ----------------------------------------------------

    def load(self) -> Resolved:
        """Load in the inference process, starting one when none runs. A process that ends during the load (killed
        for memory, say) leaves nothing wrong with the model: a second, fresh one is asked once before the load
        fails, so the request that asked for it is not lost to that one death."""
        try:
            return self._load_once()
        except WorkerGone as exc:
            log.warning("the inference process ended during its load (%s); starting another once", exc)
            return self._load_once()

    def _load_once(self) -> Resolved:
        while True:
            if self._child is not None and not self._child.alive:
                self._reap()  # died since: start afresh
            if self._child is None:
                self._start()
            child = self._child
            assert child is not None
            with self._lock:
                # Set under the lock the reader ends under: either it sees this future and fails it, or
                # this sees that it has ended and starts another process.
                if child.ended:
                    continue
                self._loaded = loaded = Future[Resolved]()
            break
        try:
            child.send(messages.Load())
            resolved = loaded.result()
        except OSError as exc:
            self._reap()
            raise WorkerGone(f"the inference process is gone ({exc})") from exc
        except WorkerGone:
            self._reap()
            raise
        self._active = resolved.backend
        self.resolved = resolved
        return resolved

    def prestart(self) -> None:
        """Start the inference process now, before the first load: its interpreter start and imports (a few
        tenths of a second, in a process of its own) overlap the server's own start instead of following it."""
        if self._child is None:
            self._start()

    def idle_standby(self) -> None:
        """After a release: start a fresh inference process at once, which imports its runtime, opens one stream's
        session ahead of the load where the runtime can (its weights paged out), gives back what that read
        (`messages.Shed`) and waits; the restore's load goes to it instead of starting one, which shortens the restore
        for a few tens of MB of released memory (docs/performance.md). A process that dies meanwhile costs nothing
        more: the restore starts another, as without it."""
        self._start_released(" to wait, imported, for the next restore", messages.Shed())

    def _start_released(self, why: str, first: messages.ToChild) -> None:
        """A fresh inference process while released, sent ``first``; none where one runs (a release ends it)."""
        if self._child is not None:
            return
        self._start(why)
        child = self._child
        assert child is not None
        try:
            child.send(first)
        except OSError:
            self._reap()

    def _start(self, why: str = "") -> None:
        self._child = _ChildProcess(self.child_module, self.spec)
        self._reader = threading.Thread(target=self._read, args=(self._child,), name="inference-reader", daemon=True)
        self._reader.start()
        log.info("inference process %d started%s", self._child.process.pid,
                 " before the server's imports" if self._child.early else why)

    def files(self) -> list[Path]:
        """What the inference process read: what it lists, and what it may have read without listing it (a process
        that died, or did not answer in time)."""
        found: list[Path] = []
        if self._child is not None and self._child.alive:
            try:
                answer = self._call(messages.ListFiles, timeout=EXIT_WAIT_S)
                assert isinstance(answer, messages.Files)
                found = answer.paths
            except (WorkerGone, TimeoutError):
                pass
        listed = set(found)
        spec = self.spec
        unlisted = backends.unlisted_files([spec.model_path], spec.writable, spec.settings.cache_dir,
                                           spec.settings.baked_cache_dir)
        return found + [p for p in unlisted if p not in listed]

    def unload(self) -> None:
        """End the child and wait for it: its memory is the operating system's again."""
        child = self._child
        self._active = None
        if child is None:
            return
        try:
            child.send(messages.Exit())
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
        return self.infer_timed(slot, tokens, style, speed).audio

    def infer_timed(self, slot: int, tokens: npt.NDArray[np.int64], style: npt.NDArray[np.float32],
                    speed: float) -> Inference:
        if self._active is None:
            # Nothing is loaded: the process that served has ended and its state is gone (a restore may be starting
            # another, which must not be asked before its load). The speech is asked again after the restore.
            raise WorkerGone("no inference process is loaded: the one that served has ended")
        answer = self._call(lambda ident: messages.Infer(ident, slot, tokens, style, speed))
        assert isinstance(answer, messages.Audio)
        with self._lock:
            self.served[answer.backend] += 1
        return Inference(answer.audio, answer.durations)

    # --- plumbing ------------------------------------------------------------------------------

    def _call(self, message: Callable[[int], messages.ToChild], timeout: float | None = None) -> messages.FromChild:
        """Send ``message(ident)`` and wait for the answer that carries the same ident."""
        child = self._child
        if child is None:
            raise WorkerGone("the inference process is not running")
        ident = next(self._ids)
        future: Future[messages.FromChild] = Future()
        with self._lock:
            if child.ended:
                raise WorkerGone(f"the inference process ended (exit status {child.process.poll()})")
            self._pending[ident] = future
        try:
            child.send(message(ident))
        except OSError as exc:
            with self._lock:
                self._pending.pop(ident, None)
            raise WorkerGone(f"the inference process is gone ({exc})") from exc
        return future.result(timeout)

    def _read(self, child: _ChildProcess) -> None:
        while True:
            try:
                message: messages.FromChild = child.inbox.recv()
            except (EOFError, OSError):
                break
            match message:
                case messages.Audio(ident=ident) | messages.Files(ident=ident) | messages.Failed(ident=ident):
                    with self._lock:
                        future = self._pending.pop(ident, None)
                    if future is None:
                        continue
                    if isinstance(message, messages.Failed):
                        future.set_exception(RuntimeError(message.message))
                    else:
                        future.set_result(message)
                case messages.Loaded(resolved=resolved) if self._loaded is not None:
                    self._loaded.set_result(resolved)
                case messages.LoadFailed(message=why) if self._loaded is not None:
                    self._loaded.set_exception(RuntimeError(why))
        self._fail_waiting(child)

    def _fail_waiting(self, child: _ChildProcess) -> None:
        code = child.process.poll()
        gone = WorkerGone(f"the inference process ended (exit status {code})")
        with self._lock:
            child.ended = True
            pending, self._pending = self._pending, {}
            loaded = self._loaded if child is self._child else None  # a late reader fails no newer load
        for future in pending.values():
            future.set_exception(gone)
        if loaded is not None and not loaded.done():
            loaded.set_exception(gone)
        if self._active is not None and child is self._child:
            log.error("the inference process %d ended unexpectedly (exit status %s): %d calls failed",
                      child.process.pid, code, len(pending))

    def _reap(self) -> None:
        child, reader = self._child, self._reader
        self._child = self._reader = None
        self._active = None  # what it loaded went with it: nothing is served until the next load
        if child is None:
            return
        if child.process.poll() is None:
            child.process.kill()
        child.process.wait()
        if reader is not None:
            reader.join(EXIT_WAIT_S)
        child.close()
