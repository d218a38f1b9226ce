"""The inference process, started before the server's own imports.

The inference process (`app.runtime.child`) takes a few tenths of a second to start its interpreter and import
what it needs (numpy, this project's runtime modules) before it can open the bridge; the server takes about half a
second of imports (uvicorn, Starlette, numpy, the app) before it builds the engine. ``python -m app`` starts
the child first thing (`start`), so the two import side by side on their own CPUs, and
`app.runtime.proxy.ProcessRuntime` adopts it (`take`) when it starts its first child, sending it the `Spec` then.
A child nobody takes (a setting that fails, the server stopping first) sees its pipe end and exits.

Standard library only, so that importing this costs nothing before the child is under way.
"""

from __future__ import annotations

import os
import subprocess
import sys

CHILD_MODULE = "app.runtime.child"
PREIMPORTS = frozenset({"onnxruntime"})
"""What a child may be told to import before its `Spec` arrives."""


class Spawned:
    """A started inference process and the server's ends of its two pipes (file descriptors)."""

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
        self.to_child = to_child_w
        self.from_child = from_child_r


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


def discard(spawned: Spawned) -> None:
    """Close a started process's pipes (it exits at the end of its pipe) and reap it."""
    for fd in (spawned.to_child, spawned.from_child):
        try:
            os.close(fd)
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
