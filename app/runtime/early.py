"""The inference process, started before the server's own imports, and its first load begun then.

The inference process (`app.runtime.child`) takes a few tenths of a second to start its interpreter and import what it
needs (numpy, its runtime, this project's runtime modules), then its load; the server takes about half a second of
imports (uvicorn, Starlette, the app) before it builds the engine and would send the child what to load only then. So
``python -m app`` starts the child first thing (`start`), resolves what is served (`prepare`: `app.served`, a fifth of a
second, mostly numpy's import) and sends the child its `Spec` and its first load (`messages.Preload`), and only then
imports the server: the model loads while the server imports. `app.runtime.proxy.ProcessRuntime` adopts the child
(`take`) when it starts its first one, if the `Spec` it resolved itself is the one sent; its first `Load` is answered
with the preload's outcome. A child nobody takes (a setting that fails, a Spec that differs, a server stopping first)
sees its pipe end and exits.

Standard library only at import, so that importing this costs nothing before the child is under way.
"""

from __future__ import annotations

import logging
import os
import pickle
import subprocess
import sys
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any

log = logging.getLogger(__name__)

CHILD_MODULE = "app.runtime.child"
PREIMPORTS = frozenset({"onnxruntime", "openvino"})
"""What a child may be told to import before its `Spec` arrives: the runtimes (`app.settings.Settings.backend`)."""


class Spawned:
    """A started inference process and the server's ends of its two pipes."""

    def __init__(self, module: str, preimport: tuple[str, ...] = ()) -> None:
        to_child_r, to_child_w = os.pipe()
        from_child_r, from_child_w = os.pipe()
        try:
            self.process = subprocess.Popen(
                [sys.executable, "-m", module, str(to_child_r), str(from_child_w), *preimport],
                pass_fds=(to_child_r, from_child_w), close_fds=True)
        except BaseException:
            os.close(to_child_w)
            os.close(from_child_r)
            raise
        finally:
            os.close(to_child_r)
            os.close(from_child_w)
        self.module = module
        self.outbox = Connection(to_child_w, readable=False)
        self.inbox = Connection(from_child_r, writable=False)
        self.sent: bytes | None = None
        """The pickled `Spec` `prepare` sent (None: none sent yet)."""


_early: Spawned | None = None


def start(module: str = CHILD_MODULE, preimport: tuple[str, ...] = ()) -> None:
    """Start the inference process now, for the first `take` (once per process; a failure is left to `take`'s
    caller, which starts one the usual way). ``preimport``: runtimes (`PREIMPORTS`) the child imports while it
    waits for its `Spec`, time it has to spare then."""
    global _early
    if _early is None:
        try:
            _early = Spawned(module, preimport)
        except OSError:
            _early = None


def take(module: str) -> Spawned | None:
    """The process `start` began, if it runs ``module`` and is still running; at most once."""
    global _early
    spawned, _early = _early, None
    if spawned is None:
        return None
    if spawned.module == module and spawned.process.poll() is None:
        return spawned
    discard(spawned)
    return None


def prepare(resolve: Callable[[], Any]) -> None:
    """Send the started process the `Spec` ``resolve`` returns (what is served: ``python -m app`` resolves it with
    `app.served`, which this module does not import: the runtime knows nothing of tuning) and its first load.
    Anything that fails here is left to the server's own start, which resolves the same and raises it there (the
    process then gets its Spec the usual way)."""
    spawned = _early
    if spawned is None:
        return
    try:
        from app.runtime import messages

        # Quiet: the server's own start resolves the same again and logs it (once, and formatted as it says).
        logging.disable(logging.WARNING)
        try:
            spec = resolve()
        finally:
            logging.disable(logging.NOTSET)
        data = pickle.dumps(spec)
        spawned.outbox.send_bytes(data)
        spawned.sent = data
        spawned.outbox.send(messages.Preload())
    except Exception as exc:  # noqa: BLE001 - the server's start raises it again, with its own message
        log.debug("resolving the spec before the server's imports failed: %r", exc)


def same_spec(spawned: Spawned, spec: Any) -> bool:
    """Whether ``spec`` is the one `prepare` sent the process (True where none was sent: it is yet to be)."""
    return spawned.sent is None or spawned.sent == pickle.dumps(spec)


def discard(spawned: Spawned) -> None:
    """Close a started process's pipes (it exits at the end of its pipe) and reap it."""
    for connection in (spawned.outbox, spawned.inbox):
        try:
            connection.close()
        except OSError:
            pass
    reap(spawned.process)


def reap(process: subprocess.Popen[bytes]) -> None:
    """Wait for a process whose pipes are closed (it exits at their end); kill it after 10 s."""
    try:
        process.wait(10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
