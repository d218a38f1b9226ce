"""The inference process: runs the model in a child of the server, so a release can end it.

``python -m app.runtime.child READ_FD WRITE_FD`` is started by `app.runtime.proxy` with
two pipes. It builds the same `app.runtime.local.LocalRuntime` the server would run in process from a
picklable `Spec`, then answers messages until told to exit
or until the server goes away (end of file on its pipe). Not ``PR_SET_PDEATHSIG``: it fires
when the *thread* that started the child ends, and the server starts it from a worker thread
that ends after 10 idle seconds (the benchmark caught children killed so).

Why a process: a process that imported and ran OpenVINO keeps about 170 MB of heap, plugin
state and library pages after everything is deleted and trimmed (measured here), and ONNX
Runtime more; a process that exits gives all of it back. It also keeps a crash inside a
runtime (OpenVINO has segfaulted in ``infer`` with bf16) from taking the server with it.

The messages are the dataclasses of `app.runtime.messages`, shared with the server's side.
"""

from __future__ import annotations

import importlib
import logging
import os
import signal
import sys
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from multiprocessing.connection import Connection
from pathlib import Path

from app.runtime import early, messages
from app.runtime.local import LocalRuntime
from app.runtime.spec import Spec, build_runtime
from lifecycle import pagecache

log = logging.getLogger("app.runtime.child")

WAITING = "waiting released for the next load"
"""Logged once a process waiting released (`messages.Shed`) has given back what it read."""


class InferenceLoop:
    """Reads the server's messages and answers them; inferences run on a pool of one thread per slot."""

    def __init__(self, inbox: Connection, outbox: Connection, runtime: LocalRuntime, slots: int) -> None:
        self.inbox = inbox
        self.outbox = outbox
        self.runtime = runtime
        self._send_lock = threading.Lock()
        self._workers = ThreadPoolExecutor(max(1, slots), thread_name_prefix="infer")
        self._preload: Future[messages.Loaded | messages.LoadFailed] | None = None
        """A load begun before the server asked (`messages.Preload`): its answer to come."""

    def send(self, message: messages.FromChild) -> None:
        with self._send_lock:
            self.outbox.send(message)

    def serve(self) -> None:
        while True:
            try:
                message: messages.ToChild = self.inbox.recv()
            except (EOFError, OSError):
                return  # the server is gone
            match message:
                case messages.Exit():
                    return
                case messages.Infer():
                    self._workers.submit(self._infer, message)
                case messages.Preload() if self._preload is None:
                    self._begin_preload()
                case messages.Load():
                    self._load()
                case messages.Shed():
                    # Handled once the imports are done (they come before this loop): what they read is what goes,
                    # and what the session held ahead of the next load read (its heap stays).
                    self._hold()
                    pagecache.page_out_mappings()
                    pagecache.evict(pagecache.loaded_files() + self.runtime.files())
                    log.info("%s, %.0f MB resident", WAITING, _resident_bytes() / 1e6)
                case messages.ListFiles(ident=ident):
                    # The runtime's files, and every library and module this process loaded: the server
                    # evicts them from the page cache once this process has ended.
                    found = self.runtime.files()
                    found += [p for p in pagecache.loaded_files() if p not in found]
                    self.send(messages.Files(ident, found))

    def _hold(self) -> None:
        try:
            self.runtime.hold()
        except Exception:  # the restore opens every session itself, as without it
            log.exception("opening a session ahead of the next load failed")

    def _load(self) -> None:
        if self._preload is not None:
            answer, self._preload = self._preload, None
            log.info("the load was begun at start, before the server asked")
            self.send(answer.result())
            return
        self.send(self._loading())

    def _begin_preload(self) -> None:
        answer: Future[messages.Loaded | messages.LoadFailed] = Future()
        self._preload = answer
        threading.Thread(target=lambda: answer.set_result(self._loading()), name="preload", daemon=True).start()

    def _loading(self) -> messages.Loaded | messages.LoadFailed:
        try:
            resolved = self.runtime.load()
        except Exception as exc:
            log.exception("loading the %s backend failed", self.runtime.backend.name)
            return messages.LoadFailed(f"{type(exc).__name__}: {exc}")
        return messages.Loaded(resolved)

    def _infer(self, request: messages.Infer) -> None:
        try:
            done, backend = self.runtime.infer_named(request.slot, request.tokens, request.style, request.speed)
        except Exception as exc:  # reported to the request that asked; the process serves on
            self.send(messages.Failed(request.ident, f"{type(exc).__name__}: {exc}"))
            return
        self.send(messages.Audio(request.ident, done.audio, backend, done.durations))


def _resident_bytes() -> int:
    """This process's resident memory, from ``/proc/self/statm`` (psutil would add its import to every start)."""
    return int(Path("/proc/self/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def main(argv: list[str]) -> int:
    # The server decides when this process ends (SIGTERM drains requests there first): a signal
    # sent to the whole process group must not cut the streams it is still finishing.
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    inbox = Connection(int(argv[0]), writable=False)
    outbox = Connection(int(argv[1]), readable=False)
    for name in argv[2:]:  # started early (app.runtime.early): the Spec is still some tenths of a second away
        if name in early.PREIMPORTS:
            importlib.import_module(name)
    try:
        spec: Spec = inbox.recv()
    except (EOFError, OSError):
        return 0  # started early (app.runtime.early) and not needed: the server stopped or serves in process
    logging.basicConfig(level=spec.settings.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    from lifecycle.trim import configure_malloc

    configure_malloc()
    runtime = build_runtime(spec)
    if spec.settings.backend in early.PREIMPORTS:
        # Before the first message: the runtime's import is its load's first cost, and a process started ahead of
        # its load (beside the server's own start, or waiting released: `messages.Shed`) has the time to spare.
        importlib.import_module(spec.settings.backend)
    InferenceLoop(inbox, outbox, runtime, spec.shape.streams).serve()
    # Exit at once: runtime threads and their memory all go with the process; nothing here needs an orderly
    # teardown.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
