"""A stand-in inference process killed during its load, as the kernel's OOM killer or an operator's kill would: the
first ``deaths`` loads end the process with SIGKILL before answering, later ones answer (`test_proxy_restart`).
``deaths`` is read from the file of that name in the spec's writable folder; each load is counted in ``loads``."""

from __future__ import annotations

import os
import signal
import sys
from multiprocessing.connection import Connection

from app.runtime import messages
from app.runtime.backends.base import Resolved
from app.runtime.spec import Spec


def main(argv: list[str]) -> None:
    inbox = Connection(int(argv[0]), writable=False)
    outbox = Connection(int(argv[1]), readable=False)
    spec: Spec = inbox.recv()
    counter = spec.writable / "loads"
    while True:
        match inbox.recv():
            case messages.Load():
                loads = int(counter.read_text()) + 1 if counter.exists() else 1
                counter.write_text(str(loads))
                if loads <= int((spec.writable / "deaths").read_text()):
                    os.kill(os.getpid(), signal.SIGKILL)
                outbox.send(messages.Loaded(Resolved("fake", 1, 1, 1, "f32", 0.0, None)))
            case messages.Exit():
                os._exit(0)


if __name__ == "__main__":
    main(sys.argv[1:])
