"""What tests of the inference process look at: the process list (as an operator sees it), and the process
``python -m app`` started early that nothing has taken yet."""

from __future__ import annotations

import psutil

from app.runtime import early
from app.runtime.early import Spawned


def inference_children(module: str = early.CHILD_MODULE) -> list[psutil.Process]:
    """This process's live children running ``module``: the inference processes it started."""
    found = []
    for child in psutil.Process().children():
        try:
            if child.status() != psutil.STATUS_ZOMBIE and module in child.cmdline():
                found.append(child)
        except psutil.NoSuchProcess:
            pass
    return found


def only_child(module: str = early.CHILD_MODULE) -> int:
    """The pid of the one inference process running ``module``."""
    (child,) = inference_children(module)
    return child.pid


def early_pending() -> Spawned | None:
    """The process `early.start` began that no `early.take` has had yet. Private: the server never asks."""
    return early._early  # the server never asks: the one test-only view, kept out of app/
